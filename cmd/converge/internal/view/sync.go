package view

import (
	"fmt"
	"io"
	"strings"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
	gitsync "github.com/convergehq/converge/sync"
)

// SyncReport is what sync -o json|yaml prints when it ends: the revision,
// what it applied and the verdict, with what is not Ready grouped by
// reason. The keys are stable snake_case.
type SyncReport struct {
	Revision string `json:"revision"`
	// Verdict is converged, already_applied, invalid, held, stuck,
	// timed_out, interrupted or not_durable; a sync a daemon applied
	// (it held the state) is converged, failed or timed_out.
	Verdict string         `json:"verdict"`
	Applied *AppliedCounts `json:"applied"`
	// Summary is what was applied in plan -o json's "summary" schema:
	// counts in all and per kind, composed children included.
	Summary    *Summary         `json:"summary,omitempty"`
	Counts     *converge.Counts `json:"counts"`
	Dispatched uint64           `json:"dispatched"`
	Seconds    float64          `json:"seconds"`
	Held       string           `json:"held,omitempty"`
	// Override is the guard the revision was applied past, and who
	// asked for it.
	Override string          `json:"override,omitempty"`
	Errors   []string        `json:"errors"`
	NotReady []NotReadyGroup `json:"not_ready"`
}

// AppliedCounts are what sync -o json says a revision applied.
type AppliedCounts struct {
	Created int `json:"created"`
	Updated int `json:"updated"`
	Flipped int `json:"flipped"`
	Deleted int `json:"deleted"`
	Pruned  int `json:"pruned"`
}

// NotReadyGroup is a scheduler.ProblemGroup as sync reports it.
type NotReadyGroup struct {
	Phase     converge.Phase `json:"phase"`
	Reason    string         `json:"reason"`
	Pattern   string         `json:"pattern"`
	Permanent bool           `json:"permanent"`
	Count     int            `json:"count"`
	Resources []converge.ID  `json:"resources"`
}

// MaxCauses is how many causes (problem groups) a stuck verdict lists;
// ExamplesPerCause how many resources it names for each.
const (
	MaxCauses        = 20
	ExamplesPerCause = 3
)

// WriteProblemGroups prints what is not converged, one line per cause
// (a phase and a reason pattern, scheduler.ProblemGroups): a cause of one
// resource as "vpc/a Failed: reason", a bigger one as its count, its
// pattern and its first examples; at most MaxCauses causes, then how
// many more there are.
func WriteProblemGroups(w io.Writer, groups []scheduler.ProblemGroup, examples int) {
	for i, g := range groups {
		if i == MaxCauses {
			fmt.Fprintf(w, "  (+%s more)\n", converge.Plural(len(groups)-MaxCauses, "cause"))
			return
		}
		if g.Count == 1 && len(g.IDs) == 1 {
			fmt.Fprintf(w, "  %s %s: %s\n", g.IDs[0], g.Phase, g.Reason)
			continue
		}
		k := min(examples, len(g.IDs))
		ids := make([]string, k)
		for i := range k {
			ids[i] = string(g.IDs[i])
		}
		line := strings.Join(ids, ", ")
		if more := g.Count - k; more > 0 {
			line += fmt.Sprintf(", +%d more", more)
		}
		fmt.Fprintf(w, "  %d %s: %s (e.g. %s)\n", g.Count, g.Phase, g.Pattern, line)
	}
}

// PassLine is one line about a revision's verdict.
func PassLine(p *gitsync.Pass) string {
	switch {
	case !p.Valid():
		return fmt.Sprintf("%s invalid (%s), not applied: %s", p.Revision, converge.Plural(len(p.Record.Errors), "error"), p.Record.Errors[0])
	case Breaking(p):
		return fmt.Sprintf("%s not applied: breaking schema change (%s): %s", p.Revision, converge.Plural(len(p.Record.Findings), "finding"), p.Record.Findings[0])
	case p.Held != "":
		return fmt.Sprintf("%s %s", p.Revision, p.Held)
	case p.Applied && p.Priced != nil:
		// Counted as plan counts it; on an empty store there was nothing
		// to dry-run against, so what the documents compose is not in it.
		more := ""
		if p.Fresh {
			more = " (on an empty store: what they compose comes on top)"
		}
		return fmt.Sprintf("%s applied: %s%s", p.Revision, gitsync.Summarize(p.Priced).AppliedText(), more)
	}
	if st, ok := p.Record.Status(converge.ContextSync); ok {
		return fmt.Sprintf("%s %s", p.Revision, st.Description)
	}
	return p.Revision.String() + " checked"
}

// Breaking reports whether lint refused p.
func Breaking(p *gitsync.Pass) bool {
	st, ok := p.Record.Status(converge.ContextLint)
	return ok && st.State == converge.StateFailure && len(p.Record.Findings) > 0
}
