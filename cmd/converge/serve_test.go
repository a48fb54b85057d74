package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/statetest"
)

// serve stops the live site before it closes the store: stop must not
// return while the site's goroutine still runs.
func TestGoUntilStoppedWaits(t *testing.T) {
	var finished atomic.Bool
	stop := goUntilStopped(context.Background(), func(ctx context.Context) {
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // a last update of the site
		finished.Store(true)
	})
	stop()
	if !finished.Load() {
		t.Fatal("stop returned before the goroutine finished")
	}
}

// A restarted serve picks up the applied revision whose verdict is still
// pending, and only that one.
func TestPendingPass(t *testing.T) {
	rev := converge.Revision{Ref: "main", Hash: "a1"}
	tests := []struct {
		name    string
		applied *converge.Revision
		sync    string // the record's converge/sync state; "" for no record
		want    bool
	}{
		{name: "nothing applied"},
		{name: "pending", applied: &rev, sync: converge.StatePending, want: true},
		{name: "judged", applied: &rev, sync: converge.StateSuccess},
		{name: "no record", applied: &rev},
		{name: "dirty work tree", applied: &converge.Revision{Ref: "main", Hash: "dirty-1", Dirty: true}, sync: converge.StatePending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := statetest.Open(t)
			if tt.applied != nil {
				if err := st.Commit(&converge.Batch{Applied: tt.applied}); err != nil {
					t.Fatal(err)
				}
			}
			if tt.sync != "" {
				rec := &converge.RevisionRecord{Revision: *tt.applied}
				rec.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: tt.sync})
				if err := st.PutRevision(rec); err != nil {
					t.Fatal(err)
				}
			}
			p, err := pendingPass(st)
			if err != nil {
				t.Fatal(err)
			}
			if got := p != nil; got != tt.want {
				t.Errorf("pendingPass = %+v, want a pass: %v", p, tt.want)
			}
		})
	}
}
