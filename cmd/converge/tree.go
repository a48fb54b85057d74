package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/view"
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
				root, err := view.ReadTree(ctx, rd, id, depth, group)
				if errors.Is(err, converge.ErrNotFound) {
					if _, gerr := rd.Resource(ctx, id); errors.Is(gerr, converge.ErrNotFound) {
						return notFound(ctx, rd, id)
					}
				}
				if err != nil {
					return err
				}
				if r, err := rd.Resource(ctx, id); err == nil {
					root.Suspended = view.HeldBy(ctx, rd, r)
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
