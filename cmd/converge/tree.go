package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
)

func newTreeCommand(g *globals) *cobra.Command {
	var output string
	var depth, group int
	c := &cobra.Command{
		Use:   "tree KIND/NAME",
		Short: "Show a resource's composition tree with phases and dependencies",
		Long: `tree shows KIND/NAME and what it owns, level by level, with each
resource's phase, reason and the resources it depends on (→).

A resource with more than --group children shows them grouped by kind, with
a count of each phase, instead of one line each: a composition root of a
million children stays one screen. --group 0 lists every child.`,
		Example: `  converge tree classicbom/classic --depth 1
  converge tree classicbom/classic --depth 2 --group 0
  converge tree vpc/fd-01-team-001 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			if depth < 0 || group < 0 {
				return usageErr("--depth and --group take 0 or more")
			}
			return withResource(g, c.ErrOrStderr(), output, args[0], func(rd reader, id converge.ID) error {
				root, err := buildTree(ctx, rd, id, depth, group)
				if errors.Is(err, converge.ErrNotFound) {
					if _, gerr := rd.Resource(ctx, id); errors.Is(gerr, converge.ErrNotFound) {
						return notFound(ctx, rd, id)
					}
				}
				if err != nil {
					return err
				}
				if r, err := rd.Resource(ctx, id); err == nil {
					root.Suspended = heldBy(ctx, rd, r)
				}
				if output != "table" {
					return writeData(c.OutOrStdout(), output, root)
				}
				printTree(c.OutOrStdout(), root, "", true, true)
				return nil
			})
		},
	}
	c.Flags().IntVar(&depth, "depth", 0, "levels to show below the resource (0: all)")
	c.Flags().IntVar(&group, "group", 20, "group a resource's children by kind when it has more than this many (0: never)")
	addOutputFlag(c, &output, "table")
	return c
}

type treeNode struct {
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
	Children  []*treeNode          `json:"children,omitempty"`
	// Groups summarize the children by kind when there are more than
	// --group of them (Children is then empty).
	Groups []*treeGroup `json:"groups,omitempty"`
}

// treeGroup is one kind's children of a node: how many, in which phases.
type treeGroup struct {
	Kind   string                 `json:"kind"`
	Count  int                    `json:"count"`
	Phases map[converge.Phase]int `json:"phases"`
	// Drifted counts the children with a drift recorded.
	Drifted int `json:"drifted,omitempty"`
}

// buildTree reads id and, down to depth levels below it (0: all), what
// it owns; a node with more than group children (group > 0) gets them
// counted by kind and phase instead.
func buildTree(ctx context.Context, rd reader, id converge.ID, depth, group int) (*treeNode, error) {
	r, err := rd.Resource(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", id, err)
	}
	return buildSubtree(ctx, rd, r, depth, group)
}

func buildSubtree(ctx context.Context, rd reader, r *converge.Resource, depth, group int) (*treeNode, error) {
	id := r.ID()
	n := &treeNode{ID: id, Version: r.KindVersion, Phase: r.Phase, Reason: r.Reason, Drift: r.Drift}
	consumes, _, err := rd.EdgesOf(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, e := range consumes {
		n.DependsOn = append(n.DependsOn, e.Producer)
	}
	kids, err := rd.Resources(ctx, state.Filter{Owner: id, Head: true})
	if err != nil {
		return nil, err
	}
	if len(kids) == 0 {
		return n, nil
	}
	if group > 0 && len(kids) > group {
		byKind := map[string]*treeGroup{}
		for _, k := range kids {
			gr := byKind[k.Kind]
			if gr == nil {
				gr = &treeGroup{Kind: k.Kind, Phases: map[converge.Phase]int{}}
				byKind[k.Kind] = gr
				n.Groups = append(n.Groups, gr)
			}
			gr.Count++
			gr.Phases[k.Phase]++
			if k.Drift != nil {
				gr.Drifted++
			}
		}
		sort.Slice(n.Groups, func(i, j int) bool { return n.Groups[i].Kind < n.Groups[j].Kind })
		return n, nil
	}
	next := depth - 1
	for _, k := range kids {
		if depth == 1 {
			kn := &treeNode{ID: k.ID(), Version: k.KindVersion, Phase: k.Phase, Reason: k.Reason, Drift: k.Drift}
			consumes, _, err := rd.EdgesOf(ctx, kn.ID)
			if err != nil {
				return nil, err
			}
			for _, e := range consumes {
				kn.DependsOn = append(kn.DependsOn, e.Producer)
			}
			n.Children = append(n.Children, kn)
			continue
		}
		kn, err := buildSubtree(ctx, rd, k, max(next, 0), group)
		if err != nil {
			return nil, err
		}
		n.Children = append(n.Children, kn)
	}
	return n, nil
}

func printTree(w io.Writer, n *treeNode, prefix string, last, top bool) {
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
		printTree(w, k, prefix+indent, i == len(n.Children)-1 && len(n.Groups) == 0, false)
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
		fmt.Fprintf(w, "%s%s%s × %d: %s%s\n", prefix+indent, branch, gr.Kind, gr.Count, phaseCounts(gr.Phases), drift)
	}
}

// phaseCounts renders phase counts as "3 Ready, 1 Failed", most first.
func phaseCounts(m map[converge.Phase]int) string {
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
