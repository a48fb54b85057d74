package scheduler_test

import (
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// convergedStore returns a store that holds d converged, written
// through and with no scheduler running on it.
func convergedStore(t *testing.T, d *converge.Desired) *memStore {
	t.Helper()
	st := newMemStore()
	h := start(t, st, newFakeDisp(classicHandler, &fakeWorker{name: "w1"}), testConfig())
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Converged, 10*time.Second)
	h.flush()
	h.stop()
	return st
}

// convergedRestart converges d, stops, and starts again on the same
// store: the loaded rows are packed.
func convergedRestart(t *testing.T, d *converge.Desired) *harness {
	t.Helper()
	st := convergedStore(t, d)
	h := start(t, st, newFakeDisp(classicHandler, &fakeWorker{name: "w1"}), testConfig())
	h.waitSettled(scheduler.Converged, 10*time.Second)
	return h
}

// TestPackedRowsStayPacked checks that what only reads rows leaves them
// packed: re-arming every resync for a new interval, a full recompose
// that adds one team (its unchanged children are compared, not
// changed), a Diff and an unchanged Apply.
func TestPackedRowsStayPacked(t *testing.T) {
	h := convergedRestart(t, classicDesired(makeBOM(2, 20), "c1"))
	packed, all := scheduler.PackedRows(h.s)
	if packed < all*9/10 {
		t.Fatalf("after a restart %d of %d rows are packed", packed, all)
	}
	check := func(what string, before int) {
		t.Helper()
		if p, _ := scheduler.PackedRows(h.s); p < before {
			t.Errorf("%s left %d packed rows decoded (%d packed before, %d after)", what, before-p, before, p)
		}
	}

	d := classicDesired(makeBOM(2, 20), "c1")
	d.Settings.ResyncInterval = time.Hour
	h.apply(d, classicValidator)
	// The re-arm runs in chunks beside other work: wait until it is done.
	waitFor(t, 5*time.Second, "the re-arm", func() bool { return scheduler.RearmPending(h.s) == 0 })
	h.flush()
	check("re-arming the resyncs", packed)

	packed, _ = scheduler.PackedRows(h.s)
	if _, err := h.s.Diff(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	check("a Diff", packed)
	h.apply(d, classicValidator)
	h.flush()
	check("an unchanged Apply", packed)

	packed, _ = scheduler.PackedRows(h.s)
	d = classicDesired(makeBOM(2, 21), "c2")
	d.Settings.ResyncInterval = time.Hour
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Converged, 10*time.Second)
	h.flush()
	// The root and the new team's rows change and are packed again once
	// durable; the unchanged ones must not be decoded.
	check("a recompose adding a team", packed)
}

// TestReadyRowsWaitPacked: a leaf that turns Ready waits for its commit
// packed. On a slow disk every leaf is Ready long before its row is
// durable; at 1M ~130,000 rows used to wait decoded for their commit.
func TestReadyRowsWaitPacked(t *testing.T) {
	st := newMemStore()
	st.commitDelay = 2 * time.Second
	h := start(t, st, newFakeDisp(classicHandler, &fakeWorker{name: "w1"}), testConfig())
	h.apply(classicDesired(makeBOM(2, 20), "c1"), classicValidator)
	waitFor(t, 20*time.Second, "every resource Ready in memory", func() bool {
		c := h.s.Progress().Counts
		return c.Total > 100 && c.Ready == c.Total
	})
	packed, all := scheduler.PackedRows(h.s)
	if packed < all*9/10 {
		t.Errorf("%d of %d Ready rows packed while their commits are slow, want 90%%", packed, all)
	}
	st.mu.Lock()
	st.commitDelay = 0
	st.mu.Unlock()
	h.stop()
}
