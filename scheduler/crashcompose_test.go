package scheduler_test

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// A crash in the middle of a big composition's commits must never leave
// a composer that the store records as done (observed at its generation,
// or Ready) while some of its children are missing: the next process
// would trust that record, recompose as a delta against it (the
// composer answers "nothing changed") or not at all, and report the
// graph converged with most of it never created (issue 22).

// orgKind composes classicbom children: a two-level composition.
var orgKind = &converge.Kind{Name: "org", Version: 1, Finalizer: true, Reactions: []string{"compose", "teardown"}}

// orgSpec is an org's spec: one classicbom per entry.
type orgSpec struct {
	BOMs []bomSpec `json:"boms"`
}

// composeOrg is the org composer: a classicbom per BOM.
func composeOrg(spec json.RawMessage) []converge.Child {
	var o orgSpec
	if err := json.Unmarshal(spec, &o); err != nil {
		panic(err)
	}
	var ch []converge.Child
	for i, b := range o.BOMs {
		ch = append(ch, converge.Child{Kind: "classicbom", KindVersion: 1, Name: fmt.Sprintf("bom-%d", i), Spec: mustJSON(b)})
	}
	return ch
}

// nestedHandler is deltaHandler that also composes orgs (in full, with
// a revision, so they too get a base).
func nestedHandler(deltas *atomic.Int64) handler {
	inner := deltaHandler(deltas)
	return func(t *converge.Task) *converge.Result {
		if t.Kind != "org" || t.Reaction != converge.ReactionCompose {
			return inner(t)
		}
		ch := composeOrg(t.Spec)
		res := &converge.Result{Outcome: converge.OutcomeOK, Children: ch, Revision: deltaRevision,
			Status: mustJSON(map[string]int{"children": len(ch)})}
		if t.BaseSpec != nil && t.BaseRevision == deltaRevision {
			deltas.Add(1)
			return diffComposition(composeOrg(t.BaseSpec), nil, res)
		}
		return res
	}
}

// prefixedBOM is makeBOM with every domain's name prefixed, so several
// BOMs can share a store.
func prefixedBOM(prefix string, fds, teams int) bomSpec {
	b := makeBOM(fds, teams)
	for i := range b.FDs {
		b.FDs[i].Name = prefix + b.FDs[i].Name
	}
	return b
}

// nestedDesired declares one org of boms BOMs of fds×teams each.
func nestedDesired(boms, fds, teams int, rev string) (*converge.Desired, int) {
	var o orgSpec
	for i := range boms {
		o.BOMs = append(o.BOMs, prefixedBOM(fmt.Sprintf("b%d-", i), fds, teams))
	}
	d := classicDesired(bomSpec{}, rev)
	d.Kinds = append(d.Kinds, orgKind)
	d.Resources = []*converge.Resource{{Kind: "org", KindVersion: 1, Name: "org", Origin: converge.OriginGit,
		Declared: mustJSON(o), Source: "resources/org.json:1"}}
	return d, 1 + boms*(1+bomSize(fds, teams))
}

// completeCheck is a memStore check: every composer the store records
// as observed at its generation has every child its stored spec
// composes, and one recorded Ready has them all stored Ready.
func completeCheck(m *memStore) string {
	children := map[converge.ID][]*converge.Resource{}
	for _, r := range m.resources {
		if r.Owner != "" && !r.Deleting {
			children[r.Owner] = append(children[r.Owner], r)
		}
	}
	for id, r := range m.resources {
		var want int
		switch r.Kind {
		case "classicbom":
			ch, _ := compose(r.Declared)
			want = len(ch)
		case "org":
			want = len(composeOrg(r.Declared))
		default:
			continue
		}
		if r.Deleting || r.ObservedGeneration != r.Generation && r.Phase != converge.PhaseReady {
			continue
		}
		if have := len(children[id]); have != want {
			return fmt.Sprintf("%s stored %s at observed generation %d/%d with %d of its %d children",
				id, r.Phase, r.ObservedGeneration, r.Generation, have, want)
		}
		if r.Phase != converge.PhaseReady {
			continue
		}
		for _, c := range children[id] {
			if c.Phase != converge.PhaseReady || c.ObservedGeneration != c.Generation {
				return fmt.Sprintf("%s stored Ready while its child %s is stored %s at %d/%d",
					id, c.ID(), c.Phase, c.ObservedGeneration, c.Generation)
			}
		}
	}
	return ""
}

// storedCounts counts the store's resources and its Ready ones.
func storedCounts(m *memStore) (total, ready int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.resources {
		total++
		if r.Phase == converge.PhaseReady && r.ObservedGeneration == r.Generation {
			ready++
		}
	}
	return total, ready
}

func (m *memStore) takeViolations() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.violations
	m.violations = nil
	return v
}

// TestComposerRecordIsDurableAfterItsChildren: while a big composition's
// rows drain into a slow store a few at a time (and its leaves turn
// Ready faster than their rows are stored), no commit leaves the
// composer recorded as composed, or Ready, ahead of its children: each
// commit is where a crash could stop.
func TestComposerRecordIsDurableAfterItsChildren(t *testing.T) {
	store := newMemStore()
	store.check = completeCheck
	store.commitDelay = time.Millisecond
	var deltas atomic.Int64
	disp := newFakeDisp(deltaHandler(&deltas), &fakeWorker{name: "w1"})
	cfg := testConfig()
	cfg.MaxCommit = 64
	h := start(t, store, disp, cfg)
	h.apply(classicDesired(makeBOM(4, 60), "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 30*time.Second)
	h.flush()
	if total, ready := storedCounts(store); total != bomSize(4, 60)+1 || ready != total {
		t.Errorf("stored %d resources, %d Ready; want %d, all Ready", total, ready, bomSize(4, 60)+1)
	}
	for _, v := range store.takeViolations() {
		t.Error(v)
	}
}

// TestLoadRecomposesInFullWhenChildrenAreMissing: a store whose composer
// is recorded composed and Ready with two thirds of its children missing
// (what a crash left before this was fixed, or rows lost by other
// means) is recomposed in full at load, not as a delta against the
// stored spec, and the root is not Ready again until every child exists
// and is Ready.
func TestLoadRecomposesInFullWhenChildrenAreMissing(t *testing.T) {
	store := newMemStore()
	var deltas atomic.Int64
	disp := newFakeDisp(deltaHandler(&deltas), &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	bom := makeBOM(3, 40)
	want := bomSize(3, 40) + 1
	h.apply(classicDesired(bom, "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 20*time.Second)
	h.flush()
	h.stop()

	root := converge.NewID("classicbom", "org")
	store.mu.Lock()
	i := 0
	for id, r := range store.resources {
		if r.Owner == root && i%3 != 0 {
			delete(store.resources, id)
			for k := range store.edges {
				if k[0] == id {
					delete(store.edges, k)
				}
			}
		}
		i++
	}
	r := store.resources[root]
	if r.Phase != converge.PhaseReady || r.ObservedGeneration != r.Generation || r.ComposedBy == "" {
		t.Fatalf("root stored %s at %d/%d composed by %q: want Ready at its generation with a delta base",
			r.Phase, r.ObservedGeneration, r.Generation, r.ComposedBy)
	}
	store.check = completeCheck
	store.violations = nil
	store.mu.Unlock()
	if total, _ := storedCounts(store); total >= want*2/3 {
		t.Fatalf("%d of %d resources left: want most missing", total, want)
	}

	disp.resetLog()
	deltas.Store(0)
	h = start(t, store, disp, testConfig())
	h.apply(classicDesired(bom, "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 20*time.Second)
	h.flush()
	if total, ready := storedCounts(store); total != want || ready != want {
		t.Errorf("after the restart %d resources, %d Ready; want %d, all Ready", total, ready, want)
	}
	composes := 0
	for _, tk := range disp.tasks() {
		if tk.Reaction == converge.ReactionCompose {
			composes++
			if tk.BaseSpec != nil {
				t.Errorf("the recompose of %s carried a delta base: a composition missing children is composed in full", tk.Name)
			}
		}
	}
	if composes == 0 {
		t.Error("no recompose after the restart")
	}
	if n := deltas.Load(); n > 0 {
		t.Errorf("%d deltas answered after the restart, want none", n)
	}
	for _, v := range store.takeViolations() {
		t.Error(v)
	}
	if !hasEvent(store.eventsOf(root), "Recompose") {
		t.Error("no Recompose event for the root")
	}
}

// TestCrashMidCompositionCompletesTheGraph: a crash after each of several
// commits of a big composition (flat, and two levels deep) leaves a store
// from which the next process completes the whole declared graph: every
// resource exists once and is Ready, the composers are Ready only then,
// and no commit of either process records a composer ahead of its
// children.
func TestCrashMidCompositionCompletesTheGraph(t *testing.T) {
	type shape struct {
		name    string
		desired func() (*converge.Desired, int)
	}
	shapes := []shape{
		{"flat", func() (*converge.Desired, int) { return classicDesired(makeBOM(4, 50), "c1"), bomSize(4, 50) + 1 }},
		{"nested", func() (*converge.Desired, int) { return nestedDesired(3, 2, 25, "c1") }},
	}
	for _, sh := range shapes {
		for _, after := range []int{1, 4, 12} {
			t.Run(fmt.Sprintf("%s/after%d", sh.name, after), func(t *testing.T) {
				store := newMemStore()
				// Crash right after the after-th commit that holds
				// a composed child.
				seen := 0
				store.check = func(m *memStore) string {
					if len(m.resources) > 1 {
						if seen++; seen == after {
							m.crashed = true
						}
					}
					return completeCheck(m)
				}
				var deltas atomic.Int64
				disp := newFakeDisp(nestedHandler(&deltas), &fakeWorker{name: "w1"})
				cfg := testConfig()
				cfg.MaxCommit = 32
				h := start(t, store, disp, cfg)
				d, want := sh.desired()
				h.apply(d, classicValidator)
				waitFor(t, 10*time.Second, "the crash", func() bool {
					store.mu.Lock()
					defer store.mu.Unlock()
					return store.crashed
				})
				h.stop()
				store.mu.Lock()
				store.check = completeCheck
				store.mu.Unlock()
				store.restart()
				before, _ := storedCounts(store)

				h = start(t, store, disp, cfg)
				d, _ = sh.desired()
				h.apply(d, classicValidator)
				h.waitSettled(scheduler.Converged, 30*time.Second)
				h.flush()
				total, ready := storedCounts(store)
				if total != want || ready != want {
					t.Errorf("%d stored before the restart; after it %d resources, %d Ready; want %d, all Ready", before, total, ready, want)
				}
				if p := h.s.Progress(); p.Counts.Total != want {
					t.Errorf("converged with %d resources in the graph, want %d", p.Counts.Total, want)
				}
				for _, v := range store.takeViolations() {
					t.Error(v)
				}
			})
		}
	}
}
