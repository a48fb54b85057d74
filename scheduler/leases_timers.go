package scheduler

import (
	"container/heap"
	"time"

	"github.com/convergehq/converge"
)

// The leases part's timers: one heap of retries, lease expiries,
// delivery retries and rollout timers, and the resync buckets.

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

func (l *leases) addTimer(at time.Time, kind timerKind, id converge.ID, key string) uint64 {
	l.timerSeq++
	if kind == timerLease {
		l.leaseTimers++
		if l.leaseTimers > 4096 && l.leaseTimers > 2*len(l.tasks) && 2*l.leaseTimers > len(l.timers) {
			l.compactTimers()
		}
	}
	heap.Push(&l.timers, timerEntry{at: at, kind: kind, id: id, key: key, seq: l.timerSeq})
	return l.timerSeq
}

// compactTimers drops the lease timers of tasks that already ended. A
// task's lease timer stays in the heap when its result comes first (it
// would fire and find no task), so at thousands of tasks a second it
// held a task ID and an entry for every task of the last lease period:
// a quarter of a million at a million resources. Compacting only when
// most of the heap is lease timers and most of those are stale keeps the
// cost amortized constant per timer.
func (l *leases) compactTimers() {
	keep := l.timers[:0]
	for _, e := range l.timers {
		if e.kind == timerLease && l.tasks[e.key] == nil {
			l.leaseTimers--
			continue
		}
		keep = append(keep, e)
	}
	clear(l.timers[len(keep):])
	l.timers = keep
	heap.Init(&l.timers)
}

func (s *Scheduler) fireTimers() {
	s.lease.fireResyncs(s.now)
	for len(s.lease.timers) > 0 && !s.lease.timers[0].at.After(s.now) {
		e := heap.Pop(&s.lease.timers).(timerEntry)
		switch e.kind {
		case timerRetry:
			n := s.graph.nodes[e.id]
			if n == nil || !n.is(stateBackoff) || n.res().NextAttempt.After(s.now) {
				continue
			}
			s.lease.endBackoff(n)
			s.lease.enqueue(n)
		case timerLease:
			s.lease.leaseTimers--
			s.leaseExpired(e.key)
		case timerDelivRetry:
			d := s.react.deliveries[e.key]
			if d == nil || d.Done || d.NextAttempt.After(s.now) {
				continue
			}
			s.react.delivQueue = append(s.react.delivQueue, d)
		case timerRollout:
			s.rolloutTimer(e.id, e.seq)
		}
	}
	if !s.batch.flushAt.IsZero() && !s.batch.flushAt.After(s.now) {
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
	s.lease.addResync(n, at)
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
func (l *leases) addResync(n *node, at time.Time) {
	k := (at.UnixNano() + int64(resyncTick) - 1) / int64(resyncTick)
	n.resyncAt = k
	b := &l.resyncs
	if b.due == nil {
		b.due = make(map[int64][]*node)
	}
	due, ok := b.due[k]
	if !ok {
		heap.Push(&b.keys, k)
	}
	b.due[k] = append(due, n)
}

// maxResyncScan bounds the bucket dropResync scans for its node.
const maxResyncScan = 512

// dropResync takes n out of the resync bucket it waits in, if that bucket
// is small enough to scan: a node torn down would otherwise stay
// referenced, its decoded row with it, until the bucket comes due (ten
// minutes after a converge, for a cascade of a million). An entry left
// is only stale, as fireResyncs expects.
func (l *leases) dropResync(n *node) {
	k := n.resyncAt
	if k == 0 {
		return
	}
	n.resyncAt = 0
	due := l.resyncs.due[k]
	if len(due) > maxResyncScan {
		return
	}
	for i, x := range due {
		if x == n {
			due[i] = due[len(due)-1]
			due[len(due)-1] = nil
			l.resyncs.due[k] = due[:len(due)-1]
			return
		}
	}
}

// nextResync returns when the earliest resync bucket is due, or zero.
func (l *leases) nextResync() time.Time {
	if len(l.resyncs.keys) == 0 {
		return time.Time{}
	}
	return time.Unix(0, l.resyncs.keys[0]*int64(resyncTick))
}

// fireResyncs marks every node of the buckets due by now for a resync.
// An entry whose node was rescheduled (resyncAt moved) or left Ready is
// stale and skipped.
func (l *leases) fireResyncs(now time.Time) {
	b := &l.resyncs
	tick := now.UnixNano() / int64(resyncTick)
	for len(b.keys) > 0 && b.keys[0] <= tick {
		k := heap.Pop(&b.keys).(int64)
		for _, n := range b.due[k] {
			if n.resyncAt != k || n.is(stateRemoved) || n.deleting() || n.phase() != converge.PhaseReady {
				continue
			}
			n.resyncAt = 0
			n.set(mResync)
			l.enqueue(n)
		}
		delete(b.due, k)
	}
}
