package scheduler

import "strconv"

// A node's derived state is two things: where it is in its lifecycle (one
// nodeState, a value at a time) and a set of independent marks
// (nodeMarks), each a pending job or a fact about its row that any state
// can carry.
//
// The lifecycle, apart from the row's phase and lease:
//
//	            park (no worker serves it)
//	         ┌──────────────▶ parked ───┐ onChanged, markDeleting
//	         │  block (no slot)         │
//	  free ──┼──────────────▶ blocked ──┤ pump (its ref has room)
//	    │    │  failTransient           │
//	    │    └──────────────▶ backoff ──┘ retry timer, new generation,
//	    │                                 failPermanent, teardown
//	    └── remove ─────────▶ removed (final)
//
// A node enters a waiting state or removed only from free and leaves a
// waiting state only to free: parked, blocked, backoff and removed never
// hold together (nothing dispatches a node that waits, and only a
// dispatch or a task's failure makes it wait). to is the one place a
// state changes; with checkTransitions on (every test of this package,
// or a build with the schedcheck tag) an illegal change panics.
//
// A stuck teardown (mStuck) is a mark, not a state: the store can refuse
// the row of a node that is parked or blocked, or whose teardown is
// still running and then fails transiently (backoff), and each of those
// keeps its wait.

// nodeState is a node's lifecycle state.
type nodeState uint8

const (
	// stateFree: nothing holds the node back; consider decides.
	stateFree nodeState = iota
	// stateParked: no connected worker serves its reaction; it is in
	// leases.parked until the workers change.
	stateParked
	// stateBlocked: its KindRef has no free slot; it is in its
	// refState's waiting list until pump gives it one.
	stateBlocked
	// stateBackoff: a transient failure's retry timer is armed (counted
	// in leases.backoffN).
	stateBackoff
	// stateRemoved: its row is deleted; a pointer left in a list or
	// timer is skipped.
	stateRemoved
)

var stateNames = [...]string{"free", "parked", "blocked", "backoff", "removed"}

func (s nodeState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "nodeState(" + strconv.Itoa(int(s)) + ")"
}

// checkTransitions makes to panic on an illegal transition. The
// package's tests turn it on (export_test.go), and so does the schedcheck
// build tag (nodestate_check.go).
var checkTransitions bool

// legalTransition reports whether a node may go from one state to another.
func legalTransition(from, to nodeState) bool {
	switch {
	case from == stateRemoved:
		return false // final
	case to == stateFree:
		return from != stateFree
	default:
		return from == stateFree
	}
}

// is reports whether n is in state st.
func (n *node) is(st nodeState) bool { return n.state == st }

// to moves n to state st.
func (n *node) to(st nodeState) {
	if checkTransitions && !legalTransition(n.state, st) {
		panic("scheduler: node " + string(n.id) + ": illegal transition " + n.state.String() + " -> " + st.String())
	}
	n.state = st
}

// leave frees n if it is in state st.
func (n *node) leave(st nodeState) {
	if n.state == st {
		n.to(stateFree)
	}
}

// nodeMarks are a node's independent flags: each may be set in any state.
type nodeMarks uint32

const (
	// mQueued: n is in the ready queue (leases.queue).
	mQueued nodeMarks = 1 << iota
	// mDirty: n's row waits in the batcher's dirty or updated list.
	mDirty
	// mRollupDirty: n's rollup waits in the batcher's rollupDirty list.
	mRollupDirty
	// mReasonDirty: n's teardown reason waits in reasonDirty.
	mReasonDirty
	// mFlowsDirty: n's spec is recomputed from its flows when it is next
	// considered.
	mFlowsDirty
	// mFlowsLoaded: mFlowsDirty only because the row was just loaded; its
	// flows are checked, not recomputed (flowsApplied).
	mFlowsLoaded
	// mResync: a resync of n is due.
	mResync
	// mStuck: n's teardown failed permanently.
	mStuck
	// mUnstorable: the store refused the row again after its refused
	// data was dropped, so it is kept out of every batch.
	mUnstorable
	// mDeferred: a change of this big row's rollup or reason waits in
	// the batcher's deferred list (markDirtySoon).
	mDeferred
	// mStored: the row has been handed to the store (loaded from it, or
	// in a batch): a change of it is an update, committed ahead of new
	// rows.
	mStored
	// mRecomposeOwner: the owner still wants this child (it emitted it
	// again while it was being torn down, or an operator deleted it); the
	// owner recomposes once the row is gone (recomposeIfOwed).
	mRecomposeOwner
	// mRecomposeOwed: a child this composer still wants was removed; it
	// recomposes once no descendant is being torn down.
	mRecomposeOwed
	// mInBatch: the row is in the batch being committed (or kept to be
	// committed again), not yet durable.
	mInBatch
	// mPending: n is counted in its owner's subtree.pending (recount).
	mPending
)

// has reports whether every mark of m is set on n.
func (n *node) has(m nodeMarks) bool { return n.marks&m == m }

// set sets the marks m on n.
func (n *node) set(m nodeMarks) { n.marks |= m }

// unset clears the marks m on n.
func (n *node) unset(m nodeMarks) { n.marks &^= m }

// setTo sets or clears the marks m on n.
func (n *node) setTo(m nodeMarks, on bool) {
	if on {
		n.set(m)
	} else {
		n.unset(m)
	}
}
