package scheduler

import (
	"github.com/convergehq/converge"
)

// Drift: a resync of a Ready leaf whose kind declares the observe
// reaction (and a connected worker serves it) observes the real object
// instead of reconciling it. What observe finds is compared with the
// resource's Spec (converge.Drift: the fields that differ, never their
// values; the object gone; converge's mark gone):
//
//   - no drift: nothing is written (a drift recorded before is cleared,
//     with a DriftResolved event) and the next resync is armed;
//   - drift under policy heal (the default): the drift is recorded on
//     the row (Resource.Drift) with a Drifted event naming it, and the
//     resource is reconciled at once; that reconcile's success clears it
//     with a Healed event. A crash in between leaves the drift on the
//     row, and the next resync reconciles rather than observes;
//   - drift under policy report: the drift is recorded with a Drifted
//     event (once per distinct drift), the resource stays Ready with a
//     reason saying it is drifted and not healed, and later resyncs
//     observe again: the drift stays until someone decides (a new
//     declaration, whose reconcile clears it, or policy heal).
//
// A resource's drift_policy wins over its kind's. The drifted resources
// are kept in Scheduler.drifted (lazily: an entry whose node lost its
// drift or went is dropped when counted) for the metrics gauge.

// driftPolicy returns n's drift policy: its own, else its kind's, else
// heal.
func (s *Scheduler) driftPolicy(n *node) string {
	if p := n.res().DriftPolicy; p != "" {
		return p
	}
	if k := n.rs.kind; k != nil && k.DriftPolicy != "" {
		return k.DriftPolicy
	}
	return converge.DriftPolicyHeal
}

// observes reports whether a resync of n observes rather than
// reconciles: a leaf whose kind declares observe, served by a worker,
// with no drift waiting to be healed.
func (s *Scheduler) observes(n *node) bool {
	if s.isComposer(n) {
		return false
	}
	k := n.rs.kind
	if k == nil || !k.Has(converge.ReactionObserve) {
		return false
	}
	if d := n.res().Drift; d != nil && s.driftPolicy(n) == converge.DriftPolicyHeal {
		return false // heal it: reconcile
	}
	return s.servesRef(n.res().Ref(), converge.ReactionObserve)
}

// driftOf is what o says differs from spec, or nil.
func driftOf(spec []byte, o *converge.Observation) *converge.DriftReport {
	if !o.Exists {
		return &converge.DriftReport{Gone: true}
	}
	d := &converge.DriftReport{Unmarked: !o.Managed, Fields: converge.Drift(spec, o.Actual)}
	if !d.Unmarked && len(d.Fields) == 0 {
		return nil
	}
	return d
}

// observeResult handles a successful observe of n.
func (s *Scheduler) observeResult(n *node, rec *taskRec, res *converge.Result) {
	r := n.res()
	if rec.gen != r.Generation || r.Phase != converge.PhaseReady {
		s.lease.enqueue(n) // it changed meanwhile: its own work decides
		return
	}
	o := res.Observed
	if o == nil {
		s.failPermanent(n, "worker result refused: observe answered without an observation")
		return
	}
	rep := driftOf(r.Spec, o)
	if rep == nil {
		if r.Drift != nil {
			s.event(n.id, "DriftResolved", "no drift any more ("+r.Drift.Summary()+" before): the object matches its declaration")
			s.clearDrift(n)
		}
		s.scheduleResync(n)
		return
	}
	policy := s.driftPolicy(n)
	rep.Policy = policy
	rep.Generation = r.Generation
	rep.Since = s.now
	if r.Drift.Same(rep) {
		rep = r.Drift // the same drift: nothing new to write or say
	} else {
		if r.Drift != nil && r.Drift.Gone == rep.Gone && r.Drift.Unmarked == rep.Unmarked {
			rep.Since = r.Drift.Since
		}
		what := "healing: reconciling it back (drift_policy heal)"
		if policy == converge.DriftPolicyReport {
			what = "not healed: left as found (drift_policy report)"
		}
		s.event(n.id, "Drifted", "drift from the declaration at generation "+itoa(r.Generation)+": "+rep.Summary()+"; "+what)
		r.Drift = rep
		s.markDirty(n)
	}
	if s.graph.drifted == nil {
		s.graph.drifted = make(map[converge.ID]*node)
	}
	s.graph.drifted[n.id] = n
	if policy == converge.DriftPolicyReport {
		s.setReason(n, "drifted: "+rep.Summary()+"; not healed (drift_policy report): declare what you want in git, or set drift_policy heal")
		s.scheduleResync(n)
		return
	}
	s.setReason(n, "drifted: "+rep.Summary()+"; healing")
	n.set(mResync) // observes now says reconcile
	s.lease.enqueue(n)
}

// reconciled clears n's drift after a successful reconcile of rec: the
// object is as declared again.
func (s *Scheduler) reconciled(n *node, rec *taskRec) {
	d := n.res().Drift
	if d == nil {
		return
	}
	if rec.resync && s.driftPolicy(n) == converge.DriftPolicyHeal {
		s.event(n.id, "Healed", "reconciled back to its declaration (the drift was: "+d.Summary()+")")
	} else {
		s.event(n.id, "DriftResolved", "reconciled at generation "+itoa(rec.gen)+": the drift before ("+d.Summary()+") is gone")
	}
	s.clearDrift(n)
}

func (s *Scheduler) clearDrift(n *node) {
	n.res().Drift = nil
	delete(s.graph.drifted, n.id)
	if n.res().Phase == converge.PhaseReady {
		s.setReason(n, "")
	}
	s.markDirty(n)
}

// setDriftPolicy changes a git resource's own drift policy (no new
// generation: the spec is the same). A drift kept under report that is
// now to be healed is resynced at once.
func (s *Scheduler) setDriftPolicy(n *node, p string) {
	n.res().DriftPolicy = p
	s.markDirty(n)
	if d := n.res().Drift; d != nil && d.Policy != s.driftPolicy(n) && n.res().Phase == converge.PhaseReady && !n.deleting() {
		s.lease.addResync(n, s.now)
	}
}
