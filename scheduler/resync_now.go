package scheduler

import (
	"context"
	"fmt"

	"github.com/convergehq/converge"
)

// Resync reconciles id again now, as its resync interval would when it
// next came due (a composer recomposes if its kind says resyncs
// recompose), and says what it did. Only a Ready resource at its
// current generation is resynced: any other is already working, waiting
// for what it depends on, or backing off, and the answer says which.
// It returns converge.ErrNotFound (wrapped) if id does not exist.
func (s *Scheduler) Resync(ctx context.Context, id converge.ID) (string, error) {
	var msg string
	var err error
	e := s.exec(ctx, func(s *Scheduler) {
		n := s.graph.nodes[id]
		if n == nil || n.is(stateRemoved) {
			err = fmt.Errorf("resync %s: %w", id, converge.ErrNotFound)
			return
		}
		r := n.res()
		switch {
		case r.Deleting:
			msg = fmt.Sprintf("%s is being deleted: nothing to resync", id)
		case r.Phase != converge.PhaseReady || r.ObservedGeneration != r.Generation:
			msg = fmt.Sprintf("%s is %s", id, r.Phase)
			if r.Reason != "" {
				msg += " (" + r.Reason + ")"
			}
			msg += ": it is reconciled as soon as it can be; nothing queued"
		default:
			s.lease.addResync(n, s.now)
			msg = fmt.Sprintf("%s: resync queued", id)
		}
	})
	if e != nil {
		return "", e
	}
	return msg, err
}
