package scheduler_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

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
		t.Run(tt.name, func(t *testing.T) {
			store := newMemStore()
			disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
			k := leafKind("account", 1)
			k.ResyncInterval = time.Hour
			d := &converge.Desired{
				Revision: converge.Revision{Ref: "main", Hash: "r1"},
				Kinds:    []*converge.Kind{k},
				Resources: []*converge.Resource{{Kind: "account", KindVersion: 1, Name: "a", Origin: converge.OriginGit,
					Declared: json.RawMessage(`{"team_name":"a"}`), Source: "a.cue:1"}},
			}
			h := start(t, store, disp, testConfig())
			h.apply(d, nil)
			h.waitSettled(scheduler.Converged, 5*time.Second)
			h.stop()

			store.mu.Lock()
			store.resources["account/a"].UpdatedAt = time.Now().Add(-tt.age)
			store.mu.Unlock()
			disp.resetLog()
			h2 := start(t, store, disp, testConfig())
			resynced := func() bool {
				for _, tk := range disp.tasks() {
					if tk.Name == "a" && tk.Reaction == converge.ReactionReconcile {
						return true
					}
				}
				return false
			}
			if tt.wantResync {
				waitFor(t, 5*time.Second, "the overdue resync", resynced)
				return
			}
			h2.waitSettled(scheduler.Converged, 5*time.Second)
			time.Sleep(100 * time.Millisecond)
			if got := resynced(); got {
				t.Errorf("resynced %v after a restart, want the rest of the hour's wait", got)
			}
		})
	}
}
