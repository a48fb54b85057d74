package view

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/convergehq/converge"
)

// Delete is what delete -o json|yaml prints when it ends.
type Delete struct {
	Resource converge.ID `json:"resource"`
	// Verdict is deleted, deleting (--wait=false), recreated, stuck,
	// timed_out or interrupted.
	Verdict     string      `json:"verdict"`
	Seconds     float64     `json:"seconds"`
	RecreatedBy converge.ID `json:"recreated_by,omitempty"`
	StuckOn     string      `json:"stuck_on,omitempty"`
}

// WriteComesBack tells what re-creates a deleted resource: the repository
// that declares it, or the owner that composes it.
func WriteComesBack(out io.Writer, r *converge.Resource) {
	switch {
	case r.Owner != "":
		fmt.Fprintf(out, "note: %s recomposes once the teardown is done and re-creates it while it still emits it\n", r.Owner)
	case r.Origin == converge.OriginGit:
		src := r.Source
		if src == "" {
			src = "the repository"
		}
		fmt.Fprintf(out, "note: declared in %s: the next sync re-creates it; remove it from the repository to keep it gone\n", src)
	}
}

// StuckOn follows the "waiting for teardown of X" reasons from id down to
// the resource the teardown actually waits for and describes it, e.g.
// "account/a waiting for teardown of vpc/a; vpc/a waiting for teardown of
// route/a (stuck 12s); route/a: tearing down (attempt 4, last error: …)".
func StuckOn(ctx context.Context, rd Reader, id converge.ID) string {
	var parts []string
	seen := map[converge.ID]bool{}
	for cur := id; !seen[cur]; {
		seen[cur] = true
		r, err := rd.Resource(ctx, cur)
		if err != nil {
			parts = append(parts, fmt.Sprintf("%s: %v", cur, err))
			break
		}
		const prefix = "waiting for teardown of "
		next, ok := strings.CutPrefix(r.Reason, prefix)
		if !ok {
			desc := r.Reason
			if r.LastError != "" && !strings.Contains(desc, r.LastError) {
				desc += " (last error: " + r.LastError + ")"
			}
			parts = append(parts, fmt.Sprintf("%s %s: %s", cur, r.Phase, desc))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s", cur, r.Reason))
		if i := strings.IndexByte(next, ' '); i >= 0 {
			next = next[:i]
		}
		nid, err := converge.ParseID(next)
		if err != nil {
			break
		}
		cur = nid
	}
	return strings.Join(parts, "; ")
}

// Do is what do -o json|yaml prints for a verb that ran.
type Do struct {
	Resource converge.ID     `json:"resource"`
	Verb     string          `json:"verb"`
	Outcome  string          `json:"outcome"`
	Message  string          `json:"message"`
	Status   json.RawMessage `json:"status"`
	Seconds  float64         `json:"seconds"`
}
