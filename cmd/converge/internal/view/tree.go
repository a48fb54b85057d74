package view

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/convergehq/converge"
)

// TreeNode is one resource of tree's output, with what it owns below
// it (-o json prints it as it is).
type TreeNode struct {
	ID      converge.ID    `json:"id"`
	Version int            `json:"kind_version"`
	Phase   converge.Phase `json:"phase"`
	Reason  string         `json:"reason,omitempty"`
	// Drift is what the last observe found different, while it is so.
	Drift *converge.DriftReport `json:"drift,omitempty"`
	// Suspended is the suspension holding the tree's top back
	// (converge suspend), shown on it alone.
	Suspended *converge.Suspension `json:"suspended,omitempty"`
	DependsOn []converge.ID        `json:"depends_on,omitempty"`
	Children  []*TreeNode          `json:"children,omitempty"`
	// Groups summarize the children by kind when there are more than
	// --group of them (Children is then empty).
	Groups []*TreeGroup `json:"groups,omitempty"`
}

// TreeGroup is one kind's children of a node: how many, in which phases.
type TreeGroup struct {
	Kind   string                 `json:"kind"`
	Count  int                    `json:"count"`
	Phases map[converge.Phase]int `json:"phases"`
	// Drifted counts the children with a drift recorded.
	Drifted int `json:"drifted,omitempty"`
}

// WriteTree draws the tree below root, one resource a line: its id,
// kind version, phase, drift, suspension, reason and what it depends on
// (→); a node's groups as one line per kind with its phases counted.
func WriteTree(w io.Writer, root *TreeNode) { writeTree(w, root, "", true, true) }

func writeTree(w io.Writer, n *TreeNode, prefix string, last, top bool) {
	branch, indent := "├── ", "│   "
	if last {
		branch, indent = "└── ", "    "
	}
	if top {
		branch, indent = "", ""
	}
	line := fmt.Sprintf("%s%s%s (v%d) %s", prefix, branch, n.ID, n.Version, n.Phase)
	if n.Drift != nil {
		line += " (drifted)"
	}
	if n.Suspended != nil {
		line += " [" + n.Suspended.String() + "]"
	}
	if n.Reason != "" {
		line += ": " + n.Reason
	}
	if len(n.DependsOn) > 0 {
		deps := make([]string, len(n.DependsOn))
		for i, d := range n.DependsOn {
			deps[i] = string(d)
		}
		line += "  → " + strings.Join(deps, ", ")
	}
	fmt.Fprintln(w, line)
	for i, k := range n.Children {
		writeTree(w, k, prefix+indent, i == len(n.Children)-1 && len(n.Groups) == 0, false)
	}
	for i, gr := range n.Groups {
		branch := "├── "
		if i == len(n.Groups)-1 {
			branch = "└── "
		}
		drift := ""
		if gr.Drifted > 0 {
			drift = fmt.Sprintf(" (%d drifted)", gr.Drifted)
		}
		fmt.Fprintf(w, "%s%s%s × %d: %s%s\n", prefix+indent, branch, gr.Kind, gr.Count, PhaseCounts(gr.Phases), drift)
	}
}

// PhaseCounts renders phase counts as "3 Ready, 1 Failed", most first.
func PhaseCounts(m map[converge.Phase]int) string {
	ps := make([]converge.Phase, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool {
		if m[ps[i]] != m[ps[j]] {
			return m[ps[i]] > m[ps[j]]
		}
		return ps[i] < ps[j]
	})
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%d %s", m[p], p)
	}
	return strings.Join(parts, ", ")
}
