package scheduler

import (
	"strconv"
	"time"

	"github.com/convergehq/converge"
)

// Loading the graph from the store's snapshot at New, and what every
// part reads of the kinds and configs.

// Loading runs in three steps, so a store that hands its rows over one
// at a time (StreamLoader) is never held decoded whole: loadBegin takes
// the kinds, configs and bindings every row's load reads; loadRow adds
// one row's node, packing a row at rest at once (its owner is linked
// later, by loadEnd: the packed row says it is owned, and the owner's ID
// waits in loadOwners); loadEnd links owners, adds the edges and derives
// the rest.

// loadOwner is a loaded row whose owner is linked once every row is in.
type loadOwner struct {
	n     *node
	owner converge.ID
}

// loading is what a load keeps between its steps.
type loading struct {
	owners []loadOwner
	// overdue are the Ready rows whose resync came due while no process
	// ran.
	overdue []*node
}

// loadBegin takes snap's kinds, configs and bindings.
func (s *Scheduler) loadBegin(snap *converge.Snapshot) {
	for _, k := range snap.Kinds {
		s.kinds[k.Ref()] = k
	}
	for _, c := range snap.Configs {
		s.configs[c.Name] = c
	}
	s.rebuildDefaults()
	for _, b := range snap.Bindings {
		s.react.bindings[b.Name] = b
	}
	s.react.rebuildByKind()
}

// loadRow adds the node of one loaded row, which is the scheduler's from
// now on.
func (s *Scheduler) loadRow(r *converge.Resource) {
	n := &node{r: r, id: r.ID(), rs: s.refState(r.Ref())}
	if r.Drift != nil {
		if s.graph.drifted == nil {
			s.graph.drifted = make(map[converge.ID]*node)
		}
		s.graph.drifted[n.id] = n
	}
	// One string per row for ID and name, the refState's for the kind,
	// the owner's ID for the owner (loadEnd): a million rows do not each
	// keep decoded copies.
	r.Kind = n.rs.ref.Kind
	r.Name = string(n.id)[len(r.Kind)+1:]
	s.graph.insert(n)
	s.graph.noteGitRoot(n)
	n.rs.count++
	if r.Owner != "" {
		s.loading.owners = append(s.loading.owners, loadOwner{n, r.Owner})
	}
	if loadPackable(n) {
		s.loadResync(n, r)
		n.packNow()
	}
}

// loadPackable reports whether a row just loaded is packed at once: at
// rest (no mark is set, no owner linked yet), and for a teardown, not
// backing off (loadEnd reads its next attempt). A cascade resumed after
// a kill loads up to a million waiting teardowns: kept decoded until
// loadEnd, they put the live heap at 923 MB for a restart whose peak is
// otherwise the converged graph's.
func loadPackable(n *node) bool {
	return atRest(n) && (!n.r.Deleting || n.r.NextAttempt.IsZero())
}

// loadResync schedules the resync of a loaded row Ready at its
// generation: one interval after the row last changed (a restart does
// not postpone it); one that came due while no process ran is overdue.
func (s *Scheduler) loadResync(n *node, r *converge.Resource) {
	if r.Phase != converge.PhaseReady || r.ObservedGeneration != r.Generation {
		return
	}
	if iv := s.resyncInterval(n); iv > 0 && !r.UpdatedAt.IsZero() && !r.UpdatedAt.Add(iv).After(s.now) {
		if s.cfg.PostponeLoadedResyncs {
			s.scheduleResync(n)
		} else {
			s.loading.overdue = append(s.loading.overdue, n)
		}
	} else {
		s.scheduleResyncFrom(n, r.UpdatedAt)
	}
}

// loadEnd links every loaded row to its owner, adds snap's edges and
// derives the rest: counts, flows, backoffs, resyncs, composer phases,
// deliveries and what the loop looks at first.
func (s *Scheduler) loadEnd(snap *converge.Snapshot) {
	// Kinds and configs are loaded: secretInfo computes again.
	defer func() { s.secrets = nil }()
	for _, l := range s.loading.owners {
		n := l.n
		o := s.graph.nodes[l.owner]
		if o == nil {
			if n.r == nil {
				n.unpackOrphan(l.owner) // rare: its owner's row is gone
			}
			continue
		}
		if n.r != nil {
			n.r.Owner = o.id
		}
		n.owner = o
		o.adopt(n)
		// A child torn down under a live owner may have been deleted by
		// an operator: which, the store does not say, so the owner
		// recomposes after the teardown (for a pruned child, one
		// compose more than needed).
		n.setTo(mRecomposeOwner, n.deleting() && !o.deleting())
	}
	s.loading.owners = nil
	for i := range snap.Edges {
		e := &snap.Edges[i]
		if c := s.graph.nodes[e.Consumer]; c != nil {
			e.Consumer = c.id
		}
		if p := s.graph.nodes[e.Producer]; p != nil {
			e.Producer = p.id
		}
		e.Flows = s.graph.internFlows(e.Flows)
		s.graph.addEdge(e)
	}
	for _, n := range s.graph.nodes {
		// A row packed by loadRow is at rest: none of the first and
		// last steps apply to it, and its resync is scheduled.
		r := n.r
		if r != nil {
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
		}
		s.graph.counted(n)
		n.setTo(mFlowsDirty, len(n.adj.prod()) > 0)
		n.setTo(mFlowsLoaded, n.has(mFlowsDirty))
		if r != nil {
			if r.Phase == converge.PhaseFailed && !r.NextAttempt.IsZero() {
				s.lease.backOff(n, r.NextAttempt)
			}
			if r.Phase == converge.PhaseDeleting && !r.NextAttempt.IsZero() {
				s.lease.backOff(n, r.NextAttempt)
			}
			s.loadResync(n, r)
		}
	}
	s.graph.checkLoadedFlows()
	// Overdue resyncs run soon, spread over a millisecond per row (at
	// most one interval): a million rows due at once would take every
	// worker slot for minutes, ahead of the work the restart came for.
	overdue := s.loading.overdue
	s.loading.overdue = nil
	window := time.Duration(len(overdue)) * time.Millisecond
	for _, n := range overdue {
		w := min(window, s.resyncInterval(n))
		s.lease.addResync(n, s.now.Add(time.Duration(s.cfg.Rand.Int64N(int64(w)+1))))
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
	for _, n := range s.graph.nodes {
		if s.isComposer(n) {
			if r := n.res(); !r.Deleting && r.ObservedGeneration == r.Generation {
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
	for _, n := range s.graph.nodes {
		if !settled(n) {
			s.startQueue = append(s.startQueue, n)
		}
	}
	s.batch.dirty, s.batch.updated = s.batch.dirty[:0], s.batch.updated[:0]
	for _, n := range s.graph.nodes {
		n.set(mStored)
		if n.has(mDirty) {
			s.batch.updated = append(s.batch.updated, n)
		}
		n.pack()
	}
}

// isComposer reports whether n's kind declares compose.
func (s *Scheduler) isComposer(n *node) bool { return n.rs.composer }

// refState returns the dispatch state of ref, creating it.
func (s *Scheduler) refState(ref converge.KindRef) *refState {
	rs := s.lease.refs[ref]
	if rs == nil {
		rs = &refState{ref: ref}
		s.lease.refs[ref] = rs
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
	for _, rs := range s.lease.refs {
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

func (s *Scheduler) rebuildDefaults() {
	clear(s.defaults)
	for _, c := range s.configs {
		if c.IsDefault {
			s.defaults[c.Ref()] = c
		}
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
