package scheduler_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// TestResyncNow: Resync reconciles a Ready resource at once (its kind
// has no resync interval, so nothing else would), says so, refuses an
// unknown id with ErrNotFound and queues nothing for a resource that
// is not Ready.
func TestResyncNow(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(1, 1), "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	const id = converge.ID("account/fd-01-team-001")
	count := func() int {
		n := 0
		for _, tk := range disp.tasks() {
			if converge.NewID(tk.Kind, tk.Name) == id {
				n++
			}
		}
		return n
	}
	before := count()
	msg, err := h.s.Resync(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if want := "account/fd-01-team-001: resync queued"; msg != want {
		t.Errorf("Resync = %q, want %q", msg, want)
	}
	waitFor(t, 5*time.Second, "the resync's task", func() bool { return count() == before+1 })
	h.waitSettled(scheduler.Converged, 5*time.Second)

	if _, err := h.s.Resync(t.Context(), "account/nope"); !errors.Is(err, converge.ErrNotFound) {
		t.Errorf("Resync of an unknown id: %v, want ErrNotFound", err)
	}
}

// TestResyncNotReady: a resource that is not Ready is not resynced; the
// answer names its phase.
func TestResyncNotReady(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1", serves: map[converge.KindRef][]string{{Kind: "classicbom", Version: 1}: {"compose"}}})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(1, 1), "c1"), classicValidator)
	var msg string
	var err error
	waitFor(t, 5*time.Second, "the composed account", func() bool {
		msg, err = h.s.Resync(t.Context(), "account/fd-01-team-001")
		return !errors.Is(err, converge.ErrNotFound)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "is Pending") || !strings.Contains(msg, "nothing queued") {
		t.Errorf("Resync of a parked resource = %q, want it to say Pending and nothing queued", msg)
	}
}
