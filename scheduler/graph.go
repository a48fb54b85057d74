package scheduler

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergehq/converge"
)

// resourceGraph is the loop's graph part: every resource's node, the
// edges between them by consumer and by producer, the rows git declares
// and the phase counts. Its methods touch only this state and its nodes.
type resourceGraph struct {
	nodes map[converge.ID]*node
	// drifted holds the nodes with a drift recorded (drift.go), lazily.
	drifted map[converge.ID]*node
	// loose holds the edges of IDs with no node (a producer not created
	// yet, a consumer whose row is gone): every other ID's edges are on
	// its node (node.adj), so a million edges cost no map entries.
	loose map[converge.ID]*adjacency
	// looseHigh is the most entries loose held since it was made: a
	// compose adds a million children's edges before their nodes, and a
	// map keeps its table when emptied (53 MB at 1M, all of it empty).
	looseHigh int
	// coming holds, while a compose is applied, the edges of the children
	// it creates, by position, until each one's node takes them (insert):
	// one slice instead of a loose entry a child (comingEdges).
	coming *comingEdges
	// flowLists are the shared flow lists of edges (internFlows), by a
	// key flowKey builds.
	flowLists map[string][]converge.ValueFlow
	flowKey   []byte
	// gitRoots holds the rows declared in git (no owner): the only ones
	// a revision can stop declaring, so a diff walks them, not a
	// million composed rows.
	gitRoots map[converge.ID]*node
	// gitEdges are the edges the applied revision's depends_on declares,
	// by consumer (applyGitEdges).
	gitEdges map[converge.ID][]converge.Edge
	// counts tallies every resource by phase.
	counts converge.Counts
	// recreate holds the git resources re-declared while their rows were
	// being torn down, by the node torn down: each is created again once
	// its row is gone.
	// (graph.recreate).
	recreate map[*node]*converge.Resource
}

// node is one resource in memory with its derived, non-durable state.
// A million of them are held at scale, so what only an owner needs lives
// in sub, and its state and flags are packed (nodestate.go).
type node struct {
	// r is the row, nil while it is packed (pack.go): read it through
	// res (or peek, to leave it packed).
	r *converge.Resource
	// packed is the row packed, while r is nil.
	packed string
	id     converge.ID
	rs     *refState // of r.Ref(), kept current across flips
	owner  *node
	// adj is n's edges: the producers n consumes and the consumers of n.
	adj adjacency
	// sub is what only an owner (a composer) keeps; nil for leaves.
	sub *subtree
	// resyncAt is the resync bucket (resyncTick units since the epoch)
	// this node waits in, or 0.
	resyncAt int64
	// tries is how many attempts the run that just succeeded took; the
	// Ready event records it when it is more than one.
	tries int32
	// refusals counts the store's refusals of this row.
	refusals int32
	// ci is n's index in its owner's children (subtree.children).
	ci int32

	// state is where n is in its lifecycle (nodestate.go): free to be
	// considered, parked, blocked, backing off, or removed.
	state nodeState
	// pk is the packed row's phase (pack.go); meaningless while r is
	// decoded.
	pk packedPhase
	// marks are n's independent flags (nodestate.go): queued, dirty, ….
	marks nodeMarks
}

// adjacency is one resource's edges, each edge held by both ends: one
// slice, the edges it consumes (by producer) first, then the edges that
// consume it, in no order within each part (16 bytes less in each of a
// million nodes than a slice for each part).
type adjacency struct {
	e  []*converge.Edge
	np int32 // how many of e it consumes
}

// prod returns the edges it consumes (not to be changed or appended to).
func (a *adjacency) prod() []*converge.Edge { return a.e[:a.np:a.np] }

// cons returns the edges that consume it (not to be changed).
func (a *adjacency) cons() []*converge.Edge { return a.e[a.np:] }

// addProd adds an edge it consumes: the first consuming edge moves to
// the end to make room.
func (a *adjacency) addProd(e *converge.Edge) {
	a.e = append(a.e, e)
	if last := len(a.e) - 1; last > int(a.np) {
		a.e[last], a.e[a.np] = a.e[a.np], e
	}
	a.np++
}

// addCons adds an edge that consumes it.
func (a *adjacency) addCons(e *converge.Edge) { a.e = append(a.e, e) }

// drop removes e from the edges it consumes (prod) or from those that
// consume it.
func (a *adjacency) drop(e *converge.Edge, prod bool) {
	from, to := int(a.np), len(a.e)
	if prod {
		from, to = 0, int(a.np)
	}
	for i := from; i < to; i++ {
		if a.e[i] != e {
			continue
		}
		last := len(a.e) - 1
		if prod {
			// The part's last edge fills the hole, and the slice's
			// last fills the part's.
			a.np--
			a.e[i] = a.e[a.np]
			a.e[a.np] = a.e[last]
		} else {
			a.e[i] = a.e[last]
		}
		a.e[last] = nil
		a.e = a.e[:last]
		if last == 0 {
			a.e = nil
		}
		return
	}
}

// subtree is an owner's view of what it owns.
type subtree struct {
	// children are the resources it owns, in no order (a child knows
	// its index, node.ci).
	children []*node
	// counts tallies every descendant by phase.
	counts converge.Counts
	// composeStatus is the status the composer returned, before the
	// rollup is merged in.
	composeStatus []byte
	// composedSpec is the spec of the composition the children are now,
	// when the composer's ComposedBy says a worker can answer a delta
	// against it (nil: unknown, the next compose is answered in full).
	composedSpec []byte
	// composedN counts the children of that composition, once a compose
	// was applied in this process (composedNKnown): a delta's event then
	// names the total without walking a million children.
	composedN      int
	composedNKnown bool
	// pending counts the children with a change not yet durable: a row
	// dirty, in a batch not yet committed or refused for good, or a
	// composer holding its own record back (held). See recount.
	pending int32
	// held: the composer composed (heldComposed), or turned Ready, while
	// some child had a change not yet durable; until none has, its row
	// is written as not composed at its generation and not Ready
	// (maskHeld), so no crash leaves a store that records a composition
	// or a Ready subtree its children's rows do not hold.
	held, heldComposed bool
	// heldWritten: the row last put in a batch was masked, so it is
	// written again when the hold ends.
	heldWritten bool
	// rollout is the composer's rollout (rollout.go), nil if none.
	rollout *rollout
}

// settled reports whether a loaded node needs no look at start: Ready
// at its generation, not deleting, leased or backing off, with its flows
// as stored. consider would do nothing for it, and a converged million
// then costs a start (and a sync waiting for it) nothing.
func settled(n *node) bool {
	// A packed row (pack.go) has no lease, and is Ready at its
	// generation unless it is Pending or being torn down.
	if n.r == nil && n.pk != pkReady {
		return false
	}
	if r := n.r; r != nil && (r.Phase != converge.PhaseReady || r.ObservedGeneration != r.Generation || r.Deleting || r.Lease != nil) {
		return false
	}
	return !n.is(stateBackoff) && !n.has(mFlowsDirty) && !n.has(mResync) && !n.has(mUnstorable)
}

// deleting reports whether n is in a teardown tree, without decoding a
// packed row.
func (n *node) deleting() bool {
	if n.r == nil {
		return n.pk == pkDeleting
	}
	return n.r.Deleting
}

// markFlows says n's flows changed: its spec is recomputed when it is
// next considered.
func (n *node) markFlows() {
	n.set(mFlowsDirty)
	n.unset(mFlowsLoaded)
}

// kids returns the children n owns (not to be changed).
func (n *node) kids() []*node {
	if n.sub == nil {
		return nil
	}
	return n.sub.children
}

// adopt makes c a child of n.
func (n *node) adopt(c *node) {
	t := n.tree()
	c.ci = int32(len(t.children))
	t.children = append(t.children, c)
}

// disown removes c from n's children.
func (n *node) disown(c *node) {
	l := n.kids()
	i := int(c.ci)
	if i >= len(l) || l[i] != c {
		return
	}
	last := l[len(l)-1]
	l[i], last.ci = last, int32(i)
	l[len(l)-1] = nil
	n.sub.children = l[:len(l)-1]
}

// tree returns n's subtree state, creating it.
func (n *node) tree() *subtree {
	if n.sub == nil {
		n.sub = &subtree{}
	}
	return n.sub
}

// reserve makes room for the k children of owner's first composition
// (it owns none yet), when that is more than the graph holds now: a first
// compose of a million children grew the node maps (nodes, the owner's
// children, the edge lists) one doubling at a time, a fifth of its time
// on the loop. Rebuilding a map smaller than k costs less than the
// doublings it saves; a recompose, whose children mostly exist, reserves
// nothing.
func (g *resourceGraph) reserve(owner *node, k int) {
	if len(owner.kids()) > 0 {
		return
	}
	owner.tree().children = make([]*node, 0, k)
	if len(g.nodes) < k {
		g.nodes = growMap(g.nodes, k)
	}
}

// growMap returns m's entries in a map with room for k more.
func growMap[V any](m map[converge.ID]V, k int) map[converge.ID]V {
	out := make(map[converge.ID]V, len(m)+k)
	for id, v := range m {
		out[id] = v
	}
	return out
}

// maxInternedFlows bounds the table of shared flow lists: composers emit
// a few distinct lists, each on many edges; past the bound (an unusual
// composer) lists are simply not shared.
const maxInternedFlows = 4096

// dropEdge removes e from l, not keeping l's order.

// addPhase counts phase p in c (not its total).
func addPhase(c *converge.Counts, p converge.Phase) {
	switch p {
	case converge.PhaseReady:
		c.Ready++
	case converge.PhaseFailed:
		c.Failed++
	case converge.PhasePending:
		c.Pending++
	case converge.PhaseRunning:
		c.Running++
	case converge.PhaseDeleting:
		c.Deleting++
	}
}

// subPhase uncounts phase p in c (not its total).
func subPhase(c *converge.Counts, p converge.Phase) {
	switch p {
	case converge.PhaseReady:
		c.Ready--
	case converge.PhaseFailed:
		c.Failed--
	case converge.PhasePending:
		c.Pending--
	case converge.PhaseRunning:
		c.Running--
	case converge.PhaseDeleting:
		c.Deleting--
	}
}

// itoa is strconv.FormatInt in base 10: generations and counts in
// idempotency keys and event messages.
func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// addEdge adds e to the graph, replacing the edge between the same
// consumer and producer. There is no map of edges by key: a consumer has
// a few producers, and a scan of them costs less than a map entry per
// edge (a million edges at scale).
func (g *resourceGraph) addEdge(e *converge.Edge) {
	if old := g.edgeOf(e.Consumer, e.Producer); old != nil {
		g.removeEdge(old)
	}
	g.adjFor(e.Consumer).addProd(e)
	g.adjFor(e.Producer).addCons(e)
}

// adjOf returns id's edges to read: its node's, else loose ones, else
// nil.
func (g *resourceGraph) adjOf(id converge.ID) *adjacency {
	if n := g.nodes[id]; n != nil {
		return &n.adj
	}
	if a := g.loose[id]; a != nil {
		return a
	}
	return g.coming.of(id, false)
}

// adjFor returns id's edges to change, making a loose entry for an ID
// with neither node nor edges (unless a compose being applied creates it:
// then its slot in coming).
func (g *resourceGraph) adjFor(id converge.ID) *adjacency {
	if a := g.adjOf(id); a != nil {
		return a
	}
	if a := g.coming.of(id, true); a != nil {
		return a
	}
	a := &adjacency{}
	g.putLoose(id, a)
	return a
}

// comingEdges are the edges of the children of a compose being applied,
// by their position in the compose's IDs (at), before their nodes exist.
type comingEdges struct {
	at  *childIndex
	adj []adjacency // made on the first edge
}

// of returns the slot of id's edges if id is a child coming, else nil; it
// makes the slots when create is set and they are not made yet (else it
// reads none).
func (c *comingEdges) of(id converge.ID, create bool) *adjacency {
	if c == nil {
		return nil
	}
	i, ok := c.at.find(id)
	if !ok {
		return nil
	}
	if c.adj == nil {
		if !create {
			return nil
		}
		c.adj = make([]adjacency, len(c.at.ids))
	}
	return &c.adj[i]
}

// beginComing starts holding the edges of the children at indexes (a
// compose's) apart, taking over the loose edges any of them had.
func (g *resourceGraph) beginComing(at *childIndex) {
	g.coming = &comingEdges{at: at}
	for id, a := range g.loose {
		if c := g.coming.of(id, true); c != nil {
			*c = *a
			delete(g.loose, id)
		}
	}
}

// endComing stops holding children's edges apart: the edges of a child
// with no node (one left to a later compose) become loose ones.
func (g *resourceGraph) endComing() {
	c := g.coming
	g.coming = nil
	for i := range c.adj {
		if a := &c.adj[i]; len(a.e) > 0 && g.nodes[c.at.ids[i]] == nil {
			cp := *a
			g.putLoose(c.at.ids[i], &cp)
		}
	}
	g.looseGone()
}

// putLoose makes a id's loose edges.
func (g *resourceGraph) putLoose(id converge.ID, a *adjacency) {
	g.loose[id] = a
	g.looseHigh = max(g.looseHigh, len(g.loose))
}

// looseGone follows an entry's delete from loose: once it holds a
// sixteenth of its high, it is made again at its size (a copy of what is
// left, so a cost of one copy per entry deleted at most).
func (g *resourceGraph) looseGone() {
	if g.looseHigh < looseShrinkMin || len(g.loose) > g.looseHigh/16 {
		return
	}
	m := make(map[converge.ID]*adjacency, len(g.loose))
	for id, a := range g.loose {
		m[id] = a
	}
	g.loose, g.looseHigh = m, len(m)
}

// looseShrinkMin is the high below which loose is never made again.
const looseShrinkMin = 4096

// producersOf returns the edges id consumes (not to be changed).
func (g *resourceGraph) producersOf(id converge.ID) []*converge.Edge {
	if a := g.adjOf(id); a != nil {
		return a.prod()
	}
	return nil
}

// consumersOf returns the edges that consume id (not to be changed).
func (g *resourceGraph) consumersOf(id converge.ID) []*converge.Edge {
	if a := g.adjOf(id); a != nil {
		return a.cons()
	}
	return nil
}

// insert puts n in the graph under its ID, taking the loose edges the ID
// had.
func (g *resourceGraph) insert(n *node) {
	g.nodes[n.id] = n
	if a := g.loose[n.id]; a != nil {
		n.adj = *a
		delete(g.loose, n.id)
		g.looseGone()
	} else if a := g.coming.of(n.id, false); a != nil {
		n.adj, *a = *a, adjacency{}
	}
}

// drop takes n out of the graph; the edges it still has stay, loose,
// under its ID.
func (g *resourceGraph) drop(n *node) {
	delete(g.nodes, n.id)
	if len(n.adj.e) > 0 {
		a := n.adj
		g.putLoose(n.id, &a)
	}
	n.adj = adjacency{}
}

// internFlows returns the graph's shared copy of a flow list equal to f
// (f itself the first time): a million edges of a composition carry a
// handful of distinct lists. Flow lists are never changed in place.
func (g *resourceGraph) internFlows(f []converge.ValueFlow) []converge.ValueFlow {
	if len(f) == 0 {
		return nil
	}
	k := g.flowKey[:0]
	for _, v := range f {
		k = append(append(append(append(k, v.From...), 0), v.To...), 0)
	}
	g.flowKey = k
	if x, ok := g.flowLists[string(k)]; ok {
		return x
	}
	if len(g.flowLists) < maxInternedFlows {
		g.flowLists[string(k)] = f
	}
	return f
}

// edgeOf returns the edge consumer→producer in the graph, or nil.
func (g *resourceGraph) edgeOf(consumer, producer converge.ID) *converge.Edge {
	for _, e := range g.producersOf(consumer) {
		if e.Producer == producer {
			return e
		}
	}
	return nil
}

func (g *resourceGraph) removeEdge(e *converge.Edge) {
	if g.edgeOf(e.Consumer, e.Producer) != e {
		return
	}
	g.dropFrom(e.Consumer, e, true)
	g.dropFrom(e.Producer, e, false)
}

// dropFrom removes e from id's producer (prod) or consumer edges; a loose
// entry left with none goes.
func (g *resourceGraph) dropFrom(id converge.ID, e *converge.Edge, prod bool) {
	a := g.adjOf(id)
	if a == nil {
		return
	}
	a.drop(e, prod)
	if len(a.e) == 0 && g.loose[id] == a {
		delete(g.loose, id)
		g.looseGone()
	}
}

// noteGitRoot records n in gitRoots if git declares it.
func (g *resourceGraph) noteGitRoot(n *node) {
	if n.res().Origin == converge.OriginGit && n.res().Owner == "" {
		g.gitRoots[n.id] = n
	}
}

// hasLiveConsumer reports whether a consumer of n is still being torn
// down, which n's teardown waits for (reverse dependency order). A
// consumer that is not Deleting came after n's teardown started (a
// recompose re-created it, or gave it a new edge to n): it waits for n,
// gated, so n's teardown must not wait for it. n finishes, its row goes,
// and the owner's recompose re-creates n for that consumer.
func (g *resourceGraph) hasLiveConsumer(n *node) bool {
	for _, e := range n.adj.cons() {
		if c := g.nodes[e.Consumer]; c != nil && c.deleting() {
			return true
		}
	}
	return false
}

// flowsApplied reports whether n's Spec already holds what each of its
// flows carries now: the producer's value at every From is the bytes at
// its To (or both are absent). It is exact only for a row as loaded: a
// row carries its edges, so its stored Spec was computed from exactly
// those flows, and only a producer's status can have moved on since (a
// crash between their commits). A start then checks a million consumers
// without rebuilding their specs.
func (g *resourceGraph) flowsApplied(n *node) bool {
	for _, e := range n.adj.prod() {
		if len(e.Flows) == 0 {
			continue
		}
		var status []byte
		if p := g.nodes[e.Producer]; p != nil {
			status = p.status()
		}
		for _, f := range e.Flows {
			pv, pok := getField(status, f.From)
			cv, cok := getField(n.spec(), f.To)
			if pok != cok || !bytes.Equal(pv, cv) {
				return false
			}
		}
	}
	return true
}

// checkLoadedFlows checks every loaded consumer's flows (flowsApplied)
// on every core before the loop runs, while nothing changes the graph:
// a consumer whose spec already holds its flows needs nothing at start,
// the others recompute their spec when first considered. At a million
// rows this is a fraction of a second instead of seconds on the loop.
func (g *resourceGraph) checkLoadedFlows() {
	var check []*node
	for _, n := range g.nodes {
		if n.has(mFlowsLoaded) {
			check = append(check, n)
		}
	}
	ok := make([]bool, len(check))
	const chunk = 4096
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), (len(check)+chunk-1)/chunk) {
		wg.Go(func() {
			for {
				c := int(next.Add(1)-1) * chunk
				if c >= len(check) {
					return
				}
				for i := c; i < min(c+chunk, len(check)); i++ {
					ok[i] = g.flowsApplied(check[i]) // reads only
				}
			}
		})
	}
	wg.Wait()
	for i, n := range check {
		n.setTo(mFlowsDirty, !ok[i])
		n.unset(mFlowsLoaded)
	}
}

// counted counts a new node (in phase r.Phase) in the totals, its
// ref's and every ancestor's.
func (g *resourceGraph) counted(n *node) {
	g.counts.Add(n.phase())
	n.rs.stats.phases.Add(n.phase())
	for a := n.owner; a != nil; a = a.owner {
		a.tree().counts.Add(n.phase())
	}
}

// recounted moves n, just changed from phase old, in the totals, its
// ref's and every ancestor's.
func (g *resourceGraph) recounted(n *node, old converge.Phase) {
	p := n.phase()
	subPhase(&g.counts, old)
	addPhase(&g.counts, p)
	subPhase(&n.rs.stats.phases, old)
	addPhase(&n.rs.stats.phases, p)
	for a := n.owner; a != nil; a = a.owner {
		subPhase(&a.tree().counts, old)
		addPhase(&a.tree().counts, p)
	}
}

// subCounted removes a node from the totals and its ancestors.
func (g *resourceGraph) subCounted(n *node) {
	g.counts.Total--
	subPhase(&g.counts, n.phase())
	n.rs.stats.phases.Total--
	subPhase(&n.rs.stats.phases, n.phase())
	for a := n.owner; a != nil; a = a.owner {
		a.tree().counts.Total--
		subPhase(&a.tree().counts, n.phase())
	}
}

// subject returns the live node d is about, or nil if its subject is
// gone (deleted, or re-created with another uid).
func (g *resourceGraph) subject(d *converge.Delivery) *node {
	n := g.nodes[d.Subject.Resource]
	if n == nil || n.is(stateRemoved) || n.uid() != d.Subject.UID {
		return nil
	}
	return n
}

// teardownReason names what n's teardown waits for, preferring a blocker
// whose own teardown is failing.
func (g *resourceGraph) teardownReason(n *node, now time.Time) string {
	failing := func(b *node) bool { return (b.r != nil && b.r.Attempts > 0) || b.has(mStuck) }
	var best *node
	blockers, scanned := 0, 0
	consider := func(b *node) {
		blockers++
		if best == nil {
			best = b
			return
		}
		if bf, cf := failing(b), failing(best); bf && !cf || bf == cf && b.id < best.id {
			best = b
		}
	}
	for _, c := range n.kids() {
		// A big owner's children are sampled: the reason is refreshed
		// with every batch of its teardown, and a walk of a million
		// children each time took a quarter of a 1M cascade's CPU.
		if scanned == maxReasonScan {
			blockers = len(n.kids())
			break
		}
		scanned++
		consider(c)
	}
	for _, e := range n.adj.cons() {
		if c := g.nodes[e.Consumer]; c != nil && c.deleting() {
			consider(c)
		}
	}
	if best == nil {
		return n.res().Reason
	}
	reason := "waiting for teardown of " + string(best.id)
	if failing(best) {
		since := best.res().DeletedAt
		if since.IsZero() {
			since = now
		}
		reason += " (stuck " + now.Sub(since).Round(time.Second).String() + ")"
	}
	if blockers > 1 {
		reason += " (+" + strconv.Itoa(blockers-1) + " more)"
	}
	return reason
}

// maxReasonScan bounds the children teardownReason looks at: of an owner
// with more, it names the best of a sample (a failing one first, else the
// least ID among them), and counts them all.
const maxReasonScan = 4096

// driftedByRef counts the drifted resources by KindRef, dropping stale
// entries.
func (g *resourceGraph) driftedByRef() map[converge.KindRef]int {
	var out map[converge.KindRef]int
	for id, n := range g.drifted {
		if n.is(stateRemoved) || n.r == nil || n.r.Drift == nil || g.nodes[id] != n { // packed: no drift
			delete(g.drifted, id)
			continue
		}
		if out == nil {
			out = make(map[converge.KindRef]int)
		}
		out[n.res().Ref()]++
	}
	return out
}
