package scheduler

import (
	"encoding/json"

	"github.com/convergehq/converge"
)

// applyGitEdges makes the edges of the resources git declares those of
// d.Edges (their depends_on): added, changed and removed edges are
// written like a composition's, and each consumer whose edges changed
// recomputes its flows and is considered again (gated on its producers,
// as a composed child is). A consumer being torn down keeps its edges
// until its row goes.
func (s *Scheduler) applyGitEdges(d *converge.Desired) {
	want := make(map[converge.ID][]converge.Edge)
	for _, e := range d.Edges {
		want[e.Consumer] = append(want[e.Consumer], e)
	}
	s.graph.gitEdges = want
	for _, n := range s.graph.gitRoots {
		s.setGitEdges(n)
	}
}

// setGitEdges makes n's edges those its depends_on declares
// (s.gitEdges); a re-created row gets them when it is created again.
func (s *Scheduler) setGitEdges(n *node) {
	id := n.id
	w, have := s.graph.gitEdges[id], s.graph.producersOf(id)
	if n.deleting() || len(w) == 0 && len(have) == 0 {
		return
	}
	changed := false
	keep := make(map[converge.ID]bool, len(w))
	for _, e := range w {
		keep[e.Producer] = true
		old := s.graph.edgeOf(id, e.Producer)
		if old != nil && flowsEqual(old.Flows, e.Flows) {
			continue
		}
		prod := e.Producer
		if p := s.graph.nodes[prod]; p != nil {
			prod = p.id
		}
		ne := &converge.Edge{Consumer: n.id, Producer: prod, Flows: s.graph.internFlows(e.Flows)}
		s.graph.addEdge(ne) // replaces old
		if n.has(mStored) {
			s.batch.putEdge(ne, s.now)
		} else {
			// Its row carries its edges into the store (buildBatch).
			delete(s.batch.edgeDel, edgeKey{ne.Consumer, ne.Producer})
		}
		changed = true
	}
	for _, e := range append([]*converge.Edge(nil), have...) {
		if !keep[e.Producer] {
			s.graph.removeEdge(e)
			s.batch.delEdge(e, s.now)
			changed = true
		}
	}
	if changed {
		n.markFlows()
		s.lease.enqueue(n)
	}
}

// gitPending returns the flowed spec fields (flows' To) of id's
// depends_on in d.
func gitPending(d *converge.Desired, id converge.ID) []string {
	var out []string
	for _, e := range d.Edges {
		if e.Consumer == id {
			for _, f := range e.Flows {
				out = append(out, f.To)
			}
		}
	}
	return out
}

// validateDeclared validates a git resource's declared spec under ref,
// its depends_on flows' fields pending when v can.
func validateDeclared(v Validator, d *converge.Desired, r *converge.Resource) error {
	if pv, ok := v.(PendingValidator); ok {
		if p := gitPending(d, r.ID()); len(p) > 0 {
			return pv.ValidateSpecPending(r.Ref(), r.Declared, p)
		}
	}
	return v.ValidateSpec(r.Ref(), r.Declared)
}

// noteKnownAfter adds to p's Create and Update items of git resources the
// spec fields their depends_on flows fill (known after apply).
func noteKnownAfter(p *Plan, d *converge.Desired) {
	if len(d.Edges) == 0 {
		return
	}
	consumes := make(map[converge.ID][]converge.Edge)
	for _, e := range d.Edges {
		if len(e.Flows) > 0 {
			consumes[e.Consumer] = append(consumes[e.Consumer], e)
		}
	}
	declared := make(map[converge.ID]json.RawMessage, len(consumes))
	for _, r := range d.Resources {
		if _, ok := consumes[r.ID()]; ok {
			declared[r.ID()] = r.Declared
		}
	}
	for _, l := range [][]PlanItem{p.Create, p.Update} {
		for i := range l {
			if es := consumes[l[i].ID]; es != nil {
				l[i].KnownAfter = KnownAfterApply(declared[l[i].ID], es)
			}
		}
	}
}
