package scheduler

import "github.com/convergehq/converge"

// The joins of the graph and the batcher: a node's phase, reason and
// dirty marks change here, keeping the counts, the owners' holds and
// the pending writes exact.

// A composer's record of its work is its row's ObservedGeneration (its
// composition of that generation is applied) and its phase (Ready: so
// is every descendant). Both are written only once every child's row,
// as that work left it, is durable; nested composers hold their own
// records back the same way, so a stored record holds for the whole
// subtree whatever order the batches commit rows in. See "Crash
// safety" in docs/ARCHITECTURE.md.

func (s *Scheduler) markDirty(n *node) {
	n.res().UpdatedAt = s.now
	if n.has(mDirty) || n.is(stateRemoved) {
		return
	}
	n.set(mDirty)
	s.recount(n)
	s.batch.queueRow(n, s.now)
}

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

// setReason sets the reason, marking the row dirty when it changes.
func (s *Scheduler) setReason(n *node, reason string) {
	if n.res().Reason != reason {
		n.res().Reason = reason
		s.markDirty(n)
	}
}

// setReasonSoon is setReason for a progress reason ("N/M children ready",
// "waiting for teardown of …"): a big row writes it within bigRowEvery
// (markDirtySoon).
func (s *Scheduler) setReasonSoon(n *node, reason string) {
	if n.res().Reason != reason {
		n.res().Reason = reason
		s.markDirtySoon(n)
	}
}

// setPhase moves n to phase p, keeping the global and every ancestor's
// counts exact and re-evaluating ancestors' rollups.
func (s *Scheduler) setPhase(n *node, p converge.Phase) {
	old := n.res().Phase
	if old == p {
		return
	}
	n.res().Phase = p
	s.markDirty(n)
	s.graph.recounted(n, old)
	switch p {
	case converge.PhaseReady:
		msg := "ready at generation " + itoa(n.res().Generation)
		if n.tries > 1 {
			msg += " after " + itoa(int64(n.tries)) + " attempts"
		}
		n.tries = 0
		s.event(n.id, "Ready", msg)
	case converge.PhaseFailed:
		s.event(n.id, "Failed", n.res().Reason)
	case converge.PhaseDeleting:
		s.event(n.id, "Deleting", n.res().Reason)
	case converge.PhasePending:
		if old == converge.PhaseReady || old == converge.PhaseFailed {
			s.event(n.id, "Pending", "pending at generation "+itoa(n.res().Generation))
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
		s.batch.markRollup(a, s.now)
		if s.isComposer(a) && !a.deleting() {
			before := a.res().Phase
			s.evalComposer(a)
			if a.res().Phase != before {
				return // setPhase walked the rest of the chain
			}
		}
	}
}

// addCounted counts a new node (in phase r.Phase) in the totals and in
// every ancestor.
func (s *Scheduler) addCounted(n *node) {
	s.graph.counted(n)
	if n.owner != nil {
		s.ownerChanged(n.owner)
	}
}
