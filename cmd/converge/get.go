package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/scheduler"
)

func newGetCommand(g *globals) *cobra.Command {
	var output string
	var limit int
	c := &cobra.Command{
		Use:   "get KIND/NAME... | KIND",
		Short: "Describe a resource (phase, ages, spec, status, dependencies, events); several, or all of a kind, as a table",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			if err := checkOutput(output, "table", "wide", "json", "yaml"); err != nil {
				return err
			}
			if len(args) == 1 && !strings.Contains(args[0], "/") {
				return getKind(ctx, g, c, args[0], output, limit)
			}
			ids := make([]converge.ID, len(args))
			for i, a := range args {
				id, err := converge.ParseID(a)
				if err != nil {
					return err
				}
				ids[i] = id
			}
			rd, done, err := openReader(g, c.ErrOrStderr())
			if err != nil {
				return err
			}
			defer done()
			x, err := view.NewRedactor(ctx, rd)
			if err != nil {
				return err
			}
			views := make([]view.Get, len(ids))
			leases := make([]*converge.Lease, len(ids))
			for i, id := range ids {
				var found bool
				if views[i], leases[i], found, err = view.ReadGet(ctx, rd, x, id); err != nil {
					return err
				}
				if !found {
					return notFound(ctx, rd, id)
				}
			}
			now := time.Now()
			switch {
			case len(ids) == 1 && (output == "json" || output == "yaml"):
				return view.WriteData(c.OutOrStdout(), output, views[0])
			case output == "json" || output == "yaml":
				return view.WriteData(c.OutOrStdout(), output, map[string]any{"resources": views})
			case len(ids) == 1:
				width := view.DescribeWidth
				if output == "wide" {
					width = 0
				}
				v := views[0]
				v.Spec = scheduler.ShowKnownAfter(v.Spec, v.KnownAfter)
				return view.Describe(c.OutOrStdout(), v, leases[0], now, width)
			}
			rvs := make([]view.Resource, len(views))
			ages := make([]*time.Time, len(views))
			for i, v := range views {
				rvs[i], ages[i] = v.Resource, v.CreatedAt
			}
			return view.KindTable(c.OutOrStdout(), rvs, ages, output == "wide", now)
		},
	}
	addOutputFlag(c, &output, "table")
	c.Flags().Lookup("output").Usage = "output format: table|wide|json|yaml (wide: get KIND/NAME cuts no value; a table of several has more columns)"
	c.Flags().IntVar(&limit, "limit", 500, "get KIND: at most this many resources, in name order (0: all)")
	return c
}

// getKind prints the resources of kind, in name order, at most limit.
func getKind(ctx context.Context, g *globals, c *cobra.Command, kind, output string, limit int) error {
	rd, done, err := openReader(g, c.ErrOrStderr())
	if err != nil {
		return err
	}
	defer done()
	if err := checkKind(ctx, rd, kind); err != nil {
		return err
	}
	table := output == "table" || output == "wide"
	views, ages, more, err := view.ReadKind(ctx, rd, kind, limit, table)
	if err != nil {
		return err
	}
	if more {
		fmt.Fprintf(c.ErrOrStderr(), "note: the first %d %s resources; --limit 0 shows all\n", limit, kind)
	}
	if !table {
		return view.WriteData(c.OutOrStdout(), output, map[string]any{"resources": views})
	}
	return view.KindTable(c.OutOrStdout(), views, ages, output == "wide", time.Now())
}
