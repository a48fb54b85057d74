package scheduler

import (
	"context"
	"slices"

	"github.com/convergehq/converge"
)

// A suspension (converge suspend, Flux's suspend) stops new dispatches
// for a root's subtree, or for every resource: no reconcile, resync or
// recompose starts until it is resumed. What is in flight finishes and
// its result is kept. Deletes are honoured: a resource being deleted is
// torn down whatever is suspended, since a delete is itself an operator's
// explicit act (and a prune is what an applied revision asked for).
// Operator verbs (Do) and reactor deliveries run too. A held resource
// keeps its phase and reason: nothing is written for it, so suspending a
// million resources costs no commit; the suspension is shown from where
// it is kept (the store's converge.Control), not on every row.

// suspension is the scheduler's set of suspended roots; loop only.
type suspension struct {
	all   bool
	roots map[converge.ID]bool
	// held are the nodes consider passed over while suspended: they are
	// considered again when their root is resumed.
	held map[*node]bool
}

// set replaces the suspended roots with ids ("" for everything).
func (sp *suspension) set(ids []converge.ID) {
	sp.all, sp.roots = false, nil
	for _, id := range ids {
		if id == "" {
			sp.all = true
			continue
		}
		if sp.roots == nil {
			sp.roots = map[converge.ID]bool{}
		}
		sp.roots[id] = true
	}
}

// holds reports whether n's subtree is suspended: everything is, or n or
// one of its owners is a suspended root. A resource being deleted is
// never held.
func (sp *suspension) holds(n *node) bool {
	if n.deleting() {
		return false
	}
	if sp.all {
		return true
	}
	if len(sp.roots) == 0 {
		return false
	}
	for a := n; a != nil; a = a.owner {
		if sp.roots[a.id] {
			return true
		}
	}
	return false
}

// hold records that consider passed n over; it reports whether it did.
func (s *Scheduler) holdSuspended(n *node) bool {
	if !s.susp.holds(n) {
		return false
	}
	if s.susp.held == nil {
		s.susp.held = map[*node]bool{}
	}
	s.susp.held[n] = true
	return true
}

// Suspend replaces the suspended roots with ids ("" suspends every
// resource): their subtrees get no new dispatch until a later Suspend
// leaves them out, which considers again what was held.
func (s *Scheduler) Suspend(ctx context.Context, ids []converge.ID) error {
	ids = slices.Clone(ids)
	return s.exec(ctx, func(s *Scheduler) {
		s.susp.set(ids)
		for n := range s.susp.held {
			if n.is(stateRemoved) || !s.susp.holds(n) {
				delete(s.susp.held, n)
				if !n.is(stateRemoved) {
					s.lease.enqueue(n)
				}
			}
		}
	})
}

// Held returns how many resources a suspension holds back now: each was
// due a dispatch that did not start.
func (s *Scheduler) Held(ctx context.Context) (int, error) {
	var n int
	err := s.exec(ctx, func(s *Scheduler) { n = len(s.susp.held) })
	return n, err
}
