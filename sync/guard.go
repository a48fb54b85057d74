package sync

import (
	"fmt"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// DefaultPruneLimit is the largest share of the stored resources one
// revision may delete when the repository's converge.cue sets none.
const DefaultPruneLimit = 0.5

// Teardown counts what deleting the plan's Delete items would remove from
// snap: each item's teardown tree (everything it owns and everything that
// depends on any of that, transitively), without double counting.
func Teardown(snap *converge.Snapshot, plan *scheduler.Plan) int {
	if len(plan.Delete) == 0 {
		return 0
	}
	owned := map[converge.ID][]converge.ID{}
	for _, r := range snap.Resources {
		if r.Owner != "" {
			owned[r.Owner] = append(owned[r.Owner], r.ID())
		}
	}
	dependents := map[converge.ID][]converge.ID{}
	for _, e := range snap.Edges {
		dependents[e.Producer] = append(dependents[e.Producer], e.Consumer)
	}
	marked := map[converge.ID]bool{}
	var stack []converge.ID
	for _, it := range plan.Delete {
		stack = append(stack, it.ID)
	}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if marked[id] {
			continue
		}
		marked[id] = true
		stack = append(stack, owned[id]...)
		stack = append(stack, dependents[id]...)
	}
	n := 0
	present := make(map[converge.ID]bool, len(snap.Resources))
	for _, r := range snap.Resources {
		present[r.ID()] = true
	}
	for id := range marked {
		if present[id] {
			n++
		}
	}
	return n
}

// PruneGuard returns why applying plan to snap must be held, or "" when
// it may go ahead: a revision may not delete every resource unless the
// settings allow it, nor more than their prune_limit share of them.
func PruneGuard(snap *converge.Snapshot, plan *scheduler.Plan, set converge.Settings) string {
	total := len(snap.Resources)
	gone := Teardown(snap, plan)
	if total == 0 || gone == 0 {
		return ""
	}
	if gone == total {
		if set.AllowPruneAll {
			return ""
		}
		return fmt.Sprintf("held by the prune guard: this revision would delete all %d resources; set allow_prune_all: true in converge.cue to allow it", total)
	}
	limit := set.PruneLimit
	if limit <= 0 {
		limit = DefaultPruneLimit
	}
	if share := float64(gone) / float64(total); share > limit {
		return fmt.Sprintf("held by the prune guard: this revision would delete %d of %d resources (%.0f%% > prune_limit %.0f%%); raise prune_limit in converge.cue to allow it",
			gone, total, share*100, limit*100)
	}
	return ""
}
