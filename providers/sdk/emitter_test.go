package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/convergehq/converge"
)

// An Emitter holds at most the part it fills and the one on its way: it
// waits for a part to leave before it queues the next, so a streamed
// composition of any size costs the worker about two parts. The wait is
// shown without timing: with the first part still queued and the context
// cancelled, the child that needs the next part returns the context's
// error instead of queueing it; once the part has left, it goes on.
func TestEmitterWaitsForThePartInFlight(t *testing.T) {
	out := &outbox{wake: make(chan struct{}, 1), parts: true, maxMsg: maxMsgSize}
	var answered atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	e := &Emitter{ctx: ctx, taskID: "t1", out: out, answered: &answered}
	child := func(i int) error {
		return e.Child(converge.Child{Kind: "leaf", KindVersion: 1, Name: fmt.Sprint("c", i), Spec: []byte(`{}`)})
	}
	queued := func() []outItem {
		out.mu.Lock()
		defer out.mu.Unlock()
		return append([]outItem(nil), out.results...)
	}
	// Two parts' worth: the first is queued, the second filled.
	for i := range 2 * partItems {
		if err := child(i); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
	}
	q := queued()
	if len(q) != 1 || len(q[0].res.Children) != partItems || !q[0].res.More || q[0].sent == nil {
		t.Fatalf("queued %d items, want the first full part alone", len(q))
	}
	cancel()
	if err := child(2 * partItems); !errors.Is(err, context.Canceled) {
		t.Fatalf("a third part while the first is queued: err = %v, want the context's (the emitter must wait)", err)
	}
	if n := len(queued()); n != 1 {
		t.Fatalf("%d parts queued while the first had not left, want 1", n)
	}

	// The sender sends it: a fresh emitter in the same state goes on.
	out.mu.Lock()
	out.results = out.results[:0]
	out.mu.Unlock()
	e2 := &Emitter{ctx: context.Background(), taskID: "t2", out: out, answered: &answered}
	for i := range 2 * partItems {
		if err := e2.Child(converge.Child{Kind: "leaf", KindVersion: 1, Name: fmt.Sprint("d", i), Spec: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	first := queued()[0]
	close(first.sent)
	if err := e2.Child(converge.Child{Kind: "leaf", KindVersion: 1, Name: "last", Spec: []byte(`{}`)}); err != nil {
		t.Fatalf("after the first part left: %v", err)
	}
	if q := queued(); len(q) != 2 || len(q[1].res.Children) != partItems {
		t.Fatalf("after the first part left, queued %d items, want the second part behind it", len(q))
	}
	if got := e2.take(); len(got.Children) != 1 {
		t.Errorf("the part being filled has %d children, want 1", len(got.Children))
	}
}
