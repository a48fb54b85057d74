package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
)

// The leases part on its own: queues, waits, timers and resync buckets.

func newTestLeases() *leases {
	return &leases{
		refs:     map[converge.KindRef]*refState{},
		serves:   map[servesKey]bool{},
		tasks:    map[string]*taskRec{},
		taskPref: "t-",
	}
}

func leaseNode(id converge.ID) *node {
	return &node{id: id, r: &converge.Resource{Phase: converge.PhaseReady}}
}

func TestLeasesQueue(t *testing.T) {
	l := newTestLeases()
	a, b, gone := leaseNode("vpc/a"), leaseNode("vpc/b"), leaseNode("vpc/gone")
	gone.to(stateRemoved)
	l.enqueue(a)
	l.enqueue(b)
	l.enqueue(a) // queued already
	l.enqueue(gone)
	l.enqueue(nil)
	if got := l.dequeue(); got != a || got.has(mQueued) {
		t.Fatalf("first dequeue %v (queued mark %v), want vpc/a unmarked", got.id, got.has(mQueued))
	}
	l.enqueue(a) // queued again after it was taken
	var order []converge.ID
	for n := l.dequeue(); n != nil; n = l.dequeue() {
		order = append(order, n.id)
	}
	if len(order) != 2 || order[0] != "vpc/b" || order[1] != "vpc/a" {
		t.Fatalf("dequeued %v, want [vpc/b vpc/a]", order)
	}
	if len(l.queue) != 0 || l.queueHead != 0 {
		t.Fatalf("an empty queue is not reset: len %d head %d", len(l.queue), l.queueHead)
	}
}

func TestLeasesParkBlockBackoff(t *testing.T) {
	l := newTestLeases()
	rs := &refState{max: 1}
	p, b, r := leaseNode("vpc/p"), leaseNode("vpc/b"), leaseNode("vpc/r")
	l.parkNode(p)
	l.blockNode(b, rs)
	l.parked = append(l.parked, b) // parked once, blocked since: stays blocked
	l.backOff(r, time.Unix(100, 0))
	l.backOff(r, time.Unix(200, 0)) // a second failure: counted once
	if l.backoffN != 1 || len(l.timers) != 2 || !r.is(stateBackoff) {
		t.Fatalf("backoffN %d timers %d state %s, want 1, 2, backoff", l.backoffN, len(l.timers), r.state)
	}
	l.unpark()
	if !p.is(stateFree) || !b.is(stateBlocked) || !p.has(mQueued) || !b.has(mQueued) {
		t.Fatalf("after unpark: parked node %s (queued %v), blocked node %s", p.state, p.has(mQueued), b.state)
	}
	w, ok := rs.nextWaiting()
	if !ok || w.n != b {
		t.Fatalf("nextWaiting = %v, %v; want the blocked node", w, ok)
	}
	l.endBackoff(r)
	l.endBackoff(r)
	if l.backoffN != 0 || !r.is(stateFree) {
		t.Fatalf("after endBackoff: backoffN %d state %s", l.backoffN, r.state)
	}
}

func TestLeasesNextWaitingHonoursSlots(t *testing.T) {
	l := newTestLeases()
	rs := &refState{max: 1, inflight: 1}
	l.blockNode(leaseNode("vpc/a"), rs)
	l.room(rs)
	l.room(rs) // once in roomy
	if got := l.takeRoomy(); len(got) != 1 || got[0].inRoomy || len(l.roomy) != 0 {
		t.Fatalf("takeRoomy = %d refs (inRoomy %v), want one, cleared", len(got), got[0].inRoomy)
	}
	if _, ok := rs.nextWaiting(); ok {
		t.Fatal("a ref with no free slot gave one")
	}
	rs.inflight, rs.noWorker = 0, true
	if _, ok := rs.nextWaiting(); ok {
		t.Fatal("a ref with no worker gave a slot")
	}
	rs.noWorker = false
	if _, ok := rs.nextWaiting(); !ok {
		t.Fatal("a ref with a free slot and a worker gave none")
	}
}

func TestLeasesCompactTimersDropsEndedLeases(t *testing.T) {
	l := newTestLeases()
	at := time.Unix(1000, 0)
	l.tasks["live"] = &taskRec{}
	l.addTimer(at.Add(3*time.Second), timerLease, "vpc/a", "live")
	l.addTimer(at.Add(time.Second), timerLease, "vpc/b", "ended")
	l.addTimer(at.Add(2*time.Second), timerRetry, "vpc/c", "")
	l.compactTimers()
	if l.leaseTimers != 1 || len(l.timers) != 2 {
		t.Fatalf("leaseTimers %d, %d timers; want 1 and 2", l.leaseTimers, len(l.timers))
	}
	if l.timers[0].kind != timerRetry {
		t.Fatalf("the earliest timer left is %v, want the retry", l.timers[0])
	}
}

func TestLeasesResyncBuckets(t *testing.T) {
	l := newTestLeases()
	t0 := time.Unix(5000, 0)
	a, b, moved, left := leaseNode("vpc/a"), leaseNode("vpc/b"), leaseNode("vpc/moved"), leaseNode("vpc/left")
	l.addResync(a, t0.Add(time.Millisecond))
	l.addResync(b, t0.Add(time.Second))
	l.addResync(moved, t0)
	l.addResync(moved, t0.Add(time.Hour)) // rescheduled: its first entry is stale
	l.addResync(left, t0)
	left.res().Phase = converge.PhasePending // no longer Ready: no resync
	if got, want := l.nextResync(), t0; !got.Equal(want) {
		t.Fatalf("nextResync = %v, want %v", got, want)
	}
	l.fireResyncs(t0.Add(resyncTick)) // a resync fires up to one tick late
	var fired []converge.ID
	for n := l.dequeue(); n != nil; n = l.dequeue() {
		fired = append(fired, n.id)
	}
	if len(fired) != 1 || fired[0] != "vpc/a" || !a.has(mResync) || a.resyncAt != 0 {
		t.Fatalf("fired %v (a marked %v), want only vpc/a", fired, a.has(mResync))
	}
	if got, want := l.nextResync(), t0.Add(time.Second); !got.Equal(want) {
		t.Fatalf("nextResync after firing = %v, want %v", got, want)
	}
}

func TestLeasesTaskIDs(t *testing.T) {
	l := newTestLeases()
	a, b := l.newTaskID(), l.newTaskID()
	if a == b || !strings.HasPrefix(a, "t-") || !strings.HasPrefix(b, "t-") {
		t.Fatalf("task ids %q %q: want distinct, with the process prefix", a, b)
	}
}
