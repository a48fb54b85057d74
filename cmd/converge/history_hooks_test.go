package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/history"
	"github.com/convergehq/converge/providers/sdk"
	"github.com/convergehq/converge/state/etcdstate"
)

// The recorders of TestReplicasHistory. The converge processes a test
// starts are this test binary (TestMain), so these hooks run inside the
// real worker and replica processes, and only when the test asks for
// them through the environment:
//
//   - $CONVERGE_HISTORY_EFFECTS (a file): a builtin worker appends one
//     JSON line per task it completes successfully, a history.Effect for
//     a reconcile, compose or teardown, a history.Delivery for a react;
//   - $CONVERGE_HISTORY_ETCD (a file): a replica's etcd client appends
//     one JSON line (a history.Write) when it sends a transaction that
//     writes the store's data, and another when it is answered.
const (
	envHistoryEffects = "CONVERGE_HISTORY_EFFECTS"
	envHistoryEtcd    = "CONVERGE_HISTORY_ETCD"
)

func init() {
	if path := os.Getenv(envHistoryEffects); path != "" {
		workerProvidersHook = func(ps []sdk.Provider) []sdk.Provider { return recordEffects(path, ps) }
	}
	if path := os.Getenv(envHistoryEtcd); path != "" {
		replicaEtcdHook = func(o *etcdstate.Options, replica string) (func(), error) { return recordWrites(path, o, replica) }
	}
}

// jsonLog appends JSON lines to a file, one Write each, so lines of
// several processes appending to one file never interleave.
type jsonLog struct {
	mu sync.Mutex // serializes lines
	f  *os.File
}

func openJSONLog(path string) *jsonLog {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		panic(fmt.Sprintf("history log %s: %v", path, err))
	}
	return &jsonLog{f: f}
}

func (l *jsonLog) add(v any) {
	b, _ := json.Marshal(v)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Write(append(b, '\n'))
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// effectLine is one line of the effects log: an effect or a delivery.
type effectLine struct {
	Effect   *history.Effect   `json:"effect,omitempty"`
	Delivery *history.Delivery `json:"delivery,omitempty"`
}

// recordEffects wraps every handler of ps that has an effect (reconcile,
// compose, teardown, react) so that each success is logged to path.
// Dry-run composes change nothing and are not logged; nor are the
// parts of an incremental compose (ComposePart), whose task is logged
// only when it is answered in full (ComposeStream).
func recordEffects(path string, ps []sdk.Provider) []sdk.Provider {
	log := openJSONLog(path)
	worker := os.Getenv(sdk.EnvWorkerName)
	effect := func(reaction string, r *sdk.Request, call time.Time) {
		log.add(effectLine{Effect: &history.Effect{Worker: worker, Reaction: reaction, UID: r.UID,
			ID: string(converge.NewID(r.Kind, r.Name)), Gen: r.Generation, Key: r.Key, Spec: digest(r.Spec),
			Call: call.UnixNano(), Return: time.Now().UnixNano()}})
	}
	out := make([]sdk.Provider, len(ps))
	for i, p := range ps {
		if f := p.Reconcile; f != nil {
			p.Reconcile = func(ctx context.Context, r *sdk.Request) (any, error) {
				call := time.Now()
				st, err := f(ctx, r)
				if err == nil {
					effect(history.Reconcile, r, call)
				}
				return st, err
			}
		}
		if f := p.ComposeStream; f != nil {
			p.ComposeStream = func(ctx context.Context, r *sdk.Request, e *sdk.Emitter) error {
				call := time.Now()
				err := f(ctx, r, e)
				if err == nil && !r.DryRun {
					effect(history.Compose, r, call)
				}
				return err
			}
		}
		if f := p.Compose; f != nil {
			p.Compose = func(ctx context.Context, r *sdk.Request) (*sdk.Composition, error) {
				call := time.Now()
				c, err := f(ctx, r)
				if err == nil && !r.DryRun {
					effect(history.Compose, r, call)
				}
				return c, err
			}
		}
		if f := p.Teardown; f != nil {
			p.Teardown = func(ctx context.Context, r *sdk.Request) error {
				call := time.Now()
				err := f(ctx, r)
				if err == nil {
					effect(history.Teardown, r, call)
				}
				return err
			}
		}
		if f := p.React; f != nil {
			p.React = func(ctx context.Context, r *sdk.Request) error {
				call := time.Now()
				err := f(ctx, r)
				if err == nil && r.Subject != nil {
					log.add(effectLine{Delivery: &history.Delivery{Worker: worker, Key: r.Key,
						Resource: string(r.Subject.Resource), UID: r.Subject.UID, Gen: r.Subject.Generation,
						Transition: r.Subject.Transition, Status: digest(r.Subject.Status),
						Call: call.UnixNano(), Return: time.Now().UnixNano()}})
				}
				return err
			}
		}
		out[i] = p
	}
	return out
}

// dataKey reports whether key (under prefix, which ends in "/") is the
// store's data: anything but the writer's lock, the election, the
// followers' sync request, a replica's registration and the operators'
// intents (claimed at most once on the election key, answered under the
// operator's lease: not the store's rows).
func dataKey(prefix, key string) bool {
	rel, ok := strings.CutPrefix(key, prefix)
	return ok && rel != "lock" && rel != "sync" && !strings.HasPrefix(rel, "election/") &&
		!strings.HasPrefix(rel, "replica/") && !strings.HasPrefix(rel, "intent/")
}

// recordWrites gives o a client of its own whose every transaction that
// writes the store's data is logged to path: the lock and election
// create revisions its comparisons require, then its answer.
func recordWrites(path string, o *etcdstate.Options, replica string) (func(), error) {
	log := openJSONLog(path)
	prefix := strings.TrimSuffix(o.Prefix, "/") + "/"
	var seq atomic.Int64
	pid := os.Getpid()
	intercept := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		w, ok := describeWrite(prefix, req)
		if !ok {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		w.Replica, w.PID, w.Seq, w.Call = replica, pid, seq.Add(1), time.Now().UnixNano()
		log.add(w)
		err := invoker(ctx, method, req, reply, cc, opts...)
		w.Return = time.Now().UnixNano()
		if err != nil {
			w.Err = err.Error()
		} else {
			switch r := reply.(type) {
			case *pb.TxnResponse:
				w.Succeeded, w.Rev = r.Succeeded, r.GetHeader().GetRevision()
			case *pb.PutResponse:
				w.Succeeded, w.Rev = true, r.GetHeader().GetRevision()
			case *pb.DeleteRangeResponse:
				w.Succeeded, w.Rev = r.Deleted > 0, r.GetHeader().GetRevision()
			}
		}
		log.add(w)
		return err
	}
	dial := o.DialTimeout
	if dial == 0 {
		dial = 5 * time.Second
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: o.Endpoints, TLS: o.TLS, Username: o.Username, Password: o.Password,
		DialTimeout: dial, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(intercept)},
	})
	if err != nil {
		return nil, fmt.Errorf("history: etcd client: %w", err)
	}
	o.Client = cli
	return func() { cli.Close() }, nil
}

// describeWrite returns the history.Write of req when it writes data
// keys under prefix: a transaction (its fence read from its
// comparisons), or a bare put or delete (no fence at all).
func describeWrite(prefix string, req any) (history.Write, bool) {
	var w history.Write
	note := func(key []byte) {
		if dataKey(prefix, string(key)) {
			if w.Keys == 0 {
				w.FirstKey = string(key)
			}
			w.Keys++
		}
	}
	switch r := req.(type) {
	case *pb.TxnRequest:
		for _, op := range r.Success {
			switch {
			case op.GetRequestPut() != nil:
				note(op.GetRequestPut().Key)
			case op.GetRequestDeleteRange() != nil:
				note(op.GetRequestDeleteRange().Key)
			}
		}
		if w.Keys == 0 {
			return w, false
		}
		for _, c := range r.Compare {
			if c.Target != pb.Compare_CREATE {
				continue
			}
			if w.Keys == 1 && len(r.Compare) == 1 && string(c.Key) == w.FirstKey && c.GetCreateRevision() == 0 && c.Result == pb.Compare_EQUAL {
				w.CreateOnly = true
			}
			rel := strings.TrimPrefix(string(c.Key), prefix)
			switch {
			case rel == "lock":
				w.Lock = c.GetCreateRevision()
			case strings.HasPrefix(rel, "election/"):
				w.Election, w.ElectionKey = c.GetCreateRevision(), string(c.Key)
			}
		}
	case *pb.PutRequest:
		note(r.Key)
	case *pb.DeleteRangeRequest:
		note(r.Key)
	}
	return w, w.Keys > 0
}
