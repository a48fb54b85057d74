package scheduler

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/convergehq/converge"
)

// The graph part on its own: a resourceGraph and nodes, no scheduler.

func newTestGraph() *resourceGraph {
	return &resourceGraph{
		nodes:     map[converge.ID]*node{},
		loose:     map[converge.ID]*adjacency{},
		flowLists: map[string][]converge.ValueFlow{},
		gitRoots:  map[converge.ID]*node{},
	}
}

func (g *resourceGraph) testNode(id converge.ID, phase converge.Phase, owner *node) *node {
	r := &converge.Resource{Kind: "vpc", KindVersion: 1, Name: string(id)[len("vpc/"):], Phase: phase}
	n := &node{r: r, id: id, rs: &refState{ref: r.Ref()}, owner: owner}
	if owner != nil {
		owner.adopt(n)
	}
	g.insert(n)
	g.counted(n)
	return n
}

func TestGraphEdgeIndexes(t *testing.T) {
	g := newTestGraph()
	e1 := &converge.Edge{Consumer: "subnet/a", Producer: "vpc/a"}
	e2 := &converge.Edge{Consumer: "subnet/a", Producer: "vpc/a", Flows: []converge.ValueFlow{{From: "id", To: "vpc_id"}}}
	g.addEdge(e1)
	g.addEdge(e2) // replaces e1: one edge per consumer and producer
	if got := g.edgeOf("subnet/a", "vpc/a"); got != e2 {
		t.Fatalf("edgeOf = %v, want the second edge", got)
	}
	if len(g.producersOf("subnet/a")) != 1 || len(g.consumersOf("vpc/a")) != 1 {
		t.Fatalf("producers %v consumers %v, want one edge each", g.producersOf("subnet/a"), g.consumersOf("vpc/a"))
	}
	g.removeEdge(e1) // no longer in the graph: nothing happens
	if g.edgeOf("subnet/a", "vpc/a") != e2 {
		t.Fatal("removing a replaced edge removed its replacement")
	}
	g.removeEdge(e2)
	if len(g.loose) != 0 {
		t.Fatalf("after removal loose edges %v, want none (no empty lists kept)", g.loose)
	}
}

func TestGraphInternFlows(t *testing.T) {
	g := newTestGraph()
	a := []converge.ValueFlow{{From: "id", To: "vpc_id"}}
	b := []converge.ValueFlow{{From: "id", To: "vpc_id"}}
	c := []converge.ValueFlow{{From: "id", To: "subnet_id"}}
	if got := g.internFlows(a); &got[0] != &a[0] {
		t.Fatal("the first list is not kept as the shared one")
	}
	if got := g.internFlows(b); &got[0] != &a[0] {
		t.Fatal("an equal list is not shared")
	}
	if got := g.internFlows(c); &got[0] != &c[0] {
		t.Fatal("a different list was replaced")
	}
	if g.internFlows([]converge.ValueFlow{}) != nil {
		t.Fatal("an empty list is not nil")
	}
}

func TestGraphCountsFollowPhases(t *testing.T) {
	g := newTestGraph()
	root := g.testNode("vpc/root", converge.PhasePending, nil)
	mid := g.testNode("vpc/mid", converge.PhaseReady, root)
	leaf := g.testNode("vpc/leaf", converge.PhasePending, mid)
	leaf.res().Phase = converge.PhaseFailed
	g.recounted(leaf, converge.PhasePending)
	want := converge.Counts{Total: 3, Pending: 1, Ready: 1, Failed: 1}
	if g.counts != want {
		t.Errorf("graph counts %+v, want %+v", g.counts, want)
	}
	if got := root.sub.counts; got != (converge.Counts{Total: 2, Ready: 1, Failed: 1}) {
		t.Errorf("root's subtree counts %+v, want its two descendants", got)
	}
	if got := mid.sub.counts; got != (converge.Counts{Total: 1, Failed: 1}) {
		t.Errorf("mid's subtree counts %+v, want its one child", got)
	}
	if got := leaf.rs.stats.phases; got != (converge.Counts{Total: 1, Failed: 1}) {
		t.Errorf("leaf's ref counts %+v", got)
	}
	g.subCounted(leaf)
	if got := root.sub.counts; got != (converge.Counts{Total: 1, Ready: 1}) {
		t.Errorf("after removing the leaf root's counts %+v", got)
	}
	if g.counts != (converge.Counts{Total: 2, Pending: 1, Ready: 1}) {
		t.Errorf("after removing the leaf graph counts %+v", g.counts)
	}
}

func TestGraphHasLiveConsumer(t *testing.T) {
	g := newTestGraph()
	p := g.testNode("vpc/p", converge.PhaseDeleting, nil)
	c := g.testNode("vpc/c", converge.PhaseReady, nil)
	g.addEdge(&converge.Edge{Consumer: c.id, Producer: p.id})
	if g.hasLiveConsumer(p) {
		t.Fatal("a consumer not being torn down holds up its producer's teardown")
	}
	c.res().Deleting = true
	if !g.hasLiveConsumer(p) {
		t.Fatal("a consumer being torn down does not hold up its producer's teardown")
	}
}

func TestGraphFlowsApplied(t *testing.T) {
	g := newTestGraph()
	p := g.testNode("vpc/p", converge.PhaseReady, nil)
	c := g.testNode("vpc/c", converge.PhaseReady, nil)
	g.addEdge(&converge.Edge{Consumer: c.id, Producer: p.id, Flows: []converge.ValueFlow{{From: "id", To: "vpc_id"}}})
	p.res().Status = []byte(`{"id":"v-1"}`)
	c.res().Spec = []byte(`{"cidr":"10.0.0.0/16","vpc_id":"v-1"}`)
	if !g.flowsApplied(c) {
		t.Fatal("a spec holding its producer's value counts as not applied")
	}
	p.res().Status = []byte(`{"id":"v-2"}`)
	if g.flowsApplied(c) {
		t.Fatal("a spec holding an old value counts as applied")
	}
}

// An ID's edges live on its node while it has one, loose before it is
// created and after it is gone, and move with it both ways.
func TestGraphEdgesFollowTheNode(t *testing.T) {
	g := newTestGraph()
	e := &converge.Edge{Consumer: "vpc/c", Producer: "vpc/p"}
	g.addEdge(e) // neither end exists yet
	if len(g.loose) != 2 {
		t.Fatalf("loose %v, want both ends", g.loose)
	}
	p := g.testNode("vpc/p", converge.PhasePending, nil)
	if len(p.adj.cons()) != 1 || p.adj.cons()[0] != e || g.loose["vpc/p"] != nil {
		t.Fatalf("the producer's edges did not move onto its node: node %v, loose %v", p.adj, g.loose)
	}
	c := g.testNode("vpc/c", converge.PhasePending, nil)
	if len(c.adj.prod()) != 1 || len(g.loose) != 0 {
		t.Fatalf("the consumer's edges did not move onto its node: node %v, loose %v", c.adj, g.loose)
	}
	g.drop(p)
	if got := g.consumersOf("vpc/p"); len(got) != 1 || got[0] != e || len(p.adj.cons()) != 0 {
		t.Fatalf("a dropped producer's consumers %v (node keeps %v), want the edge, loose", got, p.adj)
	}
	g.removeEdge(e)
	if len(g.loose) != 0 || len(c.adj.prod()) != 0 {
		t.Fatalf("after removal loose %v, consumer %v", g.loose, c.adj)
	}
}

func TestGraphChildrenKeepTheirIndex(t *testing.T) {
	g := newTestGraph()
	root := g.testNode("vpc/root", converge.PhasePending, nil)
	var kids []*node
	for _, id := range []converge.ID{"vpc/a", "vpc/b", "vpc/c", "vpc/d"} {
		kids = append(kids, g.testNode(id, converge.PhasePending, root))
	}
	for _, gone := range []*node{kids[1], kids[3], kids[0], kids[0]} { // twice: no-op
		root.disown(gone)
		for i, c := range root.kids() {
			if int(c.ci) != i {
				t.Fatalf("after disowning %s: %s at %d says %d", gone.id, c.id, i, c.ci)
			}
		}
	}
	if l := root.kids(); len(l) != 1 || l[0] != kids[2] {
		t.Fatalf("children %v, want only vpc/c", l)
	}
}

// TestAdjacencyParts: edges added to and dropped from either part of an
// adjacency in any order leave each part holding exactly its edges.
func TestAdjacencyParts(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 1))
	var a adjacency
	want := map[bool]map[*converge.Edge]bool{true: {}, false: {}}
	var all []*converge.Edge
	for step := 0; step < 5000; step++ {
		prod := rng.IntN(2) == 0
		if rng.IntN(3) > 0 || len(all) == 0 {
			e := &converge.Edge{Consumer: converge.ID("vpc/" + itoa(int64(step)))}
			if prod {
				a.addProd(e)
			} else {
				a.addCons(e)
			}
			want[prod][e] = true
			all = append(all, e)
		} else {
			e := all[rng.IntN(len(all))]
			for _, part := range []bool{true, false} {
				if want[part][e] {
					a.drop(e, part)
					delete(want[part], e)
				}
			}
		}
		for _, part := range []bool{true, false} {
			got := a.cons()
			if part {
				got = a.prod()
			}
			if len(got) != len(want[part]) {
				t.Fatalf("step %d: part prod=%v holds %d edges, want %d", step, part, len(got), len(want[part]))
			}
			for _, e := range got {
				if !want[part][e] {
					t.Fatalf("step %d: part prod=%v holds an edge it should not", step, part)
				}
			}
		}
	}
}

// TestGraphLooseShrinks: the map of loose edges, which a compose fills
// with a million children's edges before their nodes, is made again once
// they have moved onto their nodes (a map keeps its table when emptied),
// and what is still loose stays.
func TestGraphLooseShrinks(t *testing.T) {
	g := newTestGraph()
	const n = 3 * looseShrinkMin
	for i := range n {
		g.addEdge(&converge.Edge{Consumer: converge.ID("vpc/c" + itoa(int64(i))), Producer: "account/a"})
	}
	if g.looseHigh < n {
		t.Fatalf("looseHigh %d after %d loose consumers", g.looseHigh, n)
	}
	before := g.loose
	for i := range n {
		g.testNode(converge.ID("vpc/c"+itoa(int64(i))), converge.PhasePending, nil)
	}
	if len(g.loose) != 1 || g.loose["account/a"] == nil || len(g.loose["account/a"].cons()) != n {
		t.Fatalf("loose holds %d entries, want the producer's with its %d edges", len(g.loose), n)
	}
	if reflect.ValueOf(g.loose).UnsafePointer() == reflect.ValueOf(before).UnsafePointer() || g.looseHigh > n/16 {
		t.Errorf("loose was not made again at a sixteenth of its high or less (high %d of %d)", g.looseHigh, n)
	}
}

// TestGraphComingEdges: while a compose is applied, the edges of the
// children it creates wait by position, not in loose; a child's node takes
// its edges on insert, a loose entry one of them had is taken over, and a
// child left without a node ends with its edges loose.
func TestGraphComingEdges(t *testing.T) {
	g := newTestGraph()
	g.addEdge(&converge.Edge{Consumer: "vpc/old", Producer: "vpc/b"}) // vpc/b's edge from before
	ids := []converge.ID{"vpc/a", "vpc/b", "vpc/c"}
	at := newChildIndex(ids)
	for i := range ids {
		at.add(i)
	}
	g.beginComing(at)
	if g.loose["vpc/b"] != nil {
		t.Fatal("vpc/b's loose edges were not taken over")
	}
	g.addEdge(&converge.Edge{Consumer: "vpc/a", Producer: "vpc/b"})
	g.addEdge(&converge.Edge{Consumer: "vpc/c", Producer: "account/x"})
	for _, id := range []converge.ID{"vpc/a", "vpc/b", "vpc/c"} {
		if g.loose[id] != nil {
			t.Errorf("%s: edges went loose while coming", id)
		}
	}
	if got := len(g.consumersOf("vpc/b")); got != 2 {
		t.Errorf("vpc/b has %d consumers while coming, want 2", got)
	}
	g.testNode("vpc/a", converge.PhasePending, nil)
	g.testNode("vpc/b", converge.PhasePending, nil)
	g.endComing()
	if got := len(g.nodes["vpc/a"].adj.prod()); got != 1 {
		t.Errorf("vpc/a's node has %d producers, want 1", got)
	}
	if got := len(g.nodes["vpc/b"].adj.cons()); got != 2 {
		t.Errorf("vpc/b's node has %d consumers, want 2", got)
	}
	if a := g.loose["vpc/c"]; a == nil || len(a.prod()) != 1 {
		t.Errorf("vpc/c (no node) ends with loose edges %v, want its 1 producer", a)
	}
	if g.coming != nil {
		t.Error("coming kept after endComing")
	}
}
