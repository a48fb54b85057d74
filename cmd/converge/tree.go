package main

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/view"
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
					return view.WriteData(c.OutOrStdout(), output, root)
				}
				view.WriteTree(c.OutOrStdout(), root)
				return nil
			})
		},
	}
	c.Flags().IntVar(&depth, "depth", 0, "levels to show below the resource (0: all)")
	c.Flags().IntVar(&group, "group", 20, "group a resource's children by kind when it has more than this many (0: never)")
	addOutputFlag(c, &output, "table")
	return c
}

// buildTree reads id and, down to depth levels below it (0: all), what
// it owns; a node with more than group children (group > 0) gets them
// counted by kind and phase instead.
func buildTree(ctx context.Context, rd reader, id converge.ID, depth, group int) (*view.TreeNode, error) {
	r, err := rd.Resource(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", id, err)
	}
	return buildSubtree(ctx, rd, r, depth, group)
}

func buildSubtree(ctx context.Context, rd reader, r *converge.Resource, depth, group int) (*view.TreeNode, error) {
	id := r.ID()
	n := &view.TreeNode{ID: id, Version: r.KindVersion, Phase: r.Phase, Reason: r.Reason, Drift: r.Drift}
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
		byKind := map[string]*view.TreeGroup{}
		for _, k := range kids {
			gr := byKind[k.Kind]
			if gr == nil {
				gr = &view.TreeGroup{Kind: k.Kind, Phases: map[converge.Phase]int{}}
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
			kn := &view.TreeNode{ID: k.ID(), Version: k.KindVersion, Phase: k.Phase, Reason: k.Reason, Drift: k.Drift}
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
