package scheduler

import (
	"context"
	"fmt"

	"github.com/convergehq/converge"
)

// CheckInvariants verifies the engine's derived state against its rows:
// counts, rollups, ownership, edge indexes, inflight and backoff tallies,
// leases and owed deliveries.
func CheckInvariants(s *Scheduler) error {
	var err error
	if e := s.exec(context.Background(), func(s *Scheduler) { err = s.checkInvariants() }); e != nil {
		return e
	}
	return err
}

func (s *Scheduler) checkInvariants() error {
	var total converge.Counts
	byRef := map[converge.KindRef]converge.Counts{}
	for _, n := range s.graph.nodes {
		c := byRef[n.peek().Ref()]
		c.Add(n.peek().Phase)
		byRef[n.peek().Ref()] = c
	}
	for ref, rs := range s.lease.refs {
		if rs.stats.phases != byRef[ref] {
			return fmt.Errorf("%s: metrics count %+v by phase, tallied %+v", ref, rs.stats.phases, byRef[ref])
		}
	}
	for id, n := range s.graph.nodes {
		if n.id != id || n.peek().ID() != id || n.is(stateRemoved) {
			return fmt.Errorf("%s: bad node identity", id)
		}
		total.Add(n.peek().Phase)
		if n.deleting() != (n.peek().Phase == converge.PhaseDeleting) {
			return fmt.Errorf("%s: deleting %v in phase %s", id, n.deleting(), n.peek().Phase)
		}
		if n.rs != s.lease.refs[n.peek().Ref()] {
			return fmt.Errorf("%s: stale refState", id)
		}
		var sub converge.Counts
		var walk func(c *node)
		walk = func(c *node) {
			for _, g := range c.kids() {
				sub.Add(g.peek().Phase)
				walk(g)
			}
		}
		walk(n)
		var have converge.Counts
		if n.sub != nil {
			have = n.sub.counts
		}
		if sub != have {
			return fmt.Errorf("%s: subtree counts %+v, tallied %+v", id, have, sub)
		}
		for i, c := range n.kids() {
			if s.graph.nodes[c.id] != c || c.owner != n || c.peek().Owner != id || int(c.ci) != i {
				return fmt.Errorf("%s: child %s inconsistent", id, c.id)
			}
		}
		if n.owner != nil && (s.graph.nodes[n.owner.id] != n.owner || int(n.ci) >= len(n.owner.kids()) || n.owner.kids()[n.ci] != n) {
			return fmt.Errorf("%s: owner %s inconsistent", id, n.owner.id)
		}
		pending := int32(0)
		for _, c := range n.kids() {
			want := c.has(mDirty) || c.has(mInBatch) || c.has(mUnstorable) || c.sub != nil && c.sub.held
			if c.has(mPending) != want {
				return fmt.Errorf("%s: counted pending %v, is %v", c.id, c.has(mPending), want)
			}
			if c.has(mPending) {
				pending++
			}
		}
		if have := int32(0); n.sub != nil && n.sub.pending != pending || n.sub == nil && pending > 0 {
			if n.sub != nil {
				have = n.sub.pending
			}
			return fmt.Errorf("%s: %d children pending, tallied %d", id, have, pending)
		}
		if n.sub != nil && n.sub.held && pending == 0 {
			return fmt.Errorf("%s: held with no child pending", id)
		}
		if n.peek().Owner != "" && n.owner == nil {
			return fmt.Errorf("%s: orphan of %s", id, n.peek().Owner)
		}
		if l := n.peek().Lease; l != nil {
			rec := s.lease.tasks[l.TaskID]
			if rec == nil || rec.id != id {
				return fmt.Errorf("%s: lease %s without its task", id, l.TaskID)
			}
		}
		if n.peek().Owner != "" && n.owner != nil && n.owner.deleting() && !n.deleting() {
			return fmt.Errorf("%s: alive under deleting owner %s", id, n.owner.id)
		}
	}
	if total != s.graph.counts {
		return fmt.Errorf("counts %+v, tallied %+v", s.graph.counts, total)
	}
	np, nc := 0, 0
	adjs := map[converge.ID]*adjacency{}
	for id, n := range s.graph.nodes {
		adjs[id] = &n.adj
	}
	for id, a := range s.graph.loose {
		if s.graph.nodes[id] != nil {
			return fmt.Errorf("%s: loose edges beside its node", id)
		}
		if len(a.prod()) == 0 && len(a.cons()) == 0 {
			return fmt.Errorf("%s: an empty loose entry", id)
		}
		adjs[id] = a
	}
	for c, a := range adjs {
		l := a.prod()
		seen := map[converge.ID]bool{}
		for _, e := range l {
			if e.Consumer != c {
				return fmt.Errorf("producers of %s hold %v", c, e)
			}
			if seen[e.Producer] {
				return fmt.Errorf("edge %s -> %s twice", c, e.Producer)
			}
			seen[e.Producer] = true
			if !hasEdge(s.graph.consumersOf(e.Producer), e) {
				return fmt.Errorf("edge %s -> %s missing from the consumer index", e.Consumer, e.Producer)
			}
			if s.graph.nodes[e.Consumer] == nil {
				return fmt.Errorf("edge %s -> %s: consumer gone", e.Consumer, e.Producer)
			}
		}
		np += len(l)
	}
	for p, a := range adjs {
		for _, e := range a.cons() {
			if e.Producer != p {
				return fmt.Errorf("consumers of %s hold %v", p, e)
			}
		}
		nc += len(a.cons())
	}
	if np != nc {
		return fmt.Errorf("%d producer index entries, %d consumer index entries", np, nc)
	}
	inflight := 0
	for _, rs := range s.lease.refs {
		if rs.inflight < 0 {
			return fmt.Errorf("%s: inflight %d", rs.ref, rs.inflight)
		}
		inflight += rs.inflight
	}
	counted := 0
	for _, rec := range s.lease.tasks {
		if rec.counted {
			counted++
		}
	}
	if inflight != s.lease.inflight || counted != s.lease.inflight {
		return fmt.Errorf("inflight %d, per ref %d, counted tasks %d", s.lease.inflight, inflight, counted)
	}
	backoff := 0
	for _, n := range s.graph.nodes {
		if n.is(stateBackoff) {
			backoff++
		}
	}
	if backoff != s.lease.backoffN {
		return fmt.Errorf("backoffN %d, nodes in backoff %d", s.lease.backoffN, backoff)
	}
	owed := 0
	for _, d := range s.react.deliveries {
		if !d.Done {
			owed++
		}
	}
	if owed != s.react.owedDeliv {
		return fmt.Errorf("owed deliveries %d, tallied %d", s.react.owedDeliv, owed)
	}
	// The outbox: a delivery whose row is not durable is owed and was
	// never dispatched.
	if s.react.inBatch > len(s.react.unstored) {
		return fmt.Errorf("%d unstored deliveries in the batch, %d unstored", s.react.inBatch, len(s.react.unstored))
	}
	for _, d := range s.react.unstored {
		if s.react.deliveries[d.Key] != d || d.Done || s.react.delivLease[d.Key] != "" || d.Attempts > 0 {
			return fmt.Errorf("delivery %s not durable yet, but not owed and untried (done %v, lease %q, attempts %d)",
				d.Key, d.Done, s.react.delivLease[d.Key], d.Attempts)
		}
	}
	// Retention: a done delivery is kept (as a fired entry) only for a
	// live subject at its generation.
	uids := make(map[string]*node, len(s.graph.nodes))
	for _, n := range s.graph.nodes {
		uids[n.peek().UID] = n
	}
	for fk, g := range s.react.fired {
		if n := uids[fk.uid]; n == nil || g > n.peek().Generation {
			return fmt.Errorf("fired %v at generation %d: subject gone or older", fk, g)
		}
	}
	return nil
}

// DeliveriesHeld returns how many deliveries s holds in memory: whole
// (owed ones) and as a fired entry (done ones kept for dedup).
func DeliveriesHeld(s *Scheduler) (whole, fired int) {
	_ = s.exec(context.Background(), func(s *Scheduler) { whole, fired = len(s.react.deliveries), len(s.react.fired) })
	return whole, fired
}

func hasEdge(l []*converge.Edge, e *converge.Edge) bool {
	for _, x := range l {
		if x == e {
			return true
		}
	}
	return false
}

// TimerLen is the number of entries in the timer heap.
// PackedRows counts the nodes whose rows are packed (pack.go), and all.
func PackedRows(s *Scheduler) (packed, all int) {
	_ = s.exec(context.Background(), func(s *Scheduler) {
		for _, n := range s.graph.nodes {
			all++
			if n.r == nil {
				packed++
			}
		}
	})
	return packed, all
}

// RearmPending counts the nodes whose resyncs wait to be re-armed.
func RearmPending(s *Scheduler) (n int) {
	_ = s.exec(context.Background(), func(s *Scheduler) { n = len(s.rearmQueue) })
	return n
}

func TimerLen(s *Scheduler) int {
	var n int
	_ = s.exec(context.Background(), func(s *Scheduler) { n = len(s.lease.timers) })
	return n
}

// The package's tests check every node state transition (nodestate.go).
func init() { checkTransitions = true }
