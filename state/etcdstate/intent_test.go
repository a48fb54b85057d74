package etcdstate_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge/state/etcdstate"
)

// operator returns an Operator of prefix, closed when t ends.
func operator(t *testing.T, prefix string) *etcdstate.Operator {
	t.Helper()
	op, err := etcdstate.NewOperator(etcdstate.Options{Endpoints: one.Endpoints, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { op.Close() })
	return op
}

// TestIntentNoLeader: with no replica, an intent waits the take time
// and fails as ErrNoLeader naming the prefix; Replicas is empty.
func TestIntentNoLeader(t *testing.T) {
	prefix := newPrefix()
	op := operator(t, prefix)
	_, err := op.Submit(t.Context(), etcdstate.Intent{Method: "POST", Path: "/v1/delete", Query: "id=vpc%2Fa"}, 300*time.Millisecond)
	var nt *etcdstate.NotTakenError
	if !errors.As(err, &nt) || !errors.Is(err, etcdstate.ErrNoLeader) || !strings.Contains(err.Error(), "no replica leads "+strings.TrimSuffix(prefix, "/")) {
		t.Fatalf("Submit without a leader: %v, want a NotTakenError that is ErrNoLeader naming %s", err, prefix)
	}
	if names, err := op.Replicas(t.Context()); err != nil || len(names) != 0 {
		t.Errorf("Replicas = %v, %v; want none", names, err)
	}
}

// TestIntentClaimedOnceAndAnswered: an intent written before any replica
// leads is taken by the term that wins; a second term of another
// replica does not get it again; the answer reaches the operator, and
// the intent's keys go with the operator's lease. Replicas names the
// replica that campaigned.
func TestIntentClaimedOnceAndAnswered(t *testing.T) {
	prefix := newPrefix()
	op := operator(t, prefix)
	rs := replicas(t, prefix, "a", "b")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	type result struct {
		rep *etcdstate.IntentReply
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := op.Submit(ctx, etcdstate.Intent{Method: "POST", Path: "/v1/do", Query: "id=vpc%2Fa", Body: json.RawMessage(`{"verb":"x"}`)}, 20*time.Second)
		done <- result{rep, err}
	}()
	// The intent is there before a leader is.
	cli := one.Client(t)
	intentKeys := func() int64 {
		resp, err := cli.Get(ctx, prefix+"/intent/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	for intentKeys() == 0 {
		select {
		case r := <-done:
			t.Fatalf("Submit returned before any leader: %+v", r)
		case <-time.After(10 * time.Millisecond):
		}
	}
	term, err := rs[0].Campaign(ctx, etcdstate.Advert{})
	if err != nil {
		t.Fatal(err)
	}
	intents := term.Intents(ctx)
	var p etcdstate.PendingIntent
	select {
	case p = <-intents:
	case <-ctx.Done():
		t.Fatal("the leader got no intent")
	}
	if p.Method != "POST" || p.Path != "/v1/do" || p.Query != "id=vpc%2Fa" || string(p.Body) != `{"verb":"x"}` || p.Who == "" || p.When.IsZero() {
		t.Errorf("pending intent = %+v", p.Intent)
	}
	ok, err := term.Claim(ctx, p)
	if err != nil || !ok {
		t.Fatalf("claim: %v, %v; want true", ok, err)
	}
	if ok, err := term.Claim(ctx, p); err != nil || ok {
		t.Errorf("second claim: %v, %v; want false", ok, err)
	}
	// A term that ended cannot claim: its election key is gone.
	if err := term.End(); err != nil {
		t.Fatal(err)
	}
	second, err := rs[1].Campaign(ctx, etcdstate.Advert{})
	if err != nil {
		t.Fatal(err)
	}
	defer second.End()
	select {
	case q := <-second.Intents(ctx):
		t.Fatalf("the next term got the claimed intent %s again", q.ID)
	case <-time.After(500 * time.Millisecond):
	}
	if err := second.Answer(ctx, p, etcdstate.IntentReply{Status: 200, Body: json.RawMessage(`{"outcome":"ok"}`)}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	// The claim's term ended before the answer, which Submit may notice
	// first (it looks once a second); else it has the answer.
	if r.err != nil && !errors.Is(r.err, etcdstate.ErrLeaderLost) {
		t.Fatalf("Submit: %v", r.err)
	}
	if r.err == nil && (r.rep.Status != 200 || string(r.rep.Body) != `{"outcome":"ok"}` || r.rep.Leader != "b") {
		t.Errorf("reply = %+v", r.rep)
	}
	names, err := op.Replicas(ctx)
	if err != nil || strings.Join(names, ",") != "a,b" {
		t.Errorf("Replicas = %v, %v; want a,b", names, err)
	}
	// Submit withdrew the intent, its claim and its reply as it returned.
	if n := intentKeys(); n != 0 {
		t.Errorf("%d intent keys left after Submit returned", n)
	}
}

// TestIntentWithdrawn: an operator that gives up closes the leader's
// Withdrawn, and the leader's claim then fails.
func TestIntentWithdrawn(t *testing.T) {
	prefix := newPrefix()
	op := operator(t, prefix)
	rs := replicas(t, prefix, "a")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	term, err := rs[0].Campaign(ctx, etcdstate.Advert{})
	if err != nil {
		t.Fatal(err)
	}
	defer term.End()
	intents := term.Intents(ctx)
	sctx, giveUp := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := op.Submit(sctx, etcdstate.Intent{Method: "POST", Path: "/v1/reconcile"}, 20*time.Second)
		errc <- err
	}()
	p := <-intents
	giveUp()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Submit after giving up: %v", err)
	}
	select {
	case <-p.Withdrawn:
	case <-time.After(10 * time.Second):
		t.Fatal("Withdrawn not closed 10s after the operator gave up")
	}
	if ok, err := term.Claim(ctx, p); err != nil || ok {
		t.Errorf("claim of a withdrawn intent: %v, %v; want false", ok, err)
	}
}
