package sdk

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergehq/converge"
)

// An Emitter holds at most the part it fills and the one on its way: it
// waits for a part to leave before it queues the next, so a streamed
// composition of any size costs the worker about two parts.
func TestEmitterWaitsForThePartInFlight(t *testing.T) {
	out := &outbox{wake: make(chan struct{}, 1), parts: true, maxMsg: maxMsgSize}
	var answered atomic.Bool
	e := &Emitter{ctx: context.Background(), taskID: "t1", out: out, answered: &answered}
	var made atomic.Int64
	done := make(chan error, 1)
	go func() {
		for i := range 3 * partItems {
			if err := e.Child(converge.Child{Kind: "leaf", KindVersion: 1, Name: fmt.Sprint("c", i), Spec: []byte(`{}`)}); err != nil {
				done <- err
				return
			}
			made.Add(1)
		}
		done <- nil
	}()
	queued := func() []outItem {
		out.mu.Lock()
		defer out.mu.Unlock()
		return append([]outItem(nil), out.results...)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(queued()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	// The first part is queued and not sent: the emitter may fill a
	// second part but not queue it.
	time.Sleep(50 * time.Millisecond)
	if q := queued(); len(q) != 1 || len(q[0].res.Children) != partItems || !q[0].res.More {
		t.Fatalf("queued %d items, want the first full part alone", len(q))
	}
	if n := made.Load(); n > 2*partItems {
		t.Fatalf("%d children made while the first part waits; want at most two parts' worth", n)
	}
	// The sender sends it: the emitter goes on.
	first := queued()[0]
	out.mu.Lock()
	out.results = out.results[:0]
	out.mu.Unlock()
	close(first.sent)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if q := queued(); len(q) != 1 || len(q[0].res.Children) != partItems {
		t.Fatalf("after the first part left, queued %d items, want the second part", len(q))
	}
	if got := e.take(); len(got.Children) != partItems {
		t.Errorf("the part being filled has %d children, want %d", len(got.Children), partItems)
	}
}
