package scheduler

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/convergehq/converge"
)

// Group commit. Pending changes become one Batch of snapshots (shallow
// copies: the scheduler never mutates JSON bytes or a Lease in place, it
// replaces them), so the Batch can be committed while the loop goes on
// changing the live rows. While Run runs, a committer goroutine commits
// one batch at a time (flushAsync); Flush, Apply, Delete and Run's exit
// commit synchronously (flush) after the one in flight. A batch that
// fails is kept and committed again, before anything newer.

// flush commits everything pending now and waits for it.
func (s *Scheduler) flush() error {
	if err := s.waitCommit(); err != nil {
		return err
	}
	b := s.batch.failed
	if b == nil {
		b = s.buildBatch(true)
	}
	s.batch.flushAt = timeZero
	s.batch.armDeferred()
	if b == nil {
		return nil
	}
	for round := 0; ; round++ {
		s.commitSent(b)
		err := s.store.Commit(s.commitCtx, b)
		if err == nil {
			break
		}
		if round < maxRefuseRounds && s.refuse(b, err) {
			continue
		}
		s.commitFailed(b, err)
		return fmt.Errorf("commit state: %w", err)
	}
	s.committed()
	if s.batch.hasPending() {
		// Rollup or reason refreshes queued by building the batch.
		return s.flush()
	}
	return nil
}

// flushAsync hands everything pending to the committer, unless a commit
// is in flight (the next one starts when it ends).
func (s *Scheduler) flushAsync() {
	if s.batch.commitReq == nil {
		if err := s.flush(); err != nil {
			s.log.Error("flush", "err", err)
		}
		return
	}
	if s.batch.committing {
		return
	}
	b := s.batch.failed
	if b == nil {
		b = s.buildBatch(false)
	}
	s.batch.flushAt = timeZero
	s.batch.armDeferred()
	if b == nil {
		return
	}
	s.batch.failed = b // until the committer says it is durable
	s.batch.committing = true
	s.commitSent(b)
	s.batch.commitReq <- b
}

// commitEnded handles the committer's answer for the batch in flight.
func (s *Scheduler) commitEnded(err error) {
	s.batch.committing = false
	if err != nil {
		if s.refuse(s.batch.failed, err) {
			// Commit the rest now: one bad row never holds the others.
			s.flushAsync()
			return
		}
		s.commitFailed(s.batch.failed, err)
		return
	}
	s.committed()
	if s.batch.hasPending() && !s.batch.flushAt.After(s.now) {
		s.flushAsync()
	}
}

// batchDropped records that the batch in flight is no longer: its rows
// are durable (committed), or it was dropped whole (its rows are dirty
// again). Their owners' counts of pending children follow.
func (s *Scheduler) batchDropped() {
	ns := s.batch.batchNodes
	s.batch.batchNodes = nil
	for _, n := range ns {
		n.unset(mInBatch)
		s.recount(n)
		n.pack()
	}
	clear(ns)
	if s.batch.batchNodes == nil {
		s.batch.batchNodes = ns[:0]
	}
}

// commitRows is the most rows, and the most deletions, the next batch
// takes: Config.MaxCommit, or what the store asks when that is fewer
// (CommitSizer).
func (s *Scheduler) commitRows() int {
	if cs, ok := s.store.(CommitSizer); ok {
		if n := cs.CommitRows(); n > 0 && n < s.cfg.MaxCommit {
			return n
		}
	}
	return s.cfg.MaxCommit
}

// liveHead drops the removed nodes from q until limit live ones lead it
// (or q ends): a removed row is never written, and a cascade's million
// rows rewritten as Deleting are mostly removed before their turn. Held
// in q they neither counted in a batch's rows nor let their decoded rows
// go (a million of them at the end of a 1M cascade).
func liveHead(q []*node, limit int) []*node {
	w, r := 0, 0
	for ; r < len(q) && w < limit; r++ {
		n := q[r]
		if n.is(stateRemoved) {
			n.unset(mDirty)
			continue
		}
		q[w] = n
		w++
	}
	if w == r {
		return q
	}
	rest := w + copy(q[w:], q[r:])
	clear(q[rest:])
	return q[:rest]
}

// dropRemoved drops the removed nodes from the queues of rows to write
// once they are half of them: each holds a node, its ID and its packed
// row, and at 1M a cascade's teardowns ran ~500,000 ahead of the writes
// (~120 MB of heap) that liveHead, which clears only the head, kept.
func (b *batcher) dropRemoved() {
	if b.goneQueued < 1024 || b.goneQueued < (len(b.dirty)+len(b.updated))/2 {
		return
	}
	b.goneQueued = 0
	for _, q := range []*[]*node{&b.dirty, &b.updated} {
		*q = slices.DeleteFunc(*q, func(n *node) bool {
			if n.is(stateRemoved) {
				n.unset(mDirty)
				return true
			}
			return false
		})
	}
}

// dropHead removes q's first n entries: it clears them and returns the
// rest, whose array the next appends reuse or replace. (Copying the
// rest to the front cost a whole queue's length a batch: a cascade of a
// million queues a million rows.)
func dropHead(q []*node, n int) []*node {
	if n == len(q) {
		clear(q)
		return q[:0]
	}
	clear(q[:n])
	return q[n:]
}

// bigMap is the size past which a pending-write map is replaced rather
// than cleared once drained.
const bigMap = 8192

// maxRefuseRounds bounds how often one synchronous flush takes refused
// rows out and commits again (a refused owner can make its new children
// refused in the next round).
const maxRefuseRounds = 8

// committed records that the batch in flight is durable.
func (s *Scheduler) committed() {
	s.commitDone()
	s.batch.failed = nil
	s.batchDropped()
	s.react.outboxStored()
	if s.batch.commitErr != "" {
		s.log.Info("commit state: recovered", "after", s.batch.commitErr)
		s.batch.commitErr = ""
	}
}

// commitFailed keeps b to be committed again, before anything newer, and
// makes the failure visible (Progress.CommitError, the log).
func (s *Scheduler) commitFailed(b *converge.Batch, err error) {
	if b.Empty() {
		b = nil
		s.batchDropped()
	}
	s.batch.failed = b
	if msg := err.Error(); msg != s.batch.commitErr {
		s.log.Error("commit state", "err", err)
		s.batch.commitErr = msg
	}
	s.batch.retryLater(s.now)
}

// refuse takes the resources the store refused (err wraps a
// converge.RejectedError) out of b, with the edges they consume; it
// reports whether it took any. Each refused resource fails permanently
// with the store's reason and is written again without the data that was
// refused (invalid JSON is dropped); one refused a second time is kept
// out of every batch and stays Failed in memory, visibly.
func (s *Scheduler) refuse(b *converge.Batch, err error) bool {
	var rej *converge.RejectedError
	if b == nil || !errors.As(err, &rej) || len(rej.Rows) == 0 {
		return false
	}
	bad := make(map[converge.ID]error, len(rej.Rows))
	for _, row := range rej.Rows {
		bad[row.ID] = row.Err
	}
	took := false
	keep := b.Resources[:0]
	for _, r := range b.Resources {
		if bad[r.ID()] == nil {
			keep = append(keep, r)
		} else {
			took = true
		}
	}
	clear(b.Resources[len(keep):])
	b.Resources = keep
	edges := b.Edges[:0]
	for _, e := range b.Edges {
		if bad[e.Consumer] == nil {
			edges = append(edges, e)
			continue
		}
		took = true
		// Newer pending changes of the same edge win.
		k := edgeKey{e.Consumer, e.Producer}
		if s.batch.edgePut[k] == nil && !s.batch.edgeDel[k] {
			e := e
			s.batch.edgePut[k] = &e
		}
	}
	b.Edges = edges
	for id, rerr := range bad {
		n := s.graph.nodes[id]
		if n == nil || n.is(stateRemoved) {
			continue
		}
		n.refusals++
		if n.refusals == 1 {
			s.batch.refused++
		}
		msg := "store refused the resource: " + rerr.Error()
		s.log.Error("commit state: resource refused", "resource", id, "err", rerr)
		s.event(id, "StoreRefused", msg)
		r := n.res()
		for _, m := range []*json.RawMessage{&r.Declared, &r.Spec, &r.Status} {
			if *m != nil && !json.Valid(*m) {
				*m = nil
			}
		}
		if n.refusals > 1 {
			n.set(mUnstorable)
			s.recount(n) // its owner's record waits for ever
		}
		if !r.Deleting && !permanent(r) {
			if r.Lease != nil {
				// Its task's answer would make it Ready again over
				// the refusal: it is not awaited.
				s.dropTask(r.Lease.TaskID)
				r.Lease = nil
			}
			s.failPermanent(n, msg)
		}
		s.markDirty(n)
	}
	s.batch.armFlush(s.now)
	return took
}

// waitCommit waits for the commit in flight, if any.
func (s *Scheduler) waitCommit() error {
	if !s.batch.committing {
		return nil
	}
	err := <-s.batch.commitRes
	s.batch.committing = false
	if err != nil {
		if s.refuse(s.batch.failed, err) {
			return nil // flush commits the rest
		}
		s.commitFailed(s.batch.failed, err)
		return fmt.Errorf("commit state: %w", err)
	}
	s.committed()
	return nil
}

// bigRow is the size of Declared and Spec together past which a row's
// changes of rollup or reason alone are written at most every
// bigRowEvery (markDirtySoon): a root whose spec is a 333,000-team BOM is
// a 30 MB row, and writing it in every batch wrote gigabytes.
const bigRow = 1 << 20

// bigIndex returns the index of the first big row among ns (its declared
// spec and spec over bigRow together), or -1.
func bigIndex(ns []*node) int {
	for i, n := range ns {
		if n.specSize() >= bigRow {
			return i
		}
	}
	return -1
}

// bigRowEvery is how often a big row's rollup and reason are written.
const bigRowEvery = 5 * time.Second

// markDirtySoon is markDirty for a change of n's rollup or reason: a big
// row not dirty already waits up to bigRowEvery (every synchronous flush
// writes it), so the store's copy of its rollup and reason may lag by
// that much; phase, generation and lease changes are written at once.
func (s *Scheduler) markDirtySoon(n *node) {
	if n.has(mDirty) || n.is(stateRemoved) || n.specSize() < bigRow {
		s.markDirty(n)
		return
	}
	s.batch.deferRow(n, s.now)
}

// buildBatch turns everything pending into one Batch of snapshots and
// clears the pending sets; it returns nil if nothing is pending. Deferred
// big rows (markDirtySoon) go in once due, or whenever all is set (a
// synchronous flush).
func (s *Scheduler) buildBatch(all bool) *converge.Batch {
	for _, n := range s.batch.rollupDirty {
		n.unset(mRollupDirty)
		if !n.is(stateRemoved) {
			s.writeRollup(n)
		}
	}
	s.batch.rollupDirty = s.batch.rollupDirty[:0]
	for _, n := range s.batch.reasonDirty {
		n.unset(mReasonDirty)
		if !n.is(stateRemoved) && n.deleting() && (n.r == nil || n.r.Lease == nil) && !n.has(mStuck) && !n.is(stateBackoff) &&
			(len(n.kids()) > 0 || s.graph.hasLiveConsumer(n)) {
			s.setReasonSoon(n, s.graph.teardownReason(n, s.now))
		}
		// A teardown waiting for its consumers and children waits
		// packed (its reason, if new, is read from the packed row):
		// in a cascade of a million, most wait so.
		n.pack()
	}
	s.batch.reasonDirty = s.batch.reasonDirty[:0]
	if len(s.batch.deferred) > 0 && (all || !s.now.Before(s.batch.deferDue)) {
		for _, n := range s.batch.deferred {
			n.unset(mDeferred)
			s.markDirty(n)
		}
		clear(s.batch.deferred)
		s.batch.deferred, s.batch.deferDue = s.batch.deferred[:0], timeZero
	}

	b := s.batch.meta
	s.batch.meta = converge.Batch{}
	// Two buffer sets take turns: the one not in this batch belonged to
	// the previous batch, which is durable (or this would not run) and no
	// longer referenced by the store.
	s.batch.spare = 1 - s.batch.spare
	buf := &s.batch.bufs[s.batch.spare]
	limit := s.commitRows()
	if len(s.batch.dirty)+len(s.batch.updated) > 0 {
		// At most MaxCommit rows (fewer if the store asks): a commit
		// stays short (bounded work lost to a crash, a bounded bbolt
		// transaction, bounded pages mapped) however much a
		// composition just created. Changes of rows already in the
		// store go first, so progress (a resource turning Ready) is
		// durable within a batch or two instead of waiting behind a
		// million rows a composition created; new rows fill the rest,
		// at least a quarter of the batch, oldest first (a row is made
		// after its owner's, so an owner is never left behind its
		// children). What does not fit waits for the next batch.
		s.batch.dropRemoved()
		s.batch.updated = liveHead(s.batch.updated, limit)
		s.batch.dirty = liveHead(s.batch.dirty, limit)
		upd, fresh := s.batch.pickRows(limit)
		rows := buf.rows[:0]
		if n := len(upd) + len(fresh); cap(rows) < n {
			rows = make([]converge.Resource, 0, n+n/2)
		}
		ptrs := buf.ptrs[:0]
		for _, take := range [][]*node{upd, fresh} {
			for _, n := range take {
				n.unset(mDirty)
				first := !n.has(mStored)
				n.set(mStored)
				if !n.is(stateRemoved) && !n.has(mUnstorable) {
					rows = append(rows, converge.Resource{})
					n.readInto(&rows[len(rows)-1]) // a packed row stays packed
					ptrs = append(ptrs, &rows[len(rows)-1])
					// Counted in its owner's pending until committed
					// (committed, batchDropped): its owner's count
					// does not change here.
					n.set(mInBatch)
					s.batch.batchNodes = append(s.batch.batchNodes, n)
					if t := n.sub; t != nil {
						t.heldWritten = t.held
						if t.held {
							maskHeld(&rows[len(rows)-1], t.heldComposed)
						}
					}
					if first {
						// A row stored for the first time carries its
						// edges (composeResult keeps them out of
						// edgePut): the store gets a consumer and its
						// edges in one commit.
						for _, e := range n.adj.prod() {
							b.Edges = append(b.Edges, *e)
							if len(s.batch.edgePut) > 0 {
								delete(s.batch.edgePut, edgeKey{e.Consumer, e.Producer})
							}
						}
					}
				}
			}
		}
		buf.rows, buf.ptrs = rows, ptrs
		b.Resources = ptrs
		s.batch.updated = dropHead(s.batch.updated, len(upd))
		s.batch.dirty = dropHead(s.batch.dirty, len(fresh))
	}
	if len(s.batch.delRes) > 0 {
		b.DeletedResources = s.batch.takeDeleted(limit)
	}
	bigDel := len(s.batch.edgeDel) > bigMap
	s.batch.edgePutPeak = max(s.batch.edgePutPeak, len(s.batch.edgePut))
	for k, e := range s.batch.edgePut {
		if c := s.graph.nodes[e.Consumer]; c != nil && c.has(mUnstorable) {
			delete(s.batch.edgePut, k) // its consumer is never stored
			continue
		} else if c != nil && c.has(mDirty) {
			// Its consumer's row is not in this batch (it may not be
			// stored yet): the edge goes with it.
			continue
		}
		b.Edges = append(b.Edges, *e)
		delete(s.batch.edgePut, k)
	}
	b.DeletedEdges = s.batch.takeEdgeDeletions(b.DeletedResources, b.DeletedEdges)
	// A Go map keeps its buckets when emptied: one that held a whole
	// composition's edges is replaced, not kept at that size for ever.
	if s.batch.edgePutPeak > bigMap && len(s.batch.edgePut) == 0 {
		s.batch.edgePut = make(map[edgeKey]*converge.Edge)
		s.batch.edgePutPeak = 0
	}
	if bigDel && len(s.batch.edgeDel) == 0 {
		s.batch.edgeDel = make(map[edgeKey]bool)
	}
	// Events too: at most MaxCommit a batch, oldest first (they are
	// numbered already); a burst's buffer is not kept at its size.
	b.Events = s.batch.takeEvents(s.cfg.MaxCommit, buf)
	b.DeletedDeliveries = s.batch.goneDeliveries()
	for _, d := range s.batch.delivDirty {
		c := *d
		b.Deliveries = append(b.Deliveries, &c)
	}
	clear(s.batch.delivDirty)
	// The deliveries fired so far are in this batch: they are
	// dispatched once it is durable (committed).
	s.react.outboxSent()
	if b.Empty() {
		return nil
	}
	return &b
}
