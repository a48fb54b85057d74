package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	gosync "sync"
	"time"

	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/stateapi"
)

// Operators' intents: a changing command run with --state etcd://… on a
// machine without a replica reaches the leader's admin API through etcd
// (etcdstate.Intent) rather than over a socket or a listener of its own:
// whoever may write the prefix is already trusted with the state, and
// etcd's TLS and auth say who that is. The leader carries each intent
// out once (Term.Claim, fenced on its election key) through the same
// handler its admin socket serves, and answers (Term.Answer).

// serveIntents carries out the intents of term through h (the term's
// engine's admin API) until ctx is done, each in its own goroutine; it
// returns once those in flight have ended (ctx's end stops them).
func serveIntents(ctx context.Context, term *etcdstate.Term, h http.Handler, log *slog.Logger) {
	var wg gosync.WaitGroup
	defer wg.Wait()
	for p := range term.Intents(ctx) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runIntent(ctx, term, h, p, log)
		}()
	}
}

// runIntent claims p and, when this term is to carry it out, calls h
// with it and answers with what h replied.
func runIntent(ctx context.Context, term *etcdstate.Term, h http.Handler, p etcdstate.PendingIntent, log *slog.Logger) {
	ok, err := term.Claim(ctx, p)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("operator intent", "id", p.ID, "who", p.Who, "err", err)
		}
		return
	}
	if !ok {
		return // another term took it, or its operator withdrew it
	}
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.Withdrawn:
			cancel()
		case <-ictx.Done():
		}
	}()
	start := time.Now()
	rep := callIntent(ictx, h, p.Intent)
	log.Info("operator intent", "id", p.ID, "who", p.Who, "call", p.Method+" "+p.Path+"?"+p.Query,
		"status", rep.Status, "took", time.Since(start).Round(time.Millisecond))
	if ictx.Err() != nil && ctx.Err() == nil {
		return // withdrawn: no one waits for the answer
	}
	if err := term.Answer(ctx, p, rep); err != nil && ctx.Err() == nil {
		log.Warn("operator intent", "id", p.ID, "who", p.Who, "err", err)
	}
}

// callIntent makes the admin API call in describes on h and returns its
// reply (a body that is not JSON, such as the mux's 404 text, becomes a
// JSON error).
func callIntent(ctx context.Context, h http.Handler, in etcdstate.Intent) etcdstate.IntentReply {
	if !strings.HasPrefix(in.Path, "/v1/") {
		return errorReply(http.StatusBadRequest, fmt.Sprintf("intent %s: %s is not an admin API call", in.ID, in.Path))
	}
	var body io.Reader
	if len(in.Body) > 0 {
		body = bytes.NewReader(in.Body)
	}
	req, err := http.NewRequestWithContext(ctx, in.Method, "http://converge"+in.Path+"?"+in.Query, body)
	if err != nil {
		return errorReply(http.StatusBadRequest, fmt.Sprintf("intent %s: %v", in.ID, err))
	}
	w := &replyRecorder{header: http.Header{}, status: http.StatusOK}
	h.ServeHTTP(w, req)
	b := bytes.TrimSpace(w.body.Bytes())
	if !json.Valid(b) {
		return errorReply(w.status, string(b))
	}
	return etcdstate.IntentReply{Status: w.status, Warning: w.header.Get(stateapi.WarningHeader), Body: b}
}

// errorReply is a reply of status carrying msg as the admin API's error.
func errorReply(status int, msg string) etcdstate.IntentReply {
	b, _ := json.Marshal(map[string]string{"error": msg})
	return etcdstate.IntentReply{Status: status, Body: b}
}

// replyRecorder is the http.ResponseWriter an intent's call writes to.
type replyRecorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *replyRecorder) Header() http.Header { return r.header }

func (r *replyRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
}

func (r *replyRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}

// LeaderClient is the admin API of the replica that leads an etcd state,
// reached through operators' intents: what delete, do, rollback,
// suspend, resume and reconcile use on a machine that runs no replica.
type LeaderClient struct {
	*stateapi.Client
	op *etcdstate.Operator
	t  *intentTransport
}

// DialLeader connects to the etcd cluster o names; each call then waits
// up to take for a leader to take it (a replica that wins meanwhile
// does).
func DialLeader(o *etcdstate.Options, take time.Duration) (*LeaderClient, error) {
	op, err := etcdstate.NewOperator(*o)
	if err != nil {
		return nil, err
	}
	t := &intentTransport{op: op, take: take}
	return &LeaderClient{Client: stateapi.NewClient(t), op: op, t: t}, nil
}

// Operator is the client's etcd side (who leads, which replicas serve).
func (c *LeaderClient) Operator() *etcdstate.Operator { return c.op }

// Answered returns the name of the leader that answered the newest
// call, "" before any did.
func (c *LeaderClient) Answered() string {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	return c.t.leader
}

// Close closes the etcd client.
func (c *LeaderClient) Close() error { return c.op.Close() }

// intentTransport carries admin API requests as intents.
type intentTransport struct {
	op   *etcdstate.Operator
	take time.Duration

	mu     gosync.Mutex // guards leader
	leader string
}

// RoundTrip implements http.RoundTripper.
func (t *intentTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	in := etcdstate.Intent{Method: req.Method, Path: req.URL.Path, Query: req.URL.RawQuery}
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		if b = bytes.TrimSpace(b); len(b) > 0 {
			if !json.Valid(b) {
				return nil, fmt.Errorf("intent %s %s: the body is not JSON", req.Method, req.URL.Path)
			}
			in.Body = b
		}
	}
	rep, err := t.op.Submit(req.Context(), in, t.take)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.leader = rep.Leader
	t.mu.Unlock()
	h := http.Header{"Content-Type": {"application/json"}}
	if rep.Warning != "" {
		h.Set(stateapi.WarningHeader, rep.Warning)
	}
	return &http.Response{StatusCode: rep.Status, Status: fmt.Sprintf("%d %s", rep.Status, http.StatusText(rep.Status)),
		Header: h, Body: io.NopCloser(bytes.NewReader(rep.Body)), Request: req, ContentLength: int64(len(rep.Body))}, nil
}
