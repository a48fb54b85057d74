package scheduler_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// deltaRevision is the fake composer's code revision.
const deltaRevision = "rev-1"

// deltaHandler is classicHandler whose compose answers a task with a
// base spec of its own revision as a delta, computed by composing both
// specs; deltas counts those answers.
func deltaHandler(deltas *atomic.Int64) handler {
	return func(t *converge.Task) *converge.Result {
		if t.Reaction != converge.ReactionCompose {
			return classicHandler(t)
		}
		res := classicHandler(t)
		res.Revision = deltaRevision
		if t.BaseSpec == nil || t.BaseRevision != deltaRevision {
			return res
		}
		oldCh, oldEd := compose(t.BaseSpec)
		deltas.Add(1)
		return diffComposition(oldCh, oldEd, res)
	}
}

// diffComposition turns the full result res into a delta against the
// composition (oldCh, oldEd).
func diffComposition(oldCh []converge.Child, oldEd []converge.Edge, res *converge.Result) *converge.Result {
	old := map[converge.ID]converge.Child{}
	for _, c := range oldCh {
		old[converge.NewID(c.Kind, c.Name)] = c
	}
	edgesOf := func(es []converge.Edge) map[converge.ID]string {
		m := map[converge.ID]string{}
		for _, e := range es {
			m[e.Consumer] += fmt.Sprint(e.Producer, e.Flows, ";")
		}
		return m
	}
	oe, ne := edgesOf(oldEd), edgesOf(res.Edges)
	d := &converge.Result{Outcome: converge.OutcomeOK, Status: res.Status, Revision: res.Revision, Delta: true}
	seen := map[converge.ID]bool{}
	for _, c := range res.Children {
		id := converge.NewID(c.Kind, c.Name)
		seen[id] = true
		o, had := old[id]
		if had && o.KindVersion == c.KindVersion && bytes.Equal(o.Spec, c.Spec) && oe[id] == ne[id] {
			continue
		}
		c.Added = !had
		d.Children = append(d.Children, c)
		for _, e := range res.Edges {
			if e.Consumer == id {
				d.Edges = append(d.Edges, e)
			}
		}
	}
	for _, c := range oldCh {
		if id := converge.NewID(c.Kind, c.Name); !seen[id] {
			d.Removed = append(d.Removed, id)
		}
	}
	return d
}

// graphOf lists every resource's ID, owner and declared spec, and every
// edge, sorted: what two stores must agree on.
func graphOf(m *memStore) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for id, r := range m.resources {
		if r.Deleting {
			continue
		}
		out = append(out, fmt.Sprintf("%s owner=%s declared=%s", id, r.Owner, r.Declared))
	}
	for k, e := range m.edges {
		out = append(out, fmt.Sprintf("edge %s -> %s %v", k[0], k[1], e.Flows))
	}
	slices.Sort(out)
	return out
}

// TestDeltaComposeMatchesFull applies one random sequence of BOM edits
// to two engines, one whose composer answers deltas and one that always
// answers in full: after every edit both hold the same graph, and every
// compose after the first was a delta.
func TestDeltaComposeMatchesFull(t *testing.T) {
	var deltas atomic.Int64
	dStore, fStore := newMemStore(), newMemStore()
	dDisp := newFakeDisp(deltaHandler(&deltas), &fakeWorker{name: "w1"})
	fDisp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	dh := start(t, dStore, dDisp, testConfig())
	fh := start(t, fStore, fDisp, testConfig())
	rng := rand.New(rand.NewPCG(7, 9))
	bom := makeBOM(3, 4)
	edits := []func(){
		func() { // add a team
			fd := &bom.FDs[rng.IntN(len(bom.FDs))]
			fd.Teams = append(fd.Teams, bomTeam{Name: fmt.Sprintf("team-n%03d", rng.IntN(1000))})
		},
		func() { // remove a team
			fd := &bom.FDs[rng.IntN(len(bom.FDs))]
			if len(fd.Teams) > 0 {
				i := rng.IntN(len(fd.Teams))
				fd.Teams = slices.Delete(fd.Teams, i, i+1)
			}
		},
		func() { // change a team's account spec
			fd := &bom.FDs[rng.IntN(len(bom.FDs))]
			if len(fd.Teams) > 0 {
				fd.Teams[rng.IntN(len(fd.Teams))].Rev = fmt.Sprintf("r%d", rng.IntN(100))
			}
		},
		func() { // remove a domain: its tgw, host and teams
			if len(bom.FDs) > 1 {
				i := rng.IntN(len(bom.FDs))
				bom.FDs = slices.Delete(bom.FDs, i, i+1)
			}
		},
		func() { // add a domain
			bom.FDs = append(bom.FDs, bomFD{Name: fmt.Sprintf("fd-n%02d", rng.IntN(100)), Networking: true,
				Teams: []bomTeam{{Name: "team-001"}}})
		},
	}
	for step := range 14 {
		if step > 0 {
			edits[rng.IntN(len(edits))]()
			// No two domains or teams of one domain share a name.
			seenFD := map[string]bool{}
			bom.FDs = slices.DeleteFunc(bom.FDs, func(fd bomFD) bool { dup := seenFD[fd.Name]; seenFD[fd.Name] = true; return dup })
			for i := range bom.FDs {
				seen := map[string]bool{}
				bom.FDs[i].Teams = slices.DeleteFunc(bom.FDs[i].Teams, func(tm bomTeam) bool { dup := seen[tm.Name]; seen[tm.Name] = true; return dup })
			}
		}
		d := classicDesired(bom, fmt.Sprintf("rev%02d", step))
		dh.apply(d, nil)
		fh.apply(d, nil)
		dh.waitSettled(scheduler.Converged, 10*time.Second)
		fh.waitSettled(scheduler.Converged, 10*time.Second)
		dh.flush()
		fh.flush()
		waitFor(t, 5*time.Second, "both graphs torn down to the same", func() bool {
			return slices.Equal(graphOf(dStore), graphOf(fStore))
		})
		composes := 0
		for _, tk := range dDisp.tasks() {
			if tk.Reaction == converge.ReactionCompose {
				composes++
			}
		}
		if got, want := deltas.Load(), int64(composes-1); got != want {
			t.Fatalf("step %d: %d of %d composes answered as deltas, want every one after the first", step, got, composes)
		}
		// The delta's event counts the children without walking them:
		// it must still match the store.
		var last string
		for _, e := range dStore.eventsOf("classicbom/org") {
			if e.Type == "Composed" {
				last = e.Message
			}
		}
		children := 0
		for _, r := range dStore.all() {
			if r.Owner == "classicbom/org" && !r.Deleting {
				children++
			}
		}
		if want := fmt.Sprintf("composed %d children", children); !strings.HasPrefix(last, want) {
			t.Fatalf("step %d: last Composed event %q, want it to begin %q", step, last, want)
		}
	}
	if got := dStore.get("classicbom/org").ComposedBy; !strings.HasPrefix(got, deltaRevision+" ") {
		t.Errorf("ComposedBy = %q, want the revision %q and the compose context", got, deltaRevision)
	}
}

// TestDeltaForgottenAfterOperatorDelete: a child deleted by an operator
// makes the owner's next compose a full one (a delta would leave the
// child out), and the child comes back.
func TestDeltaForgottenAfterOperatorDelete(t *testing.T) {
	var deltas atomic.Int64
	store := newMemStore()
	disp := newFakeDisp(deltaHandler(&deltas), &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	bom := makeBOM(2, 2)
	h.apply(classicDesired(bom, "r1"), nil)
	h.waitSettled(scheduler.Converged, 10*time.Second)
	h.flush()
	if by := store.get("classicbom/org").ComposedBy; by == "" {
		t.Fatal("ComposedBy is empty after a compose by a worker that names its revision")
	}
	disp.resetLog()
	if err := h.s.Delete(t.Context(), "account/fd-01-team-001"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the deleted account back with a new uid", func() bool {
		r := store.get("account/fd-01-team-001")
		return r != nil && !r.Deleting && r.Phase == converge.PhaseReady
	})
	h.waitSettled(scheduler.Converged, 10*time.Second)
	var composes []converge.Task
	for _, tk := range disp.tasks() {
		if tk.Reaction == converge.ReactionCompose {
			composes = append(composes, tk)
		}
	}
	if len(composes) == 0 {
		t.Fatal("no recompose after the operator's delete")
	}
	if composes[0].BaseSpec != nil {
		t.Errorf("the recompose after an operator's delete carried a base spec: its delta would leave the deleted child out")
	}
	if deltas.Load() != 0 {
		t.Errorf("%d deltas, want 0", deltas.Load())
	}
}

// TestDeltaRefusals: a delta that adds a child the composition has, or
// closes a cycle through a child it leaves out, fails the compose
// permanently and applies nothing.
func TestDeltaRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		bend       func(d *converge.Result)
	}{
		{"duplicate", "emitted twice", func(d *converge.Result) {
			d.Children = append(d.Children, converge.Child{Kind: "account", KindVersion: 1, Name: "fd-01-team-001",
				Spec: json.RawMessage(`{"team_name":"x"}`), Added: true})
		}},
		{"cycle", "cycle", func(d *converge.Result) {
			// account/fd-01-team-001 -> route/fd-01-team-001, which
			// already consumes its vpc, which consumes this account.
			d.Children = append(d.Children, converge.Child{Kind: "account", KindVersion: 1, Name: "fd-01-team-001",
				Spec: json.RawMessage(`{"team_name":"fd-01-team-001","rev":"c"}`)})
			d.Edges = append(d.Edges, converge.Edge{Consumer: "account/fd-01-team-001", Producer: "route/fd-01-team-001"})
		}},
		{"removed and sent", "both sent and removed", func(d *converge.Result) {
			d.Children = append(d.Children, converge.Child{Kind: "account", KindVersion: 1, Name: "fd-01-team-002",
				Spec: json.RawMessage(`{"team_name":"fd-01-team-002","rev":"c"}`)})
			d.Removed = append(d.Removed, "account/fd-01-team-002")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var deltas atomic.Int64
			store := newMemStore()
			base := deltaHandler(&deltas)
			disp := newFakeDisp(func(tk *converge.Task) *converge.Result {
				res := base(tk)
				if res.Delta {
					tc.bend(res)
				}
				return res
			}, &fakeWorker{name: "w1"})
			h := start(t, store, disp, testConfig())
			bom := makeBOM(1, 2)
			h.apply(classicDesired(bom, "r1"), nil)
			h.waitSettled(scheduler.Converged, 10*time.Second)
			h.flush()
			children := func() []string {
				return slices.DeleteFunc(graphOf(store), func(l string) bool { return strings.HasPrefix(l, "classicbom/") })
			}
			before := children()
			bom.FDs[0].Teams = append(bom.FDs[0].Teams, bomTeam{Name: "team-003"})
			h.apply(classicDesired(bom, "r2"), nil)
			waitFor(t, 10*time.Second, "the composer failed", func() bool {
				r := store.get("classicbom/org")
				return r != nil && r.Phase == converge.PhaseFailed
			})
			h.flush()
			if r := store.get("classicbom/org"); !strings.Contains(r.Reason, tc.want) {
				t.Errorf("reason = %q, want one containing %q", r.Reason, tc.want)
			}
			if after := children(); !slices.Equal(before, after) {
				t.Errorf("a refused delta changed the graph:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// TestStartRecomputesStaleFlows: a consumer whose stored spec carries a
// producer's old value (a crash between the producer's commit and the
// consumer's) is brought up to date at the next start, and one whose
// spec is current is left alone (its generation does not move).
func TestStartRecomputesStaleFlows(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(1, 2), "r1"), nil)
	h.waitSettled(scheduler.Converged, 10*time.Second)
	h.stop()

	store.mu.Lock()
	acct := store.resources["account/fd-01-team-001"]
	acct.Status = json.RawMessage(`{"account_id":"999999999999"}`)
	staleGen := store.resources["vpc/fd-01-team-001"].Generation
	keptGen := store.resources["vpc/fd-01-team-002"].Generation
	store.mu.Unlock()

	h2 := start(t, store, disp, testConfig())
	h2.waitSettled(scheduler.Converged, 10*time.Second)
	h2.flush()
	stale := store.get("vpc/fd-01-team-001")
	if !strings.Contains(string(stale.Spec), `"999999999999"`) || stale.Generation == staleGen {
		t.Errorf("stale consumer after the start: spec %s, generation %d (was %d); want the producer's new value in a new generation",
			stale.Spec, stale.Generation, staleGen)
	}
	if kept := store.get("vpc/fd-01-team-002"); kept.Generation != keptGen {
		t.Errorf("current consumer's generation moved %d -> %d at the start", keptGen, kept.Generation)
	}
}
