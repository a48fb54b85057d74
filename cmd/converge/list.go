package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/view"
)

func newListCommand(g *globals) *cobra.Command {
	var output string
	var (
		kind    string
		phase   string
		all     bool
		limit   int
		drifted bool
	)
	c := &cobra.Command{
		Use:   "list",
		Short: "List composition roots with child counts (--all: every resource)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			if phase != "" && !validPhase(converge.Phase(phase)) {
				return usageErr("--phase %q: want one of %v", phase, converge.Phases)
			}
			rd, done, err := openReader(g, c.ErrOrStderr())
			if err != nil {
				return err
			}
			defer done()
			if kind != "" {
				if err := checkKind(ctx, rd, kind); err != nil {
					return err
				}
			}
			l, err := view.ReadList(ctx, rd, view.ListQuery{Kind: kind, Phase: converge.Phase(phase), All: all, Limit: limit,
				Drifted: drifted, Table: output == "table"})
			if err != nil {
				return err
			}
			if output != "table" {
				return l.WriteData(c.OutOrStdout(), output)
			}
			return l.WriteTable(c.OutOrStdout(), time.Now())
		},
	}
	f := c.Flags()
	f.StringVar(&kind, "kind", "", "only resources of this kind")
	f.StringVar(&phase, "phase", "", "only resources in this phase")
	f.BoolVar(&all, "all", false, "every resource, not only composition roots")
	f.IntVar(&limit, "limit", 0, "at most this many resources (0: all)")
	f.BoolVar(&drifted, "drifted", false, "only resources with a drift recorded (what a resync's observe found different from git); implies --all")
	addOutputFlag(c, &output, "table")
	return c
}

func validPhase(p converge.Phase) bool {
	for _, q := range converge.Phases {
		if p == q {
			return true
		}
	}
	return false
}
