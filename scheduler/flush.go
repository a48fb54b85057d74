package scheduler

import (
	"fmt"
	"sort"
	"time"

	"github.com/convergehq/converge"
)

// flush writes every pending change as one Batch. On error everything
// stays pending and the next flush retries it.
func (s *Scheduler) flush() error {
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
	for _, n := range s.dirty {
		if !n.removed {
			b.Resources = append(b.Resources, n.r)
		}
	}
	if len(s.delRes) > 0 {
		b.DeletedResources = make([]converge.ID, 0, len(s.delRes))
		for id := range s.delRes {
			b.DeletedResources = append(b.DeletedResources, id)
		}
		sort.Slice(b.DeletedResources, func(i, j int) bool { return b.DeletedResources[i] < b.DeletedResources[j] })
	}
	for _, e := range s.edgePut {
		b.Edges = append(b.Edges, *e)
	}
	for k := range s.edgeDel {
		b.DeletedEdges = append(b.DeletedEdges, converge.Edge{Consumer: k.consumer, Producer: k.producer})
	}
	b.Events = s.events
	for _, d := range s.delivDirty {
		b.Deliveries = append(b.Deliveries, d)
	}
	s.flushAt = timeZero
	if b.Empty() {
		s.dirty = s.dirty[:0]
		return nil
	}
	if err := s.store.Commit(&b); err != nil {
		// Everything stays pending; retry later, not in a hot loop.
		s.flushAt = s.now.Add(max(s.cfg.FlushInterval, 100*time.Millisecond))
		return fmt.Errorf("commit state: %w", err)
	}
	for _, n := range s.dirty {
		n.dirty = false
	}
	s.dirty = s.dirty[:0]
	clear(s.delRes)
	clear(s.edgePut)
	clear(s.edgeDel)
	clear(s.delivDirty)
	s.events = nil
	s.meta = converge.Batch{}
	return nil
}
