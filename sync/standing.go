package sync

import (
	"encoding/json"

	"github.com/convergehq/converge"
)

// AlreadyConverged reports whether a sync of head has nothing to do: head
// is the applied revision (a commit, not a work tree) whose declared
// resources (declared of them, all roots) are all there, every root is
// Ready at its generation and no reactor delivery is owed. A composer is
// Ready only when its whole subtree is, so the roots answer for the whole
// graph, and sync can say so without loading documents or the graph (a
// million resources take seconds to load). total counts every resource:
// the roots and their rollups' totals.
func AlreadyConverged(applied *converge.Revision, head converge.Revision, declared int, roots []*converge.Resource, owedDeliveries int) (total int, ok bool) {
	if applied == nil || applied.Dirty || head.Dirty || applied.Hash != head.Hash || owedDeliveries > 0 || len(roots) == 0 {
		return 0, false
	}
	fromGit := 0
	for _, r := range roots {
		if r.Origin == converge.OriginGit {
			fromGit++
		}
	}
	if fromGit != declared {
		return 0, false // one was deleted out from under the revision
	}
	for _, r := range roots {
		if r.Deleting || r.Phase != converge.PhaseReady || r.ObservedGeneration != r.Generation {
			return 0, false
		}
		total++
		if len(r.Status) == 0 {
			continue
		}
		var st struct {
			Rollup *converge.Counts `json:"rollup"`
		}
		if err := json.Unmarshal(r.Status, &st); err != nil {
			return 0, false
		}
		if st.Rollup != nil {
			if st.Rollup.Ready != st.Rollup.Total {
				return 0, false
			}
			total += st.Rollup.Total
		}
	}
	return total, true
}
