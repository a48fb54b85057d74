package scheduler_test

import (
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// TestSuspend: a suspended root's subtree, or everything, gets no
// dispatch until resumed; another root's suspension holds nothing here.
func TestSuspend(t *testing.T) {
	tests := []struct {
		name      string
		suspended []converge.ID
		wantHeld  bool
	}{
		{name: "root", suspended: []converge.ID{"classicbom/org"}, wantHeld: true},
		{name: "everything", suspended: []converge.ID{""}, wantHeld: true},
		{name: "another root", suspended: []converge.ID{"classicbom/other"}, wantHeld: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
			cfg := testConfig()
			cfg.Suspended = tt.suspended
			h := start(t, newMemStore(), disp, cfg)
			h.apply(classicDesired(makeBOM(1, 1), "c1"), classicValidator)
			if !tt.wantHeld {
				h.waitSettled(scheduler.Converged, 5*time.Second)
				return
			}
			waitFor(t, 5*time.Second, "the root held", func() bool { return h.s.Progress().Held > 0 })
			if got := len(disp.tasks()); got != 0 {
				t.Errorf("%d tasks dispatched while suspended, want 0", got)
			}
			if err := h.s.Suspend(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
			if p := h.waitSettled(scheduler.Converged, 5*time.Second); p.Held != 0 {
				t.Errorf("Held = %d once resumed, want 0", p.Held)
			}
		})
	}
}
