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

// OverrideChangeLimit is the value of a Converge-Override trailer in a
// commit message that applies that commit past the change limit once
// (OverrideTrailer).
const OverrideChangeLimit = "change-limit"

// OverrideTrailer is the commit-message trailer that names the guards a
// commit is applied past: "Converge-Override: change-limit".
const OverrideTrailer = "Converge-Override"

// Changed counts what applying plan changes: the resources it creates,
// updates and flips, and those its deletes and prunes tear down (w, from
// scheduler.Weigh), composed children included once the plan went
// through scheduler.Fanout.
func Changed(w scheduler.Weight, plan *scheduler.Plan) int {
	return len(plan.Create) + len(plan.Update) + len(plan.Flip) + w.TornDown
}

// ChangeGuard returns why applying plan must be held because it changes
// more resources than set.ChangeLimit (0: no limit), or "". The verdict
// is "held", like the prune guard's; a commit whose message carries the
// trailer "Converge-Override: change-limit" (Overrides), or a sync run
// with --override-change-limit, is applied all the same, and its verdict
// records the override.
func ChangeGuard(w scheduler.Weight, plan *scheduler.Plan, set converge.Settings) string {
	if set.ChangeLimit <= 0 {
		return ""
	}
	n := Changed(w, plan)
	if n <= set.ChangeLimit {
		return ""
	}
	return fmt.Sprintf("held by the change limit: this revision would change %s resources (%d created, %d updated, %d flipped, %d torn down) > change_limit %s; raise change_limit in converge.cue, or apply it once with the commit trailer %q",
		Thousands(n), len(plan.Create), len(plan.Update), len(plan.Flip), w.TornDown, Thousands(set.ChangeLimit), OverrideTrailer+": "+OverrideChangeLimit)
}

// Overrides returns the guards a commit message overrides: the values of
// its Converge-Override trailers (comma-separated, lowercased), in the
// message's last paragraph as git's trailers are.
func Overrides(message string) []string {
	paras := strings.Split(strings.TrimSpace(strings.ReplaceAll(message, "\r\n", "\n")), "\n\n")
	if len(paras) < 2 {
		return nil // a subject alone has no trailers
	}
	var out []string
	for _, line := range strings.Split(paras[len(paras)-1], "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), OverrideTrailer) {
			continue
		}
		for _, o := range strings.Split(v, ",") {
			if o = strings.ToLower(strings.TrimSpace(o)); o != "" {
				out = append(out, o)
			}
		}
	}
	return out
}
