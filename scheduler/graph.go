package scheduler

import (
	"container/heap"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergehq/converge"
)

// node is one resource in memory with its derived, non-durable state.
// A million of them are held at scale, so what only an owner needs lives
// in sub, and its state and flags are packed (nodestate.go).
type node struct {
	r        *converge.Resource
	id       converge.ID
	rs       *refState // of r.Ref(), kept current across flips
	owner    *node
	children map[converge.ID]*node
	// sub is what only an owner (a composer) keeps; nil for leaves.
	sub *subtree
	// recreate is a git resource re-declared while this row was being
	// torn down: it is created again once the row is gone.
	recreate *converge.Resource
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

// tree returns n's subtree state, creating it.
// checkLoadedFlows checks every loaded consumer's flows (flowsApplied)
// on every core before the loop runs, while nothing changes the graph:
// a consumer whose spec already holds its flows needs nothing at start,
// the others recompute their spec when first considered. At a million
// rows this is a fraction of a second instead of seconds on the loop.
func (s *Scheduler) checkLoadedFlows() {
	var check []*node
	for _, n := range s.nodes {
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
					ok[i] = s.flowsApplied(check[i]) // reads only
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

// settled reports whether a loaded node needs no look at start: Ready
// at its generation, not deleting, leased or backing off, with its flows
// as stored. consider would do nothing for it, and a converged million
// then costs a start (and a sync waiting for it) nothing.
func settled(n *node) bool {
	r := n.r
	return r.Phase == converge.PhaseReady && r.ObservedGeneration == r.Generation && !r.Deleting &&
		r.Lease == nil && !n.is(stateBackoff) && !n.has(mFlowsDirty) && !n.has(mResync) && !n.has(mUnstorable)
}

// noteGitRoot records n in gitRoots if git declares it.
func (s *Scheduler) noteGitRoot(n *node) {
	if n.r.Origin == converge.OriginGit && n.r.Owner == "" {
		s.gitRoots[n.id] = n
	}
}

// markFlows says n's flows changed: its spec is recomputed when it is
// next considered.
func (n *node) markFlows() {
	n.set(mFlowsDirty)
	n.unset(mFlowsLoaded)
}

func (n *node) tree() *subtree {
	if n.sub == nil {
		n.sub = &subtree{}
	}
	return n.sub
}

// isComposer reports whether n's kind declares compose.
func (s *Scheduler) isComposer(n *node) bool { return n.rs.composer }

// refState returns the dispatch state of ref, creating it.
func (s *Scheduler) refState(ref converge.KindRef) *refState {
	rs := s.refs[ref]
	if rs == nil {
		rs = &refState{ref: ref}
		s.refs[ref] = rs
		s.refreshKind(rs)
	}
	return rs
}

// refreshKind caches ref's kind on its refState; it runs whenever the
// kinds change.
func (s *Scheduler) refreshKind(rs *refState) {
	k := s.kinds[rs.ref]
	rs.kind = k
	rs.composer = k != nil && k.Has(converge.ReactionCompose)
	rs.max = s.cfg.DefaultMaxInflight
	if k != nil && k.MaxInflight > 0 {
		rs.max = k.MaxInflight
	}
}

func (s *Scheduler) refreshKinds() {
	for _, rs := range s.refs {
		s.refreshKind(rs)
	}
}

func (s *Scheduler) leaseTTL(ref converge.KindRef) time.Duration {
	k := s.refState(ref).kind
	if k != nil && k.TaskDeadline > 0 {
		return k.TaskDeadline
	}
	if k != nil && k.Has(converge.ReactionCompose) {
		return s.cfg.ComposeLeaseTTL
	}
	return s.cfg.LeaseTTL
}

func (s *Scheduler) resyncInterval(n *node) time.Duration {
	k := n.rs.kind
	if k == nil {
		return 0
	}
	if k.Has(converge.ReactionCompose) && !k.ResyncRecomposes {
		return 0
	}
	if k.ResyncInterval > 0 {
		return k.ResyncInterval
	}
	return s.settings.ResyncInterval
}

// load builds the in-memory graph from a snapshot.
func (s *Scheduler) load(snap *converge.Snapshot) {
	// Kinds and configs are loaded: secretInfo computes again.
	defer func() { s.secrets = nil }()
	var overdue []*node // Ready rows whose resync came due while no process ran
	for _, k := range snap.Kinds {
		s.kinds[k.Ref()] = k
	}
	for _, c := range snap.Configs {
		s.configs[c.Name] = c
	}
	s.rebuildDefaults()
	for _, b := range snap.Bindings {
		s.bindings[b.Name] = b
	}
	s.rebuildByKind()
	for _, r := range snap.Resources {
		n := &node{r: r, id: r.ID(), rs: s.refState(r.Ref())}
		if r.Drift != nil {
			if s.drifted == nil {
				s.drifted = make(map[converge.ID]*node)
			}
			s.drifted[n.id] = n
		}
		// One string per row for ID and name, the refState's for the
		// kind, the owner's ID for the owner (below): a million rows
		// do not each keep decoded copies.
		r.Kind = n.rs.ref.Kind
		r.Name = string(n.id)[len(r.Kind)+1:]
		s.nodes[n.id] = n
		s.noteGitRoot(n)
		n.rs.count++
	}
	for _, n := range s.nodes {
		if n.r.Owner != "" {
			if o := s.nodes[n.r.Owner]; o != nil {
				n.r.Owner = o.id
				n.owner = o
				if o.children == nil {
					o.children = make(map[converge.ID]*node)
				}
				o.children[n.id] = n
				// A child torn down under a live owner may have been
				// deleted by an operator: which, the store does not
				// say, so the owner recomposes after the teardown (for
				// a pruned child, one compose more than needed).
				n.setTo(mRecomposeOwner, n.r.Deleting && !o.r.Deleting)
			}
		}
	}
	for i := range snap.Edges {
		e := &snap.Edges[i]
		if c := s.nodes[e.Consumer]; c != nil {
			e.Consumer = c.id
		}
		if p := s.nodes[e.Producer]; p != nil {
			e.Producer = p.id
		}
		e.Flows = s.internFlows(e.Flows)
		s.addEdge(e)
	}
	for _, n := range s.nodes {
		r := n.r
		if r.Lease != nil {
			// The previous process's lease: treat as expired.
			r.Lease = nil
			if r.Phase == converge.PhaseRunning {
				r.Phase = converge.PhasePending
			}
			s.markDirty(n)
		}
		if r.Deleting {
			r.Phase = converge.PhaseDeleting
		}
		if s.isComposer(n) {
			if n.tree().composeStatus == nil && r.Status != nil {
				n.tree().composeStatus = stripRollup(r.Status)
			}
			s.loadRollout(n)
			if r.ComposedBy != "" && r.ObservedGeneration == r.Generation && !r.Deleting {
				n.tree().composedSpec = r.Spec
			}
		}
		s.counts.Add(r.Phase)
		n.rs.stats.phases.Add(r.Phase)
		for a := n.owner; a != nil; a = a.owner {
			a.tree().counts.Add(r.Phase)
		}
		n.setTo(mFlowsDirty, len(s.producers[n.id]) > 0)
		n.setTo(mFlowsLoaded, n.has(mFlowsDirty))
		if r.Phase == converge.PhaseFailed && !r.NextAttempt.IsZero() {
			n.to(stateBackoff)
			s.backoffN++
			s.addTimer(r.NextAttempt, timerRetry, n.id, "")
		}
		if r.Phase == converge.PhaseDeleting && !r.NextAttempt.IsZero() {
			n.to(stateBackoff)
			s.backoffN++
			s.addTimer(r.NextAttempt, timerRetry, n.id, "")
		}
		if r.Phase == converge.PhaseReady && r.ObservedGeneration == r.Generation {
			// A restart does not postpone a resync: it is due one
			// interval after the row last changed.
			if iv := s.resyncInterval(n); iv > 0 && !r.UpdatedAt.IsZero() && !r.UpdatedAt.Add(iv).After(s.now) {
				if s.cfg.PostponeLoadedResyncs {
					s.scheduleResync(n)
				} else {
					overdue = append(overdue, n)
				}
			} else {
				s.scheduleResyncFrom(n, r.UpdatedAt)
			}
		}
	}
	s.checkLoadedFlows()
	// Overdue resyncs run soon, spread over a millisecond per row (at
	// most one interval): a million rows due at once would take every
	// worker slot for minutes, ahead of the work the restart came for.
	window := time.Duration(len(overdue)) * time.Millisecond
	for _, n := range overdue {
		w := min(window, s.resyncInterval(n))
		s.addResync(n, s.now.Add(time.Duration(s.cfg.Rand.Int64N(int64(w)+1))))
	}
	// The stored deliveries first: a composer that turns Ready below
	// (its record was held back while its children's rows were not all
	// durable, maskHeld) fires its transition again, which they dedup.
	for _, d := range snap.Deliveries {
		s.loadDelivery(d)
	}
	// Composer phases follow their (now counted) subtrees. A composer
	// recorded as composed at its generation had every child's row
	// durable when that record was written (maskHeld), but a store
	// written before that rule, or rows lost by other means, can hold
	// fewer descendants than its stored rollup counts: it composes
	// again, in full (its stored spec is no base: a delta against it
	// would answer that nothing changed), which re-creates them.
	for _, n := range s.nodes {
		if s.isComposer(n) {
			if r := n.r; !r.Deleting && r.ObservedGeneration == r.Generation {
				if want, have := rollupTotal(r.Status), n.tree().counts.Total; want > have {
					s.event(n.id, "Recompose", "recomposing in full: "+strconv.Itoa(want-have)+" of its "+strconv.Itoa(want)+
						" descendants are missing from the store")
					s.forgetComposition(n)
					s.bumpGeneration(n)
					continue
				}
			}
			s.evalComposer(n)
			n.unset(mRollupDirty)
		}
	}
	s.startQueue = s.startQueue[:0]
	for _, n := range s.nodes {
		if !settled(n) {
			s.startQueue = append(s.startQueue, n)
		}
	}
	s.dirty, s.updated = s.dirty[:0], s.updated[:0]
	for _, n := range s.nodes {
		n.set(mStored)
		if n.has(mDirty) {
			s.updated = append(s.updated, n)
		}
	}
}

func (s *Scheduler) rebuildDefaults() {
	clear(s.defaults)
	for _, c := range s.configs {
		if c.IsDefault {
			s.defaults[c.Ref()] = c
		}
	}
}

func (s *Scheduler) rebuildByKind() {
	clear(s.byKind)
	for _, b := range s.bindings {
		s.byKind[b.Kind] = append(s.byKind[b.Kind], b)
	}
}

// resolveConfig returns the config r's tasks carry.
func (s *Scheduler) resolveConfig(r *converge.Resource) []byte {
	if r.ProviderConfigRef != "" {
		if c := s.configs[r.ProviderConfigRef]; c != nil {
			return c.Config
		}
		return nil
	}
	if c := s.defaults[r.Ref()]; c != nil {
		return c.Config
	}
	return nil
}

// addEdge adds e to the graph, replacing the edge between the same
// consumer and producer. There is no map of edges by key: a consumer has
// a few producers, and a scan of them costs less than a map entry per
// edge (a million edges at scale).
func (s *Scheduler) addEdge(e *converge.Edge) {
	if old := s.edgeOf(e.Consumer, e.Producer); old != nil {
		s.removeEdge(old)
	}
	s.producers[e.Consumer] = append(s.producers[e.Consumer], e)
	s.consumers[e.Producer] = append(s.consumers[e.Producer], e)
}

// maxInternedFlows bounds the table of shared flow lists: composers emit
// a few distinct lists, each on many edges; past the bound (an unusual
// composer) lists are simply not shared.
const maxInternedFlows = 4096

// internFlows returns the graph's shared copy of a flow list equal to f
// (f itself the first time): a million edges of a composition carry a
// handful of distinct lists. Flow lists are never changed in place.
func (s *Scheduler) internFlows(f []converge.ValueFlow) []converge.ValueFlow {
	if len(f) == 0 {
		return nil
	}
	k := s.flowKey[:0]
	for _, v := range f {
		k = append(append(append(append(k, v.From...), 0), v.To...), 0)
	}
	s.flowKey = k
	if x, ok := s.flowLists[string(k)]; ok {
		return x
	}
	if len(s.flowLists) < maxInternedFlows {
		s.flowLists[string(k)] = f
	}
	return f
}

// edgeOf returns the edge consumer→producer in the graph, or nil.
func (s *Scheduler) edgeOf(consumer, producer converge.ID) *converge.Edge {
	for _, e := range s.producers[consumer] {
		if e.Producer == producer {
			return e
		}
	}
	return nil
}

func (s *Scheduler) removeEdge(e *converge.Edge) {
	if s.edgeOf(e.Consumer, e.Producer) != e {
		return
	}
	s.producers[e.Consumer] = dropEdge(s.producers[e.Consumer], e)
	if len(s.producers[e.Consumer]) == 0 {
		delete(s.producers, e.Consumer)
	}
	s.consumers[e.Producer] = dropEdge(s.consumers[e.Producer], e)
	if len(s.consumers[e.Producer]) == 0 {
		delete(s.consumers, e.Producer)
	}
}

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

// putEdge records e as a pending write.
func (s *Scheduler) putEdge(e *converge.Edge) {
	k := edgeKey{e.Consumer, e.Producer}
	delete(s.edgeDel, k)
	s.edgePut[k] = e
	s.armFlush()
}

// delEdge records the deletion of e as a pending write.
func (s *Scheduler) delEdge(e *converge.Edge) {
	k := edgeKey{e.Consumer, e.Producer}
	delete(s.edgePut, k)
	s.edgeDel[k] = true
	s.armFlush()
}

func (s *Scheduler) markDirty(n *node) {
	n.r.UpdatedAt = s.now
	if n.has(mDirty) || n.is(stateRemoved) {
		return
	}
	n.set(mDirty)
	s.recount(n)
	if n.has(mStored) {
		s.updated = append(s.updated, n)
	} else {
		s.dirty = append(s.dirty, n)
	}
	s.armFlush()
}

// A composer's record of its work is its row's ObservedGeneration (its
// composition of that generation is applied) and its phase (Ready: so
// is every descendant). Both are written only once every child's row,
// as that work left it, is durable; nested composers hold their own
// records back the same way, so a stored record holds for the whole
// subtree whatever order the batches commit rows in. See "Crash
// safety" in docs/ARCHITECTURE.md.

// recount keeps n's owner's count of pending children exact: n counts
// while it has a change not yet durable (dirty, in a batch not yet
// committed, refused by the store for good) or holds its own record
// back. When an owner's count falls to 0 its hold ends.
func (s *Scheduler) recount(n *node) {
	o := n.owner
	if o == nil {
		return
	}
	want := !n.is(stateRemoved) && (n.has(mDirty) || n.has(mInBatch) || n.has(mUnstorable) || n.sub != nil && n.sub.held)
	if want == n.has(mPending) {
		return
	}
	n.setTo(mPending, want)
	t := o.tree()
	if want {
		t.pending++
		return
	}
	t.pending--
	if t.pending == 0 && t.held {
		s.releaseHold(o)
	}
}

// hold holds back n's record of a composition just applied (composed)
// or of its Ready, until every child's row is durable.
func (s *Scheduler) hold(n *node, composed bool) {
	t := n.tree()
	if t.pending == 0 {
		return // every child's row is durable already
	}
	t.heldComposed = t.heldComposed || composed
	if !t.held {
		t.held = true
		s.recount(n)
	}
}

// releaseHold ends n's hold: a masked row is written again, as it is.
func (s *Scheduler) releaseHold(n *node) {
	t := n.sub
	t.held, t.heldComposed = false, false
	if t.heldWritten {
		t.heldWritten = false
		s.markDirty(n)
	}
	s.recount(n)
}

// maskHeld makes r, the row of a composer whose record is held,
// say what its durable children support: not composed at its generation
// (when the hold is for a composition: the next process composes it
// again, in full) and not Ready.
func maskHeld(r *converge.Resource, composed bool) {
	if r.Deleting {
		return
	}
	if composed && r.ObservedGeneration >= r.Generation {
		r.ObservedGeneration = r.Generation - 1
	}
	if r.Phase == converge.PhaseReady {
		r.Phase = converge.PhasePending
		if r.Reason == "" {
			r.Reason = "committing its children"
		}
	}
}

func (s *Scheduler) markRollup(n *node) {
	if n.has(mRollupDirty) || n.is(stateRemoved) {
		return
	}
	n.set(mRollupDirty)
	s.rollupDirty = append(s.rollupDirty, n)
	s.armFlush()
}

func (s *Scheduler) markReason(n *node) {
	if n.has(mReasonDirty) || n.is(stateRemoved) {
		return
	}
	n.set(mReasonDirty)
	s.reasonDirty = append(s.reasonDirty, n)
	s.armFlush()
}

func (s *Scheduler) enqueue(n *node) {
	if n == nil || n.has(mQueued) || n.is(stateRemoved) {
		return
	}
	n.set(mQueued)
	s.queue = append(s.queue, n)
}

// setReason sets the reason, marking the row dirty when it changes.
func (s *Scheduler) setReason(n *node, reason string) {
	if n.r.Reason != reason {
		n.r.Reason = reason
		s.markDirty(n)
	}
}

// setReasonSoon is setReason for a progress reason ("N/M children ready",
// "waiting for teardown of …"): a big row writes it within bigRowEvery
// (markDirtySoon).
func (s *Scheduler) setReasonSoon(n *node, reason string) {
	if n.r.Reason != reason {
		n.r.Reason = reason
		s.markDirtySoon(n)
	}
}

// setPhase moves n to phase p, keeping the global and every ancestor's
// counts exact and re-evaluating ancestors' rollups.
func (s *Scheduler) setPhase(n *node, p converge.Phase) {
	old := n.r.Phase
	if old == p {
		return
	}
	n.r.Phase = p
	s.markDirty(n)
	subPhase(&s.counts, old)
	addPhase(&s.counts, p)
	subPhase(&n.rs.stats.phases, old)
	addPhase(&n.rs.stats.phases, p)
	for a := n.owner; a != nil; a = a.owner {
		subPhase(&a.tree().counts, old)
		addPhase(&a.tree().counts, p)
	}
	switch p {
	case converge.PhaseReady:
		msg := "ready at generation " + itoa(n.r.Generation)
		if n.tries > 1 {
			msg += " after " + itoa(int64(n.tries)) + " attempts"
		}
		n.tries = 0
		s.event(n.id, "Ready", msg)
	case converge.PhaseFailed:
		s.event(n.id, "Failed", n.r.Reason)
	case converge.PhaseDeleting:
		s.event(n.id, "Deleting", n.r.Reason)
	case converge.PhasePending:
		if old == converge.PhaseReady || old == converge.PhaseFailed {
			s.event(n.id, "Pending", "pending at generation "+itoa(n.r.Generation))
		}
	}
	if n.owner != nil {
		s.ownerChanged(n.owner)
	}
}

// ownerChanged re-evaluates the rollup of a (and, through setPhase, its
// ancestors) after a descendant changed.
func (s *Scheduler) ownerChanged(a *node) {
	for ; a != nil; a = a.owner {
		s.markRollup(a)
		if s.isComposer(a) && !a.r.Deleting {
			before := a.r.Phase
			s.evalComposer(a)
			if a.r.Phase != before {
				return // setPhase walked the rest of the chain
			}
		}
	}
}

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

// addCounted counts a new node (in phase r.Phase) in the totals and in
// every ancestor.
func (s *Scheduler) addCounted(n *node) {
	s.counts.Add(n.r.Phase)
	n.rs.stats.phases.Add(n.r.Phase)
	for a := n.owner; a != nil; a = a.owner {
		a.tree().counts.Add(n.r.Phase)
	}
	if n.owner != nil {
		s.ownerChanged(n.owner)
	}
}

// subCounted removes a node from the totals and its ancestors.
func (s *Scheduler) subCounted(n *node) {
	s.counts.Total--
	subPhase(&s.counts, n.r.Phase)
	n.rs.stats.phases.Total--
	subPhase(&n.rs.stats.phases, n.r.Phase)
	for a := n.owner; a != nil; a = a.owner {
		a.tree().counts.Total--
		subPhase(&a.tree().counts, n.r.Phase)
	}
}

// ---- timers ----

type timerKind uint8

const (
	timerRetry timerKind = iota
	timerLease
	timerDelivRetry
	// timerRollout: a rollout's soak ended or its wave timed out.
	timerRollout
)

type timerEntry struct {
	at   time.Time
	kind timerKind
	id   converge.ID
	key  string // task id (lease) or delivery key
	seq  uint64
}

type timerHeap []timerEntry

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

func (s *Scheduler) addTimer(at time.Time, kind timerKind, id converge.ID, key string) uint64 {
	s.timerSeq++
	if kind == timerLease {
		s.leaseTimers++
		if s.leaseTimers > 4096 && s.leaseTimers > 2*len(s.tasks) && 2*s.leaseTimers > len(s.timers) {
			s.compactTimers()
		}
	}
	heap.Push(&s.timers, timerEntry{at: at, kind: kind, id: id, key: key, seq: s.timerSeq})
	return s.timerSeq
}

// compactTimers drops the lease timers of tasks that already ended. A
// task's lease timer stays in the heap when its result comes first (it
// would fire and find no task), so at thousands of tasks a second it
// held a task ID and an entry for every task of the last lease period:
// a quarter of a million at a million resources. Compacting only when
// most of the heap is lease timers and most of those are stale keeps the
// cost amortized constant per timer.
func (s *Scheduler) compactTimers() {
	keep := s.timers[:0]
	for _, e := range s.timers {
		if e.kind == timerLease && s.tasks[e.key] == nil {
			s.leaseTimers--
			continue
		}
		keep = append(keep, e)
	}
	clear(s.timers[len(keep):])
	s.timers = keep
	heap.Init(&s.timers)
}

func (s *Scheduler) fireTimers() {
	s.fireResyncs()
	for len(s.timers) > 0 && !s.timers[0].at.After(s.now) {
		e := heap.Pop(&s.timers).(timerEntry)
		switch e.kind {
		case timerRetry:
			n := s.nodes[e.id]
			if n == nil || !n.is(stateBackoff) || n.r.NextAttempt.After(s.now) {
				continue
			}
			n.leave(stateBackoff)
			s.backoffN--
			s.enqueue(n)
		case timerLease:
			s.leaseTimers--
			s.leaseExpired(e.key)
		case timerDelivRetry:
			d := s.deliveries[e.key]
			if d == nil || d.Done || d.NextAttempt.After(s.now) {
				continue
			}
			s.delivQueue = append(s.delivQueue, d)
		case timerRollout:
			s.rolloutTimer(e.id, e.seq)
		}
	}
	if !s.flushAt.IsZero() && !s.flushAt.After(s.now) {
		s.flushAsync()
	}
}

func (s *Scheduler) scheduleResync(n *node) { s.scheduleResyncFrom(n, s.now) }

// scheduleResyncFrom schedules n's next resync one interval (plus jitter)
// after since, or after now when since is zero or later; one already
// overdue fires at once.
func (s *Scheduler) scheduleResyncFrom(n *node, since time.Time) {
	iv := s.resyncInterval(n)
	if iv <= 0 {
		return
	}
	if since.IsZero() || since.After(s.now) {
		since = s.now
	}
	// Up to 10% jitter, so a graph that became Ready together does not
	// resync in one burst. Overdue ones run now (max_inflight paces them).
	at := since.Add(iv + time.Duration(s.cfg.Rand.Int64N(int64(iv)/10+1)))
	if at.Before(s.now) {
		at = s.now
	}
	s.addResync(n, at)
}

// Resyncs wait in buckets of resyncTick rather than in the timer heap:
// every Ready resource has one, so at a million resources a heap entry
// each (80 bytes, with the heap's growth) is most of the timers' memory,
// while a bucket entry is a pointer. A resync fires up to one tick late.
const resyncTick = 10 * time.Millisecond

// resyncBuckets holds the nodes due in each bucket and a min-heap of the
// buckets' keys.
type resyncBuckets struct {
	due  map[int64][]*node
	keys bucketHeap
}

type bucketHeap []int64

func (h bucketHeap) Len() int           { return len(h) }
func (h bucketHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h bucketHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *bucketHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *bucketHeap) Pop() any {
	old := *h
	k := old[len(old)-1]
	*h = old[:len(old)-1]
	return k
}

// addResync (re)schedules n's resync at at; an earlier one is dropped.
func (s *Scheduler) addResync(n *node, at time.Time) {
	k := (at.UnixNano() + int64(resyncTick) - 1) / int64(resyncTick)
	n.resyncAt = k
	b := &s.resyncs
	if b.due == nil {
		b.due = make(map[int64][]*node)
	}
	l, ok := b.due[k]
	if !ok {
		heap.Push(&b.keys, k)
	}
	b.due[k] = append(l, n)
}

// nextResync returns when the earliest resync bucket is due, or zero.
func (s *Scheduler) nextResync() time.Time {
	if len(s.resyncs.keys) == 0 {
		return time.Time{}
	}
	return time.Unix(0, s.resyncs.keys[0]*int64(resyncTick))
}

// fireResyncs marks every node of the buckets due by now for a resync.
// An entry whose node was rescheduled (resyncAt moved) or left Ready is
// stale and skipped.
func (s *Scheduler) fireResyncs() {
	b := &s.resyncs
	now := s.now.UnixNano() / int64(resyncTick)
	for len(b.keys) > 0 && b.keys[0] <= now {
		k := heap.Pop(&b.keys).(int64)
		for _, n := range b.due[k] {
			if n.resyncAt != k || n.is(stateRemoved) || n.r.Deleting || n.r.Phase != converge.PhaseReady {
				continue
			}
			n.resyncAt = 0
			n.set(mResync)
			s.enqueue(n)
		}
		delete(b.due, k)
	}
}

// itoa is strconv.FormatInt in base 10: generations and counts in
// idempotency keys and event messages.
func itoa(v int64) string { return strconv.FormatInt(v, 10) }
