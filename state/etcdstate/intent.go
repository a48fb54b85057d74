package etcdstate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Operators' intents (doc.go, "Operators' intents"): an operator's
// changing command, run on a machine without a replica, writes what it
// wants done under intent/ID; the leader claims it (intent/ID/claim),
// carries it out and answers (intent/ID/reply). All three keys live under
// the operator's lease, so an operator that gives up (or dies) takes its
// intent with it, and the leader stops carrying it out.
const (
	kIntent  = "intent/"
	kClaim   = "/claim"
	kReply   = "/reply"
	kReplica = "replica/" // replica/NAME: a replica that ever campaigned here

	// intentTTL is the operator's lease: an intent outlives a dead
	// operator by this long at most.
	intentTTL = 10 // seconds
)

// Intent is an operator's request that the leader make one call of its
// admin API (state/stateapi: delete, do, control, reconcile, …), as the
// operator would over a daemon's admin socket. Whoever may write the
// prefix is trusted with the state; etcd's TLS and auth say who that is.
type Intent struct {
	// ID names the intent (random hex; Submit sets it).
	ID string `json:"id"`
	// Method, Path and Query are the admin API call: "POST",
	// "/v1/delete", "id=vpc%2Fa".
	Method string `json:"method"`
	Path   string `json:"path"`
	Query  string `json:"query,omitempty"`
	// Body is the call's JSON body, if any.
	Body json.RawMessage `json:"body,omitempty"`
	// Who and When say who asked (user@host, pid), and when.
	Who  string    `json:"who"`
	When time.Time `json:"when"`
}

// IntentClaim is a leader's promise to carry out an intent: written once
// per intent, in a transaction fenced on the leader's election key, so
// an intent is carried out at most once even across a takeover.
type IntentClaim struct {
	// Leader and Since name the term that claimed it.
	Leader string    `json:"leader"`
	Since  time.Time `json:"since"`
	At     time.Time `json:"at"`
}

// IntentReply is the leader's answer: the admin API's reply.
type IntentReply struct {
	// Status is the HTTP status the admin API answered (200, 404, …).
	Status int `json:"status"`
	// Warning is its warning header (stateapi.WarningHeader), if any.
	Warning string `json:"warning,omitempty"`
	// Body is its JSON body.
	Body json.RawMessage `json:"body"`
	// Leader is the replica that carried it out.
	Leader string    `json:"leader"`
	At     time.Time `json:"at"`
}

// PendingIntent is an intent a leader has to carry out.
type PendingIntent struct {
	Intent
	// Withdrawn is closed once the intent is gone (its operator gave up
	// or died): stop carrying it out.
	Withdrawn <-chan struct{}

	key   string
	lease clientv3.LeaseID
}

// Operator submits intents to the leader of a prefix, from a machine
// that runs no replica (a changing command with --state etcd://…).
type Operator struct {
	cli    *clientv3.Client
	ownCli bool
	prefix string
}

// NewOperator connects to the cluster o names.
func NewOperator(o Options) (*Operator, error) {
	if err := fill(&o); err != nil {
		return nil, fmt.Errorf("operator: %w", err)
	}
	op := &Operator{cli: o.Client, prefix: o.Prefix}
	if op.cli == nil {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: o.Endpoints, TLS: o.TLS, Username: o.Username, Password: o.Password,
			DialTimeout: o.DialTimeout, Logger: zap.NewNop(),
		})
		if err != nil {
			return nil, fmt.Errorf("connect %s: %w", strings.Join(o.Endpoints, ","), noAnswer(err))
		}
		op.cli, op.ownCli = cli, true
	}
	return op, nil
}

// Close closes the client if NewOperator dialed it.
func (op *Operator) Close() error {
	if op.ownCli {
		return op.cli.Close()
	}
	return nil
}

// Leader returns the current leader's advert, or ErrNoLeader.
func (op *Operator) Leader(ctx context.Context) (Advert, error) {
	return leader(ctx, op.cli, op.prefix)
}

// Replicas returns the names of the replicas that ever campaigned for
// the prefix (replica/NAME, which a replica's campaign writes and
// nothing removes but an operator: etcdctl del PREFIX/replica/NAME).
func (op *Operator) Replicas(ctx context.Context) ([]string, error) {
	resp, err := op.cli.Get(clientv3.WithRequireLeader(ctx), op.prefix+kReplica, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("read replicas: %w", noAnswer(err))
	}
	var names []string
	for _, kv := range resp.Kvs {
		names = append(names, strings.TrimPrefix(string(kv.Key), op.prefix+kReplica))
	}
	return names, nil
}

// NotTakenError is Submit's error when no leader claimed the intent in
// time. Leader is the leader then ("" for none: errors.Is ErrNoLeader).
type NotTakenError struct {
	Prefix string
	Leader string
	Waited time.Duration
	// Replicas are those that ever campaigned for the prefix.
	Replicas []string
}

func (e *NotTakenError) Error() string {
	if e.Leader == "" {
		served := ""
		if len(e.Replicas) > 0 {
			served = fmt.Sprintf("; %s served it (etcdctl del --prefix %s%s forgets them)", strings.Join(e.Replicas, ", "), e.Prefix, kReplica)
		}
		return fmt.Sprintf("no replica leads %s; waited %v for one to take the request: start one (converge serve --replica NAME), or see converge leader%s",
			strings.TrimSuffix(e.Prefix, "/"), e.Waited, served)
	}
	return fmt.Sprintf("the leader %s of %s did not take the request within %v (a converge too old to carry out operators' intents?)",
		e.Leader, strings.TrimSuffix(e.Prefix, "/"), e.Waited)
}

// Is makes a NotTakenError without a leader ErrNoLeader.
func (e *NotTakenError) Is(target error) bool { return target == ErrNoLeader && e.Leader == "" }

// ErrLeaderLost is Submit's error when the leader that claimed the
// intent stopped leading before it answered: the intent may or may not
// have taken effect, and no other leader carries it out.
var ErrLeaderLost = errors.New("the leader stopped leading before it answered")

// Submit writes in as an intent (ID, Who and When filled in) under a
// lease of its own and waits for the leader's reply: up to take for a
// leader to claim it (a replica that wins meanwhile takes it too), then
// until ctx is done. Returning withdraws the intent: a leader still
// carrying it out is told to stop (PendingIntent.Withdrawn).
func (op *Operator) Submit(ctx context.Context, in Intent, take time.Duration) (*IntentReply, error) {
	var b [12]byte
	rand.Read(b[:]) // crypto/rand never fails
	in.ID = hex.EncodeToString(b[:])
	in.When = time.Now().UTC()
	if in.Who == "" {
		in.Who = whoAmI()
	}
	v, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("intent: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Writing the intent is bounded: a cluster that does not answer (no
	// quorum) fails the command rather than hold it.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	lease, err := op.cli.Grant(clientv3.WithRequireLeader(wctx), intentTTL)
	if err != nil {
		return nil, fmt.Errorf("intent: grant lease: %w", noAnswer(err))
	}
	defer func() {
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer rcancel()
		op.cli.Revoke(rctx, lease.ID) // best effort: it expires anyway
	}()
	ka, err := op.cli.KeepAlive(ctx, lease.ID)
	if err != nil {
		return nil, fmt.Errorf("intent: keep lease alive: %w", err)
	}
	go func() {
		for range ka { // drain the renewals until ctx ends
		}
	}()
	key := op.prefix + kIntent + in.ID
	put, err := op.cli.Put(clientv3.WithRequireLeader(wctx), key, string(v), clientv3.WithLease(lease.ID))
	if err != nil {
		return nil, fmt.Errorf("intent: write %s: %w", key, noAnswer(err))
	}
	wc := follow(ctx, op.cli, key+"/", put.Header.Revision+1, clientv3.WithPrefix())
	takeBy := time.NewTimer(take)
	defer takeBy.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var claim *IntentClaim
	for {
		select {
		case resp, ok := <-wc:
			if !ok || resp.Err() != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("intent: watch %s: %v", key, resp.Err())
			}
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				switch string(ev.Kv.Key) {
				case key + kClaim:
					claim = new(IntentClaim)
					if err := json.Unmarshal(ev.Kv.Value, claim); err != nil {
						return nil, fmt.Errorf("intent: %s: %w", ev.Kv.Key, err)
					}
				case key + kReply:
					r := new(IntentReply)
					if err := json.Unmarshal(ev.Kv.Value, r); err != nil {
						return nil, fmt.Errorf("intent: %s: %w", ev.Kv.Key, err)
					}
					return r, nil
				}
			}
		case <-takeBy.C:
			if claim != nil {
				continue
			}
			a, err := op.Leader(ctx)
			if err != nil && !errors.Is(err, ErrNoLeader) {
				return nil, err
			}
			nt := &NotTakenError{Prefix: op.prefix, Leader: a.Name, Waited: take}
			if a.Name == "" {
				nt.Replicas, _ = op.Replicas(ctx) // a hint only
			}
			return nil, nt
		case <-tick.C:
			if claim == nil {
				continue
			}
			a, err := op.Leader(ctx)
			if errors.Is(err, ErrNoLeader) || err == nil && (a.Name != claim.Leader || !a.Since.Equal(claim.Since)) {
				return nil, fmt.Errorf("%w: %s took the request at %s; it may or may not have taken effect (converge events shows what was done)",
					ErrLeaderLost, claim.Leader, claim.At.Format(time.RFC3339))
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// whoAmI is the operator's user@host and pid.
func whoAmI() string {
	user := os.Getenv("USER")
	if user == "" {
		user = fmt.Sprint(os.Getuid())
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s@%s (pid %d)", user, host, os.Getpid())
}

// register records that this replica serves the prefix (replica/NAME):
// operators' changing commands then go through the leader, never start
// an engine of their own (Operator.Replicas).
func (r *Replica) register(ctx context.Context) error {
	if r.registered {
		return nil // a campaign after a lost term writes nothing new
	}
	host, _ := os.Hostname()
	v, _ := json.Marshal(map[string]any{"name": r.name, "host": host, "at": time.Now().UTC()})
	if _, err := r.cli.Put(ctx, r.opts.Prefix+kReplica+r.name, string(v)); err != nil {
		return fmt.Errorf("register replica %s: %w", r.name, noAnswer(err))
	}
	r.registered = true
	return nil
}

// Intents returns the intents the term has to carry out: those pending
// when it began (unclaimed) and every one written since, until ctx is
// done.
func (t *Term) Intents(ctx context.Context) <-chan PendingIntent {
	out := make(chan PendingIntent)
	go func() {
		defer close(out)
		p := t.r.opts.Prefix + kIntent
		resp, err := t.r.cli.Get(ctx, p, clientv3.WithPrefix())
		if err != nil {
			return // the term's context ended (or etcd went): the next term lists them again
		}
		claimed := map[string]bool{}
		for _, kv := range resp.Kvs {
			if k, ok := strings.CutSuffix(string(kv.Key), kClaim); ok {
				claimed[k] = true
			}
		}
		withdrawn := map[string]chan struct{}{}
		send := func(kv []byte, key string, lease int64) bool {
			var in Intent
			if json.Unmarshal(kv, &in) != nil {
				return true // not an intent we can read: its operator times out
			}
			w := make(chan struct{})
			withdrawn[key] = w
			select {
			case out <- PendingIntent{Intent: in, Withdrawn: w, key: key, lease: clientv3.LeaseID(lease)}:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for _, kv := range resp.Kvs {
			k := string(kv.Key)
			if strings.Contains(strings.TrimPrefix(k, p), "/") || claimed[k] {
				continue
			}
			if !send(kv.Value, k, kv.Lease) {
				return
			}
		}
		wc := follow(ctx, t.r.cli, p, resp.Header.Revision+1, clientv3.WithPrefix())
		for wr := range wc {
			for _, ev := range wr.Events {
				k := string(ev.Kv.Key)
				if strings.Contains(strings.TrimPrefix(k, p), "/") {
					continue // a claim or a reply
				}
				switch {
				case ev.Type == clientv3.EventTypeDelete:
					if w := withdrawn[k]; w != nil {
						close(w)
						delete(withdrawn, k)
					}
				case ev.IsCreate():
					if !send(ev.Kv.Value, k, ev.Kv.Lease) {
						return
					}
				}
			}
		}
	}()
	return out
}

// Claim claims p for this term, in a transaction fenced on the term's
// election key: true when this term is to carry it out; false when
// another did or it was withdrawn meanwhile.
func (t *Term) Claim(ctx context.Context, p PendingIntent) (bool, error) {
	v, _ := json.Marshal(IntentClaim{Leader: t.Advert.Name, Since: t.Advert.Since, At: time.Now().UTC()})
	resp, err := t.r.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(t.election.Key()), "=", t.election.Rev()),
		clientv3.Compare(clientv3.CreateRevision(p.key), ">", 0),
		clientv3.Compare(clientv3.CreateRevision(p.key+kClaim), "=", 0),
	).Then(clientv3.OpPut(p.key+kClaim, string(v), clientv3.WithLease(p.lease))).Commit()
	if err != nil {
		return false, fmt.Errorf("claim intent %s: %w", p.ID, err)
	}
	return resp.Succeeded, nil
}

// Answer writes the reply to p for its operator (nothing when the
// operator has given up meanwhile).
func (t *Term) Answer(ctx context.Context, p PendingIntent, r IntentReply) error {
	r.Leader, r.At = t.Advert.Name, time.Now().UTC()
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("answer intent %s: %w", p.ID, err)
	}
	_, err = t.r.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(p.key), ">", 0)).
		Then(clientv3.OpPut(p.key+kReply, string(v), clientv3.WithLease(p.lease))).Commit()
	if err != nil {
		return fmt.Errorf("answer intent %s: %w", p.ID, err)
	}
	return nil
}
