package sync

import (
	"context"
	"fmt"
	"strings"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// DefaultPruneLimit is the largest share of the stored resources one
// revision may delete when the repository's converge.cue sets none.
const DefaultPruneLimit = 0.5

// Teardown counts what applying plan would remove from snap: the
// teardown tree of each of its Delete items (documents removed from git)
// and Prune items (children a recompose would prune, see
// scheduler.Fanout): everything each owns and everything that depends on
// any of that, transitively, without double counting (scheduler.Weigh).
func Teardown(snap *converge.Snapshot, plan *scheduler.Plan) int {
	return weigh(snap, plan).TornDown
}

func weigh(snap *converge.Snapshot, plan *scheduler.Plan) scheduler.Weight {
	// A snapshot's graph is read in place: there is no error to return.
	w, _ := scheduler.Weigh(context.Background(), scheduler.SnapshotGraph(snap), plan)
	return w
}

// PruneGuard returns why applying plan to snap must be held, or "" when
// it may go ahead: a revision may not delete every resource unless the
// settings allow it, nor more than their prune_limit share of them. What
// it deletes is the teardown of the documents it removes plus that of the
// children its changed composers would prune (plan.Prune, from
// scheduler.Fanout); when a changed composer's dry run gave no answer
// (plan.Unanswered), that is unknown and the revision is held.
func PruneGuard(snap *converge.Snapshot, plan *scheduler.Plan, set converge.Settings) string {
	return PruneGuardWeight(weigh(snap, plan), plan, set)
}

// PruneGuardWeight is PruneGuard given what plan tears down of the
// stored graph (scheduler.Weigh), so the graph can be the engine's.
func PruneGuardWeight(w scheduler.Weight, plan *scheduler.Plan, set converge.Settings) string {
	total := w.Total
	if total == 0 {
		return ""
	}
	if u := plan.Unanswered; len(u) > 0 {
		more := ""
		if len(u) > 1 {
			more = fmt.Sprintf(" (+%d more)", len(u)-1)
		}
		return fmt.Sprintf("held by the prune guard: cannot count what recomposing %s would prune%s: %s", u[0].ID, more, u[0].Reason)
	}
	gone := w.TornDown
	if gone == 0 {
		return ""
	}
	what := ""
	if len(plan.Prune) > 0 {
		owners := map[string]bool{}
		var first string
		for _, it := range plan.Prune {
			o := strings.TrimPrefix(it.Reason, "pruned by ")
			if first == "" {
				first = o
			}
			owners[o] = true
		}
		by := first
		if len(owners) > 1 {
			by += fmt.Sprintf(" and %d more composers", len(owners)-1)
		}
		what = fmt.Sprintf(" (%d removed from git, %d pruned by recomposing %s)", w.Removed, gone-w.Removed, by)
	}
	if gone == total {
		if set.AllowPruneAll {
			return ""
		}
		return fmt.Sprintf("held by the prune guard: this revision would delete all %d resources%s; set allow_prune_all: true in converge.cue to allow it", total, what)
	}
	limit := set.PruneLimit
	if limit <= 0 {
		limit = DefaultPruneLimit
	}
	if share := float64(gone) / float64(total); share > limit {
		return fmt.Sprintf("held by the prune guard: this revision would delete %d of %d resources%s (%.0f%% > prune_limit %.0f%%); raise prune_limit in converge.cue to allow it",
			gone, total, what, share*100, limit*100)
	}
	return ""
}
