package etcdstate_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/etcdstate"
)

// TestWatch: a reader's Watch reports the rows of every committed batch,
// a journaled batch's once it is whole (a read in the callback sees the
// batch's rows), and a batch of events alone as a change with no rows.
func TestWatch(t *testing.T) {
	prefix := newPrefix()
	w := open(t, one, prefix, etcdstate.Options{})
	rd, err := etcdstate.Open(etcdstate.Options{Endpoints: one.Endpoints, Prefix: prefix, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithCancel(t.Context())
	var (
		mu      sync.Mutex // guards calls
		calls   [][]converge.ID
		stopped = make(chan struct{})
	)
	go func() {
		defer close(stopped)
		rd.Watch(ctx, func(ids []converge.ID, all bool) {
			if all {
				t.Error("the watch broke")
			}
			// A journaled batch's new rows are readable when reported.
			for _, id := range ids {
				if id.Kind() == "route" {
					if _, err := rd.Resource(context.Background(), id); err != nil {
						t.Errorf("%s read in its change: %v", id, err)
					}
				}
			}
			mu.Lock()
			calls = append(calls, slices.Clone(ids))
			mu.Unlock()
		})
	}()
	defer func() { cancel(); <-stopped }()
	time.Sleep(100 * time.Millisecond) // the watch starts from the present
	base, big := bigBatches()
	if err := w.Commit(context.Background(), base); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(context.Background(), &converge.Batch{Events: []converge.Event{{Resource: "bom/r", Type: "Note"}}}); err != nil {
		t.Fatal(err)
	}
	wantIDs := map[converge.ID]bool{}
	for _, b := range []*converge.Batch{base, big} {
		for _, r := range b.Resources {
			wantIDs[r.ID()] = true
		}
		for _, id := range b.DeletedResources {
			wantIDs[id] = true
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		seen := map[converge.ID]bool{}
		empty := 0
		for _, c := range calls {
			for _, id := range c {
				seen[id] = true
			}
			if len(c) == 0 {
				empty++
			}
		}
		mu.Unlock()
		if len(seen) == len(wantIDs) && empty > 0 {
			for id := range wantIDs {
				if !seen[id] {
					t.Fatalf("%s never reported", id)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s the watch reported %d distinct rows (want %d) and %d changes without rows (want ≥ 1)", len(seen), len(wantIDs), empty)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
