package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// stoppingDisp is a dispatcher that stops its scheduler's Run (cancels
// its context) at the nth dispatch, and then refuses every dispatch on
// the cancelled context, as providers.Server does.
type stoppingDisp struct {
	*fakeDisp
	mu     sync.Mutex
	n      int
	cancel context.CancelFunc
}

func (d *stoppingDisp) Dispatch(ctx context.Context, t *converge.Task) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dispatch %s: %w", t.ID, err)
	}
	d.mu.Lock()
	d.n--
	stop := d.n == 0
	d.mu.Unlock()
	if stop {
		d.cancel()
		return fmt.Errorf("dispatch %s: %w", t.ID, ctx.Err())
	}
	return d.fakeDisp.Dispatch(ctx, t)
}

// TestStoppedRunFailsNothing: a Run stopped while it dispatches (a
// replica's lost term, a shutdown) leaves what it had not dispatched as
// it was: no resource is stored failed with "dispatch: context
// canceled" by its last flush.
func TestStoppedRunFailsNothing(t *testing.T) {
	store := newMemStore()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	disp := &stoppingDisp{fakeDisp: newFakeDisp(classicHandler, &fakeWorker{name: "w1"}), n: 5, cancel: cancel}
	s, err := scheduler.New(context.Background(), store, disp, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	if _, err := s.Apply(context.Background(), classicDesired(makeBOM(3, 4), "c1"), classicValidator); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	if len(store.all()) < 2 {
		t.Fatalf("%d resources stored: the run stopped before the root composed", len(store.all()))
	}
	for _, r := range store.all() {
		if strings.Contains(r.LastError, "context canceled") || strings.Contains(r.Reason, "context canceled") {
			t.Errorf("%s stored %s: %q (reason %q)", r.ID(), r.Phase, r.LastError, r.Reason)
		}
	}
}
