package scheduler

import (
	"context"
	"encoding/json"

	"github.com/convergehq/converge"
)

// Graph is a resource graph that Fanout and Weigh read in place: a
// stored Snapshot (SnapshotGraph), or the running scheduler's own graph
// (Scheduler.Graph), so that pricing a revision does not load a second
// copy of a million resources.
type Graph interface {
	// Read calls f with a view of the graph and returns once f has
	// returned, or ctx's error if f could not run. The view, and every
	// resource it gives, may be used only until f returns: the
	// scheduler's rows are its live ones.
	Read(ctx context.Context, f func(GraphView)) error
}

// ChildHead is what a composition is checked and planned against of a
// resource that exists: its owner, kind, declared spec, provider config
// and whether it is being torn down. Declared shares the graph's bytes:
// read it only within Graph.Read.
type ChildHead struct {
	Owner             converge.ID
	Ref               converge.KindRef
	Declared          json.RawMessage
	ProviderConfigRef string
	Deleting          bool
}

// headOf is r's ChildHead.
func headOf(r *converge.Resource) ChildHead {
	return ChildHead{Owner: r.Owner, Ref: r.Ref(), Declared: r.Declared, ProviderConfigRef: r.ProviderConfigRef, Deleting: r.Deleting}
}

// GraphView reads a Graph within Graph.Read.
type GraphView interface {
	// Len returns how many resources the graph holds.
	Len() int
	// Get returns the resource id, or nil if there is none.
	Get(id converge.ID) *converge.Resource
	// Head returns what a composition is checked and planned against of
	// id, and whether id exists: Get without the rest of the row (a
	// settled row is packed in the scheduler's graph, and Get decodes a
	// copy).
	Head(id converge.ID) (ChildHead, bool)
	// Has reports whether the graph holds id: Get without the row (a
	// settled row is packed in the scheduler's graph, and Get decodes a
	// copy).
	Has(id converge.ID) bool
	// Children calls f with each resource id owns.
	Children(id converge.ID, f func(*converge.Resource))
	// ChildIDs calls f with the ID of each resource id owns: a walk
	// that needs no more than the IDs reads no row (a settled row is
	// packed in the scheduler's graph, and Children decodes a copy).
	ChildIDs(id converge.ID, f func(converge.ID))
	// Consumers calls f with each resource that consumes id.
	Consumers(id converge.ID, f func(converge.ID))
	// Producers calls f with each resource id consumes.
	Producers(id converge.ID, f func(converge.ID))
}

// SnapshotGraph returns snap as a Graph (what converge plan reads).
func SnapshotGraph(snap *converge.Snapshot) Graph {
	g := &snapGraph{
		byID:      make(map[converge.ID]*converge.Resource, len(snap.Resources)),
		children:  map[converge.ID][]*converge.Resource{},
		consumers: map[converge.ID][]converge.ID{},
		producers: map[converge.ID][]converge.ID{},
	}
	for _, r := range snap.Resources {
		g.byID[r.ID()] = r
		if r.Owner != "" {
			g.children[r.Owner] = append(g.children[r.Owner], r)
		}
	}
	for _, e := range snap.Edges {
		g.consumers[e.Producer] = append(g.consumers[e.Producer], e.Consumer)
		g.producers[e.Consumer] = append(g.producers[e.Consumer], e.Producer)
	}
	return g
}

type snapGraph struct {
	byID      map[converge.ID]*converge.Resource
	children  map[converge.ID][]*converge.Resource
	consumers map[converge.ID][]converge.ID
	producers map[converge.ID][]converge.ID
}

func (g *snapGraph) Read(_ context.Context, f func(GraphView)) error {
	f(g)
	return nil
}

func (g *snapGraph) Len() int                              { return len(g.byID) }
func (g *snapGraph) Get(id converge.ID) *converge.Resource { return g.byID[id] }

func (g *snapGraph) Head(id converge.ID) (ChildHead, bool) {
	if r := g.byID[id]; r != nil {
		return headOf(r), true
	}
	return ChildHead{}, false
}

func (g *snapGraph) Children(id converge.ID, f func(*converge.Resource)) {
	for _, r := range g.children[id] {
		f(r)
	}
}

func (g *snapGraph) Has(id converge.ID) bool { return g.byID[id] != nil }

func (g *snapGraph) ChildIDs(id converge.ID, f func(converge.ID)) {
	for _, r := range g.children[id] {
		f(r.ID())
	}
}

func (g *snapGraph) Consumers(id converge.ID, f func(converge.ID)) {
	for _, c := range g.consumers[id] {
		f(c)
	}
}

func (g *snapGraph) Producers(id converge.ID, f func(converge.ID)) {
	for _, p := range g.producers[id] {
		f(p)
	}
}

// Graph returns the scheduler's in-memory graph as a Graph. Its Read
// runs on the loop that owns the graph (like Apply), so it sees a
// consistent graph and copies nothing; a long f holds the loop up.
func (s *Scheduler) Graph() Graph { return schedGraph{s} }

type schedGraph struct{ s *Scheduler }

func (g schedGraph) Read(ctx context.Context, f func(GraphView)) error {
	return g.s.exec(ctx, func(s *Scheduler) { f(nodeView{s}) })
}

// nodeView is a GraphView over the loop's nodes; only the loop uses it.
type nodeView struct{ s *Scheduler }

func (v nodeView) Len() int { return len(v.s.graph.nodes) }

func (v nodeView) Has(id converge.ID) bool { return v.s.graph.nodes[id] != nil }

func (v nodeView) Get(id converge.ID) *converge.Resource {
	if n := v.s.graph.nodes[id]; n != nil {
		return n.peek()
	}
	return nil
}

func (v nodeView) Head(id converge.ID) (ChildHead, bool) {
	if n := v.s.graph.nodes[id]; n != nil {
		return n.head(), true
	}
	return ChildHead{}, false
}

func (v nodeView) Children(id converge.ID, f func(*converge.Resource)) {
	if n := v.s.graph.nodes[id]; n != nil {
		for _, c := range n.kids() {
			f(c.peek())
		}
	}
}

func (v nodeView) ChildIDs(id converge.ID, f func(converge.ID)) {
	if n := v.s.graph.nodes[id]; n != nil {
		for _, c := range n.kids() {
			f(c.id)
		}
	}
}

func (v nodeView) Consumers(id converge.ID, f func(converge.ID)) {
	for _, e := range v.s.graph.consumersOf(id) {
		f(e.Consumer)
	}
}

func (v nodeView) Producers(id converge.ID, f func(converge.ID)) {
	for _, e := range v.s.graph.producersOf(id) {
		f(e.Producer)
	}
}

// Diff is the package's Diff against the scheduler's in-memory graph:
// what Apply(d) would do now, without validating flips. It changes
// nothing and copies no resource.
func (s *Scheduler) Diff(ctx context.Context, d *converge.Desired) (*Plan, error) {
	var p *Plan
	err := s.exec(ctx, func(s *Scheduler) {
		p = diff(nodeView{s}.Get, func(f func(*converge.Resource)) {
			for _, n := range s.graph.gitRoots {
				f(n.peek())
			}
		}, d)
		p.Definitions = s.definitionsNow(d)
	})
	return p, err
}

// Weight is what applying a plan would tear down of a graph: what the
// prune guard weighs.
type Weight struct {
	// Total counts the graph's resources.
	Total int
	// Removed counts the teardown of the plan's Delete items (documents
	// removed from git), TornDown that of its Delete and Prune items
	// together.
	Removed, TornDown int
}

// Weigh counts what applying p would tear down of g: the teardown tree of
// each Delete item (documents removed from git) and each Prune item
// (children a recompose would prune, see Fanout): everything each owns and
// everything that consumes any of that, transitively, each once.
func Weigh(ctx context.Context, g Graph, p *Plan) (Weight, error) {
	var w Weight
	err := g.Read(ctx, func(v GraphView) {
		w.Total = v.Len()
		w.Removed = teardown(v, p.Delete)
		w.TornDown = teardown(v, append(append([]PlanItem(nil), p.Delete...), p.Prune...))
	})
	return w, err
}

// teardown counts the resources of v that roots' teardown trees hold.
func teardown(v GraphView, roots []PlanItem) int {
	if len(roots) == 0 {
		return 0
	}
	marked := map[converge.ID]bool{}
	var stack []converge.ID
	for _, it := range roots {
		stack = append(stack, it.ID)
	}
	n := 0
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if marked[id] {
			continue
		}
		marked[id] = true
		if v.Get(id) != nil {
			n++
		}
		v.ChildIDs(id, func(c converge.ID) { stack = append(stack, c) })
		v.Consumers(id, func(c converge.ID) { stack = append(stack, c) })
	}
	return n
}
