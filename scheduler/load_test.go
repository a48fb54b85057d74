package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// loadOnly hides a store's LoadStream: New loads it whole (Load).
type loadOnly struct{ scheduler.Store }

// TestLoadStreamed: a converged store loads the same graph whether its
// rows arrive one at a time (packed as they come), whole, or one at a
// time in a read that starts again half-way (etcd's, when its revision
// is compacted under it): every invariant holds, the rows at rest are
// packed, and applying the same revision again runs nothing.
func TestLoadStreamed(t *testing.T) {
	bom := makeBOM(3, 10)
	store := convergedStore(t, classicDesired(bom, "c1"))
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	total := bomSize(3, 10) + 1
	for _, tc := range []struct {
		name     string
		store    scheduler.Store
		restarts int
		streamed int
	}{
		{"streamed", store, 0, 1},
		{"whole", loadOnly{store}, 0, 0},
		{"restarted twice", store, 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store.mu.Lock()
			store.restartLoads, store.streamed = tc.restarts, 0
			store.mu.Unlock()
			disp.resetLog()
			h := start(t, tc.store, disp, testConfig())
			if err := scheduler.CheckInvariants(h.s); err != nil {
				t.Fatal(err)
			}
			if got := h.s.Progress().Counts; got.Total != total || got.Ready != total {
				t.Fatalf("loaded %+v, want %d Ready", got, total)
			}
			// Every leaf is at rest; the root (a composer) is not packed.
			if got, _ := scheduler.PackedRows(h.s); got != total-1 {
				t.Errorf("%d rows packed after the load, want %d", got, total-1)
			}
			if store.streamed != tc.streamed {
				t.Errorf("LoadStream called %d times, want %d", store.streamed, tc.streamed)
			}
			h.apply(classicDesired(bom, "c1"), classicValidator)
			h.waitSettled(scheduler.Converged, 10*time.Second)
			if n := len(disp.tasks()); n != 0 {
				t.Errorf("%d tasks after loading a converged store and applying its revision again, want 0", n)
			}
			if err := scheduler.CheckInvariants(h.s); err != nil {
				t.Fatal(err)
			}
			h.stop()
		})
	}
}

// TestLoadStreamedOrphan: a row packed as it loads whose owner's row is
// not in the store keeps its owner's ID.
func TestLoadStreamedOrphan(t *testing.T) {
	store := convergedStore(t, classicDesired(makeBOM(1, 1), "c1"))
	var leaf *converge.Resource
	for _, r := range store.all() {
		if r.Owner != "" && leaf == nil {
			leaf = r
		}
	}
	if leaf == nil {
		t.Fatal("no composed row")
	}
	orphan := *leaf
	orphan.Name, orphan.Owner, orphan.UID = "orphan", "classicbom/gone", "u-orphan"
	store.mu.Lock()
	store.resources[orphan.ID()] = &orphan
	store.mu.Unlock()
	h := start(t, store, newFakeDisp(classicHandler, &fakeWorker{name: "w1"}), testConfig())
	var owner converge.ID
	if err := h.s.Graph().Read(context.Background(), func(v scheduler.GraphView) {
		if r := v.Get(orphan.ID()); r != nil {
			owner = r.Owner
		}
	}); err != nil {
		t.Fatal(err)
	}
	if owner != "classicbom/gone" {
		t.Fatalf("the orphan's owner is %q after the load, want classicbom/gone", owner)
	}
}
