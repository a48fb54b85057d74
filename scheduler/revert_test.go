package scheduler_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state/statetest"
)

// TestRandomizedRevertDuringTeardown interleaves BOM changes and their
// reverts with the teardowns the changes start (issue 15): domains lose
// and regain networking (their tgw, its host account and every team's
// route are pruned, then wanted again), teams come and go, and a revert
// lands at a random moment: while the pruned routes are Deleting, while
// a producer's own teardown runs, after part of the tree is gone, or
// across a crash and restart. Teardowns are slow and sometimes fail
// transiently. Every run must converge to exactly the reverted state
// with no manual step (no delete, no restart to heal it), and the
// engine's invariants hold after every step.
//
// It is seeded and reproducible in the order of BOM changes; the
// moments they land at depend on goroutine timing, which is what it
// explores. Run it longer with -count or more seeds locally
// (revertSeeds).
func TestRandomizedRevertDuringTeardown(t *testing.T) {
	var deltas atomic.Int64
	stores := []struct {
		name string
		open func(t *testing.T) soakStore
		h    handler
	}{
		{name: "mem", open: func(*testing.T) soakStore { return newMemStore() }, h: classicHandler},
		{name: "bbolt", open: func(t *testing.T) soakStore { return &boltSoak{Backend: statetest.Open(t)} }, h: classicHandler},
		// The composer answers with what changed since the composition
		// it last made (incremental composition).
		{name: "mem-delta", open: func(*testing.T) soakStore { return newMemStore() }, h: deltaHandler(&deltas)},
	}
	for _, st := range stores {
		for seed := uint64(1); seed <= revertSeeds; seed++ {
			t.Run(fmt.Sprint(st.name, "/seed", seed), func(t *testing.T) { revertDuringTeardown(t, seed, st.open(t), st.h) })
		}
	}
	if deltas.Load() == 0 {
		t.Error("the delta composer never answered with a delta")
	}
}

// revertSeeds is how many seeds TestRandomizedRevertDuringTeardown runs
// per store.
var revertSeeds uint64 = 6

func revertDuringTeardown(t *testing.T, seed uint64, store soakStore, hd handler) {
	rng := rand.New(rand.NewPCG(seed, 15))
	var mu sync.Mutex // guards frng and faults
	frng := rand.New(rand.NewPCG(seed, 16))
	faults := 0.1
	disp := newFakeDisp(hd, &fakeWorker{name: "w1", delay: 100 * time.Microsecond})
	// Teardowns take 0-3 ms and fail transiently now and then, so a
	// revert finds teardowns at every stage.
	disp.setHook(func(tk *converge.Task) (*converge.Result, bool) {
		if tk.Reaction != converge.ReactionTeardown {
			return nil, false
		}
		mu.Lock()
		d := time.Duration(frng.IntN(3000)) * time.Microsecond
		fail := frng.Float64() < faults
		mu.Unlock()
		time.Sleep(d)
		if fail {
			return &converge.Result{Outcome: converge.OutcomeTransient, Message: "flaky teardown"}, false
		}
		return nil, false
	})
	h := start(t, store, disp, testConfig())
	// history[i] is the BOM of the i-th change still in force; nil
	// is a revision that removed the BOM's file (the whole tree goes).
	history := []*bomSpec{ptr(makeBOM(4, 3))}
	rev := 0
	apply := func(b *bomSpec) {
		rev++
		d := classicDesired(bomSpec{}, fmt.Sprint("r", rev))
		if b == nil {
			d.Resources = nil
		} else {
			d = classicDesired(*b, d.Revision.Hash)
		}
		h.apply(d, classicValidator)
		t.Logf("r%d: %s", rev, describeBOM(b))
	}
	check := func(step string) {
		t.Helper()
		if err := scheduler.CheckInvariants(h.s); err != nil {
			t.Fatalf("seed %d, %s: %v", seed, step, err)
		}
	}
	apply(history[0])
	h.waitSettled(scheduler.Converged, 10*time.Second)
	for step := 0; step < 30; step++ {
		cur := history[len(history)-1]
		switch op := rng.IntN(10); {
		case op < 5 && cur != nil || len(history) == 1: // a change, mostly one that prunes
			next := ptr(mutateBOM(rng, *cur, step))
			if rng.IntN(8) == 0 {
				next = nil
			}
			history = append(history, next)
			apply(next)
		case op < 5: // the BOM's file comes back with a different BOM
			next := ptr(mutateBOM(rng, *history[len(history)-2], step))
			history = append(history, next)
			apply(next)
		default: // revert the newest change, at some stage of its teardown
			waitTeardownStage(t, h, rng)
			history = history[:len(history)-1]
			if rng.IntN(6) == 0 { // a crash lands in the middle first
				t.Logf("crash and restart")
				store.crash()
				h.stop()
				store.restart()
				h = start(t, store, disp, testConfig())
			}
			apply(history[len(history)-1])
		}
		check(fmt.Sprint("step ", step))
		if rng.IntN(4) == 0 {
			waitConverged(t, h, seed, fmt.Sprint("step ", step))
			checkStored(t, h, store, history[len(history)-1])
		}
	}
	mu.Lock()
	faults = 0
	mu.Unlock()
	waitConverged(t, h, seed, "the end")
	check("the end")
	checkStored(t, h, store, history[len(history)-1])
}

// mutateBOM returns a copy of b with one change: networking dropped from
// (or given back to) some domains, a domain removed or added, or a team
// removed or added.
func mutateBOM(rng *rand.Rand, b bomSpec, step int) bomSpec {
	var out bomSpec
	for _, fd := range b.FDs {
		fd.Teams = append([]bomTeam(nil), fd.Teams...)
		out.FDs = append(out.FDs, fd)
	}
	switch rng.IntN(6) {
	case 0, 1, 2: // toggle networking in 1-3 domains: tgws, host accounts and routes go or come
		for range 1 + rng.IntN(3) {
			fd := &out.FDs[rng.IntN(len(out.FDs))]
			fd.Networking = !fd.Networking
		}
	case 3: // remove a domain, or add one
		if len(out.FDs) > 2 && rng.IntN(2) == 0 {
			i := rng.IntN(len(out.FDs))
			out.FDs = append(out.FDs[:i:i], out.FDs[i+1:]...)
		} else {
			out.FDs = append(out.FDs, bomFD{Name: fmt.Sprintf("fd-x%02d", step), Networking: true,
				Teams: []bomTeam{{Name: "team-001"}, {Name: "team-002"}}})
		}
	case 4: // remove a team
		fd := &out.FDs[rng.IntN(len(out.FDs))]
		if len(fd.Teams) > 1 {
			i := rng.IntN(len(fd.Teams))
			fd.Teams = append(fd.Teams[:i:i], fd.Teams[i+1:]...)
		}
	case 5: // add a team
		fd := &out.FDs[rng.IntN(len(out.FDs))]
		fd.Teams = append(fd.Teams, bomTeam{Name: fmt.Sprintf("team-x%02d", step)})
	}
	return out
}

// waitTeardownStage waits for a random stage of the teardown under way:
// not at all, until something is Deleting, until half of what was
// Deleting is gone, or for a few milliseconds.
func waitTeardownStage(t *testing.T, h *harness, rng *rand.Rand) {
	t.Helper()
	deleting := func() int { return h.s.Progress().Counts.Deleting }
	deadline := time.Now().Add(2 * time.Second)
	switch rng.IntN(4) {
	case 0:
	case 1:
		for deleting() == 0 && h.s.Progress().Settled == scheduler.Working && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
	case 2:
		for deleting() == 0 && h.s.Progress().Settled == scheduler.Working && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		if n := deleting(); n > 1 {
			for deleting() > n/2 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
		}
	case 3:
		time.Sleep(time.Duration(rng.IntN(8)) * time.Millisecond)
	}
}

// waitConverged waits until the engine is Converged. A graph that stays
// Stuck for a second fails at once, naming what it waits for: a
// deadlock, since no fault in this test is permanent.
func waitConverged(t *testing.T, h *harness, seed uint64, when string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var stuckSince time.Time
	for {
		p := h.s.Progress()
		switch {
		case p.Settled == scheduler.Converged:
			return
		case p.Settled == scheduler.Stuck && stuckSince.IsZero():
			stuckSince = time.Now()
		case p.Settled != scheduler.Stuck:
			stuckSince = time.Time{}
		}
		if !stuckSince.IsZero() && time.Since(stuckSince) > time.Second || time.Now().After(deadline) {
			t.Fatalf("seed %d, %s: not converged: %v %+v; problems: %+v", seed, when, p.Settled, p.Counts, h.s.Problems())
		}
		time.Sleep(time.Millisecond)
	}
}

// describeBOM says in a line what b declares, for the test's log.
func describeBOM(b *bomSpec) string {
	if b == nil {
		return "no BOM"
	}
	var parts []string
	for _, fd := range b.FDs {
		net := ""
		if fd.Networking {
			net = "+net"
		}
		parts = append(parts, fmt.Sprintf("%s%s:%d", fd.Name, net, len(fd.Teams)))
	}
	return strings.Join(parts, " ")
}

func ptr[T any](v T) *T { return &v }

// checkStored checks that the store holds exactly what b composes, plus
// the root, every row Ready, with exactly b's edges; nothing for nil.
func checkStored(t *testing.T, h *harness, store soakStore, b *bomSpec) {
	t.Helper()
	h.flush()
	want := map[converge.ID]bool{}
	var ch []converge.Child
	var edges []converge.Edge
	if b != nil {
		ch, edges = compose(mustJSON(*b))
		want["classicbom/org"] = true
	}
	for _, c := range ch {
		want[converge.NewID(c.Kind, c.Name)] = true
	}
	all := store.all()
	for _, r := range all {
		if !want[r.ID()] {
			t.Errorf("unexpected %s (%s %q)", r.ID(), r.Phase, r.Reason)
		} else if r.Phase != converge.PhaseReady || r.Deleting {
			t.Errorf("%s: %s %q", r.ID(), r.Phase, r.Reason)
		}
		delete(want, r.ID())
	}
	for id := range want {
		t.Errorf("%s missing", id)
	}
	if got := store.edgeCount(); got != len(edges) {
		t.Errorf("%d edges stored, want %d", got, len(edges))
	}
	if t.Failed() {
		t.FailNow()
	}
}

// TestRedeclaredThenRemovedDuringTeardownStaysGone: a BOM removed,
// declared again while its tree is torn down (a revert), then removed
// again (the revert reverted) before the teardown ends is not created
// again when the teardown ends.
func TestRedeclaredThenRemovedDuringTeardownStaysGone(t *testing.T) {
	h, store, bom, gate := convergedWithRouteTeardownsGated(t)
	gone := classicDesired(bom, "c2")
	gone.Resources = nil
	h.apply(gone, classicValidator)
	h.apply(classicDesired(bom, "c3"), classicValidator) // the revert
	gone.Revision.Hash = "c4"
	h.apply(gone, classicValidator) // the revert reverted
	close(gate)
	waitConverged(t, h, 0, "after the teardown")
	h.flush()
	if all := store.all(); len(all) != 0 {
		t.Errorf("%d resources stored after the BOM was removed, want 0; first: %s %s", len(all), all[0].ID(), all[0].Phase)
	}
}
