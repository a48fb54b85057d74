package scheduler

import (
	"fmt"
	"sort"
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
	b := s.failed
	if b == nil {
		b = s.buildBatch()
	}
	s.flushAt = timeZero
	if b == nil {
		return nil
	}
	if err := s.store.Commit(b); err != nil {
		s.failed = b
		s.retryLater()
		return fmt.Errorf("commit state: %w", err)
	}
	s.failed = nil
	if s.hasPending() {
		// Rollup or reason refreshes queued by building the batch.
		return s.flush()
	}
	return nil
}

// flushAsync hands everything pending to the committer, unless a commit
// is in flight (the next one starts when it ends).
func (s *Scheduler) flushAsync() {
	if s.commitReq == nil {
		if err := s.flush(); err != nil {
			s.log.Error("flush", "err", err)
		}
		return
	}
	if s.committing {
		return
	}
	b := s.failed
	if b == nil {
		b = s.buildBatch()
	}
	s.flushAt = timeZero
	if b == nil {
		return
	}
	s.failed = b // until the committer says it is durable
	s.committing = true
	s.commitReq <- b
}

// commitEnded handles the committer's answer for the batch in flight.
func (s *Scheduler) commitEnded(err error) {
	s.committing = false
	if err != nil {
		s.log.Error("flush", "err", err)
		s.retryLater()
		return
	}
	s.failed = nil
	if s.hasPending() && !s.flushAt.After(s.now) {
		s.flushAsync()
	}
}

// waitCommit waits for the commit in flight, if any.
func (s *Scheduler) waitCommit() error {
	if !s.committing {
		return nil
	}
	err := <-s.commitRes
	s.committing = false
	if err != nil {
		s.retryLater()
		return fmt.Errorf("commit state: %w", err)
	}
	s.failed = nil
	return nil
}

func (s *Scheduler) retryLater() {
	s.flushAt = s.now.Add(max(s.cfg.FlushInterval, 100*time.Millisecond))
}

func (s *Scheduler) hasPending() bool {
	return len(s.dirty) > 0 || len(s.rollupDirty) > 0 || len(s.reasonDirty) > 0 || len(s.delRes) > 0 ||
		len(s.edgePut) > 0 || len(s.edgeDel) > 0 || len(s.delivDirty) > 0 || len(s.events) > 0 ||
		!s.meta.Empty()
}

// buildBatch turns everything pending into one Batch of snapshots and
// clears the pending sets; it returns nil if nothing is pending.
func (s *Scheduler) buildBatch() *converge.Batch {
	for _, n := range s.rollupDirty {
		n.rollupDirty = false
		if !n.removed {
			s.writeRollup(n)
		}
	}
	s.rollupDirty = s.rollupDirty[:0]
	for _, n := range s.reasonDirty {
		n.reasonDirty = false
		if !n.removed && n.r.Deleting && n.r.Lease == nil && !n.stuck && !n.inBackoff &&
			(len(n.children) > 0 || s.hasLiveConsumer(n)) {
			s.setReason(n, s.teardownReason(n))
		}
	}
	s.reasonDirty = s.reasonDirty[:0]

	b := s.meta
	s.meta = converge.Batch{}
	// Two buffer sets take turns: the one not in this batch belonged to
	// the previous batch, which is durable (or this would not run) and no
	// longer referenced by the store.
	s.spare = 1 - s.spare
	buf := &s.bufs[s.spare]
	if len(s.dirty) > 0 {
		rows := buf.rows[:0]
		if cap(rows) < len(s.dirty) {
			rows = make([]converge.Resource, 0, len(s.dirty)+len(s.dirty)/2)
		}
		ptrs := buf.ptrs[:0]
		for _, n := range s.dirty {
			n.dirty = false
			if !n.removed {
				rows = append(rows, *n.r)
				ptrs = append(ptrs, &rows[len(rows)-1])
			}
		}
		buf.rows, buf.ptrs = rows, ptrs
		b.Resources = ptrs
		s.dirty = s.dirty[:0]
	}
	if len(s.delRes) > 0 {
		b.DeletedResources = make([]converge.ID, 0, len(s.delRes))
		for id := range s.delRes {
			b.DeletedResources = append(b.DeletedResources, id)
		}
		sort.Slice(b.DeletedResources, func(i, j int) bool { return b.DeletedResources[i] < b.DeletedResources[j] })
		clear(s.delRes)
	}
	for _, e := range s.edgePut {
		b.Edges = append(b.Edges, *e)
	}
	clear(s.edgePut)
	for k := range s.edgeDel {
		b.DeletedEdges = append(b.DeletedEdges, converge.Edge{Consumer: k.consumer, Producer: k.producer})
	}
	clear(s.edgeDel)
	b.Events = s.events
	s.events, buf.events = buf.events[:0], s.events
	for _, d := range s.delivDirty {
		c := *d
		b.Deliveries = append(b.Deliveries, &c)
	}
	clear(s.delivDirty)
	if b.Empty() {
		return nil
	}
	return &b
}
