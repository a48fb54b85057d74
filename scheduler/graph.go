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
	drifted   map[converge.ID]*node
	producers map[converge.ID][]*converge.Edge // by consumer
	consumers map[converge.ID][]*converge.Edge // by producer
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
	packed   string
	id       converge.ID
	rs       *refState // of r.Ref(), kept current across flips
	owner    *node
	children map[converge.ID]*node
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

	// state is where n is in its lifecycle (nodestate.go): free to be
	// considered, parked, blocked, backing off, or removed.
	state nodeState
	// pkPending: the packed row is Pending (else Ready at its
	// generation); meaningless while r is decoded.
	pkPending bool
	// marks are n's independent flags (nodestate.go): queued, dirty, ….
	marks nodeMarks
}

// subtree is an owner's view of what it owns.
type subtree struct {
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
	// generation unless it is Pending.
	if n.r == nil && n.pkPending {
		return false
	}
	if r := n.r; r != nil && (r.Phase != converge.PhaseReady || r.ObservedGeneration != r.Generation || r.Deleting || r.Lease != nil) {
		return false
	}
	return !n.is(stateBackoff) && !n.has(mFlowsDirty) && !n.has(mResync) && !n.has(mUnstorable)
}

// deleting reports whether n is in a teardown tree, without decoding a
// packed row (never one).
func (n *node) deleting() bool { return n.r != nil && n.r.Deleting }

// markFlows says n's flows changed: its spec is recomputed when it is
// next considered.
func (n *node) markFlows() {
	n.set(mFlowsDirty)
	n.unset(mFlowsLoaded)
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
	if len(owner.children) > 0 {
		return
	}
	owner.children = make(map[converge.ID]*node, k)
	if len(g.nodes) < k {
		g.nodes = growMap(g.nodes, k)
	}
	if len(g.producers) < k {
		g.producers = growMap(g.producers, k)
	}
	if len(g.consumers) < k {
		g.consumers = growMap(g.consumers, k)
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
func dropEdge(l []*converge.Edge, e *converge.Edge) []*converge.Edge {
	for i, x := range l {
		if x == e {
			l[i] = l[len(l)-1]
			l[len(l)-1] = nil
			return l[:len(l)-1]
		}
	}
	return l
}

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
	g.producers[e.Consumer] = append(g.producers[e.Consumer], e)
	g.consumers[e.Producer] = append(g.consumers[e.Producer], e)
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
	for _, e := range g.producers[consumer] {
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
	g.producers[e.Consumer] = dropEdge(g.producers[e.Consumer], e)
	if len(g.producers[e.Consumer]) == 0 {
		delete(g.producers, e.Consumer)
	}
	g.consumers[e.Producer] = dropEdge(g.consumers[e.Producer], e)
	if len(g.consumers[e.Producer]) == 0 {
		delete(g.consumers, e.Producer)
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
	for _, e := range g.consumers[n.id] {
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
	for _, e := range g.producers[n.id] {
		if len(e.Flows) == 0 {
			continue
		}
		var status []byte
		if p := g.nodes[e.Producer]; p != nil {
			status = p.status()
		}
		for _, f := range e.Flows {
			pv, pok := getField(status, f.From)
			cv, cok := getField(n.res().Spec, f.To)
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
	for _, c := range n.children {
		// A big owner's children are sampled: the reason is refreshed
		// with every batch of its teardown, and a walk of a million
		// children each time took a quarter of a 1M cascade's CPU.
		if scanned == maxReasonScan {
			blockers = len(n.children)
			break
		}
		scanned++
		consider(c)
	}
	for _, e := range g.consumers[n.id] {
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
