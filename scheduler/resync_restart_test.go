package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// convergedThenAged converges one account (its kind k) under settings,
// stops, ages the stored row by age and starts a new scheduler with cfg:
// a restart long after the row last changed. resynced reports whether the
// new one has since dispatched the account's reconcile.
func convergedThenAged(t *testing.T, k *converge.Kind, settings converge.Settings, age time.Duration, cfg scheduler.Config) (h *harness, resynced func() bool) {
	t.Helper()
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	d := &converge.Desired{
		Revision: converge.Revision{Ref: "main", Hash: "r1"},
		Settings: settings,
		Kinds:    []*converge.Kind{k},
		Resources: []*converge.Resource{{Kind: "account", KindVersion: 1, Name: "a", Origin: converge.OriginGit,
			Declared: json.RawMessage(`{"team_name":"a"}`), Source: "a.cue:1"}},
	}
	h0 := start(t, store, disp, testConfig())
	h0.apply(d, nil)
	h0.waitSettled(scheduler.Converged, 5*time.Second)
	h0.stop()

	store.mu.Lock()
	store.resources["account/a"].UpdatedAt = time.Now().Add(-age)
	store.mu.Unlock()
	disp.resetLog()
	h = start(t, store, disp, cfg)
	return h, func() bool {
		for _, tk := range disp.tasks() {
			if tk.Name == "a" && tk.Reaction == converge.ReactionReconcile {
				return true
			}
		}
		return false
	}
}

// A restart does not postpone a due resync: a Ready row last changed more
// than its interval ago resyncs as soon as the new scheduler runs, and one
// changed recently waits for the rest of its interval.
func TestResyncDueAcrossRestart(t *testing.T) {
	tests := []struct {
		name       string
		age        time.Duration // how long before the restart the row last changed
		wantResync bool
	}{
		{name: "overdue", age: 2 * time.Hour, wantResync: true},
		{name: "not yet due", age: time.Minute, wantResync: false},
	}
	for _, tt := range tests {
		// In a synctest bubble: "not yet" is checked half an hour on,
		// with every goroutine idle, not after a sleep that hopes.
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				k := leafKind("account", 1)
				k.ResyncInterval = time.Hour
				h, resynced := convergedThenAged(t, k, converge.Settings{}, tt.age, testConfig())
				if tt.wantResync {
					waitFor(t, 5*time.Second, "the overdue resync", resynced)
					// Counted as a resync: the metrics tell it from
					// work a change asked for.
					waitFor(t, 5*time.Second, "the resync counted", func() bool {
						st := reconcileStats(t, h, "account")
						return st.Dispatched == 1 && st.Resyncs == 1
					})
					return
				}
				if st := reconcileStats(t, h, "account"); st.Resyncs != 0 {
					t.Errorf("%d resyncs counted after a restart before the row's interval, want none", st.Resyncs)
				}
				h.waitSettled(scheduler.Converged, 5*time.Second)
				time.Sleep(30 * time.Minute)
				synctest.Wait()
				if resynced() {
					t.Errorf("resynced after a restart, want the rest of the hour's wait")
				}
			})
		})
	}
}

// A restart arms the loaded rows' resyncs with the repository's default
// interval as stored (Config.ResyncInterval) before any Apply: an overdue
// row of a kind that sets no interval resyncs at once. Without the stored
// default nothing is armed until an Apply says what the default is.
func TestStoredDefaultResyncArmsAtLoad(t *testing.T) {
	for _, stored := range []time.Duration{time.Hour, 0} {
		t.Run(stored.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := testConfig()
				cfg.ResyncInterval = stored
				h, resynced := convergedThenAged(t, leafKind("account", 1), converge.Settings{ResyncInterval: time.Hour}, 2*time.Hour, cfg)
				if stored > 0 {
					waitFor(t, 5*time.Second, "the overdue resync", resynced)
					return
				}
				h.waitSettled(scheduler.Converged, 5*time.Second)
				time.Sleep(30 * time.Minute)
				synctest.Wait()
				if resynced() {
					t.Errorf("resynced with no default known, want nothing armed before an Apply")
				}
			})
		})
	}
}

// A process that runs only until a revision converges (sync, delete, do:
// Config.PostponeLoadedResyncs) does not start the loaded rows' overdue
// resyncs; it arms them one interval from now.
func TestPostponeLoadedResyncs(t *testing.T) { synctest.Test(t, postponeLoadedResyncs) }

func postponeLoadedResyncs(t *testing.T) {
	k := leafKind("account", 1)
	k.ResyncInterval = time.Hour
	cfg := testConfig()
	cfg.PostponeLoadedResyncs = true
	h, resynced := convergedThenAged(t, k, converge.Settings{}, 2*time.Hour, cfg)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	time.Sleep(30 * time.Minute)
	synctest.Wait()
	if resynced() {
		t.Errorf("an overdue resync ran, want it postponed")
	}
}

// A task that ends before its lease leaves its lease timer behind; those
// are dropped in bulk, so the timer heap does not hold one entry per task
// of the last lease period (at a million resources, hundreds of
// thousands).
//
// In a synctest bubble: no lease, resync or flush timer fires early or
// late with the machine's load.
func TestEndedTasksLeaveNoLeaseTimers(t *testing.T) { synctest.Test(t, endedTasksLeaveNoLeaseTimers) }

func endedTasksLeaveNoLeaseTimers(t *testing.T) {
	const n = 10_000
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	d := &converge.Desired{
		Revision: converge.Revision{Ref: "main", Hash: "r1"},
		Kinds:    []*converge.Kind{leafKind("account", 1)},
	}
	for i := range n {
		d.Resources = append(d.Resources, &converge.Resource{Kind: "account", KindVersion: 1,
			Name: fmt.Sprintf("a-%05d", i), Origin: converge.OriginGit,
			Declared: json.RawMessage(`{"team_name":"a"}`), Source: "a.cue:1"})
	}
	cfg := testConfig()
	cfg.LeaseTTL = time.Hour // no lease timer fires during the test
	h := start(t, store, disp, cfg)
	h.apply(d, nil)
	h.waitSettled(scheduler.Converged, 30*time.Second)
	if got := scheduler.TimerLen(h.s); got > n/2 {
		t.Errorf("%d timers after %d tasks ended, want the ended tasks' lease timers dropped", got, n)
	}
}

// reconcileStats is h's reconcile counters of kind.
func reconcileStats(t *testing.T, h *harness, kind string) scheduler.TaskStats {
	t.Helper()
	mt, err := h.s.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range mt.Kinds {
		if k.Ref.Kind == kind {
			return k.Tasks[slices.Index(scheduler.Reactions[:], converge.ReactionReconcile)]
		}
	}
	return scheduler.TaskStats{}
}
