package scheduler_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/statetest"
)

// TestRandomizedLifecycle drives the classic graph through random BOM
// changes, deletes, faults and crashes, checking the engine's invariants
// at every step and that it always converges to exactly the declared
// graph.
//
// It runs against the in-memory fake and against the real bbolt and etcd
// stores, so everything the engine asks the store to keep is also
// something both accept (a refused row would show as a commit error).
func TestRandomizedLifecycle(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T) soakStore
	}{
		{name: "mem", open: func(*testing.T) soakStore { return newMemStore() }},
		{name: "bbolt", open: func(t *testing.T) soakStore { return &boltSoak{Backend: statetest.Open(t)} }},
		{name: "etcd", open: func(t *testing.T) soakStore { return &boltSoak{Backend: openEtcd(t)} }},
	}
	for _, st := range stores {
		for seed := uint64(1); seed <= soakSeeds; seed++ {
			t.Run(fmt.Sprint(st.name, "/seed", seed), func(t *testing.T) { randomizedLifecycle(t, seed, st.open(t)) })
		}
	}
}

// soakStore is a scheduler.Store the lifecycle test can crash and
// inspect.
type soakStore interface {
	scheduler.Store
	// crash makes every Commit fail until restart.
	crash()
	restart()
	all() []*converge.Resource
	edgeCount() int
}

// boltSoak is a real store (bbolt or etcd) with a crash switch: a
// crashed store refuses commits, as a killed process commits nothing
// more.
type boltSoak struct {
	state.Backend
	mu      sync.Mutex // guards crashed
	crashed bool
}

func (b *boltSoak) crash()   { b.mu.Lock(); b.crashed = true; b.mu.Unlock() }
func (b *boltSoak) restart() { b.mu.Lock(); b.crashed = false; b.mu.Unlock() }

func (b *boltSoak) Commit(ctx context.Context, batch *converge.Batch) error {
	b.mu.Lock()
	crashed := b.crashed
	b.mu.Unlock()
	if crashed {
		return errCrashed
	}
	return b.Backend.Commit(ctx, batch)
}

func (b *boltSoak) snapshot() *converge.Snapshot {
	snap, err := b.Load(context.Background())
	if err != nil {
		panic(err)
	}
	return snap
}

func (b *boltSoak) all() []*converge.Resource {
	rs := b.snapshot().Resources
	sort.Slice(rs, func(i, j int) bool { return rs[i].ID() < rs[j].ID() })
	return rs
}

func (b *boltSoak) edgeCount() int { return len(b.snapshot().Edges) }

func randomizedLifecycle(t *testing.T, seed uint64, store soakStore) {
	rng := rand.New(rand.NewPCG(seed, 99))
	var mu sync.Mutex
	frng := rand.New(rand.NewPCG(seed, 7))
	faults := 0.2
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1", delay: 200 * time.Microsecond})
	disp.setHook(func(tk *converge.Task) (*converge.Result, bool) {
		if tk.Reaction == converge.ReactionCompose || tk.Reaction == converge.ReactionReact {
			return nil, false
		}
		mu.Lock()
		defer mu.Unlock()
		if frng.Float64() < faults {
			return &converge.Result{Outcome: converge.OutcomeTransient, Message: "flaky"}, false
		}
		return nil, false
	})
	h := start(t, store, disp, testConfig())
	bom := makeBOM(2, 3)
	d := classicDesired(bom, "r0")
	h.apply(d, classicValidator)
	check := func(step string) {
		t.Helper()
		if err := scheduler.CheckInvariants(h.s); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	for step := 0; step < 40; step++ {
		switch op := rng.IntN(5); op {
		case 0: // BOM change: add, remove or rev a team
			fd := &bom.FDs[rng.IntN(len(bom.FDs))]
			switch rng.IntN(3) {
			case 0:
				fd.Teams = append(fd.Teams, bomTeam{Name: fmt.Sprintf("team-x%02d", step)})
			case 1:
				if len(fd.Teams) > 1 {
					i := rng.IntN(len(fd.Teams))
					fd.Teams = append(fd.Teams[:i:i], fd.Teams[i+1:]...)
				}
			case 2:
				fd.Teams[rng.IntN(len(fd.Teams))].Rev = fmt.Sprint(step)
			}
			h.apply(classicDesired(bom, fmt.Sprint("r", step)), classicValidator)
		case 1: // delete a random resource
			all := store.all()
			if len(all) > 0 {
				id := all[rng.IntN(len(all))].ID()
				if err := h.s.Delete(context.Background(), id); err != nil && id != "" {
					t.Logf("delete %s: %v", id, err)
				}
			}
		case 2: // crash and restart
			store.crash()
			h.stop()
			store.restart()
			h = start(t, store, disp, testConfig())
			h.apply(classicDesired(bom, fmt.Sprint("r", step)), classicValidator)
		case 3: // let it run a while
			time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
		case 4: // a full apply with no change
			h.apply(classicDesired(bom, fmt.Sprint("r", step)), classicValidator)
		}
		check(fmt.Sprint("step ", step))
	}
	// Heal: no faults, and a recompose brings back whatever was deleted.
	mu.Lock()
	faults = 0
	mu.Unlock()
	if err := h.s.Delete(context.Background(), "classicbom/org"); err != nil {
		t.Logf("delete root: %v", err)
	}
	h.waitSettled(scheduler.Converged, 10*time.Second)
	h.apply(classicDesired(bom, "final"), classicValidator)
	h.waitSettled(scheduler.Converged, 10*time.Second)
	check("final")
	h.flush()
	want := map[converge.ID]bool{"classicbom/org": true}
	ch, _ := compose(mustJSON(bom))
	for _, c := range ch {
		want[converge.NewID(c.Kind, c.Name)] = true
	}
	all := store.all()
	if len(all) != len(want) {
		t.Errorf("%d resources stored, want %d", len(all), len(want))
	}
	for _, r := range all {
		if !want[r.ID()] {
			t.Errorf("unexpected %s", r.ID())
		}
		if r.Phase != converge.PhaseReady || r.Deleting {
			t.Errorf("%s: %s %q", r.ID(), r.Phase, r.Reason)
		}
	}
	if p := h.s.Progress(); p.CommitError != "" || p.Refused != 0 {
		t.Errorf("the store refused what the engine asked it to keep: %q, %d rows", p.CommitError, p.Refused)
	}
	if got, want := store.edgeCount(), len(bom.FDs)+countTeams(bom)*3; got != want {
		t.Errorf("%d edges stored, want %d", got, want)
	}
}

func countTeams(b bomSpec) int {
	n := 0
	for _, fd := range b.FDs {
		n += len(fd.Teams)
	}
	return n
}

// soakSeeds is how many random lifecycles TestRandomizedLifecycle runs;
// raise it locally to soak longer.
var soakSeeds uint64 = 8
