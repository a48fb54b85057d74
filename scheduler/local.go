package scheduler

import (
	"github.com/convergehq/converge"
)

// localServes reports whether the control plane itself answers ref's
// reaction (a kind that composes in CUE: its compose and teardown).
func (s *Scheduler) localServes(ref converge.KindRef, reaction string) bool {
	return s.local != nil && (reaction == converge.ReactionCompose || reaction == converge.ReactionTeardown) &&
		s.local.Composes(ref)
}

// setLocal takes the LocalComposer of v, if it is one. A change re-checks
// every parked resource: a CUE composer waits for no worker.
func (s *Scheduler) setLocal(v Validator) {
	lc, _ := v.(LocalComposer)
	if lc == nil && s.local == nil {
		return
	}
	s.local = lc
	s.onChanged()
}

// dispatchLocal answers t off the loop with the LocalComposer; the
// result comes back through localRes, like a worker's.
func (s *Scheduler) dispatchLocal(t *converge.Task) {
	lc, ctx, out := s.local, s.ctx, s.localRes
	go func() {
		res := lc.Compose(t)
		res.TaskID = t.ID
		select {
		case out <- res:
		case <-ctx.Done():
		}
	}()
}

// dryLocal answers a dry-run compose with the LocalComposer.
func (s *Scheduler) dryLocal(t *converge.Task) chan verbOutcome {
	ch := make(chan verbOutcome, 1)
	dt := *t
	dt.DryRun, dt.Reaction = true, converge.ReactionCompose
	lc := s.local
	go func() { ch <- verbOutcome{res: lc.Compose(&dt)} }()
	return ch
}
