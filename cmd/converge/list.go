package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/stateapi"
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
			// The table shows no spec or status: leave them in the store
			// (a root's spec can be megabytes).
			f := state.Filter{Kind: kind, Phase: converge.Phase(phase), RootsOnly: !all, Limit: limit, Head: output == "table"}
			if drifted {
				// Drift is a leaf's: every resource is looked at, and
				// the limit counts the drifted ones.
				f.RootsOnly, f.Limit, all = false, 0, true
			}
			rs, err := rd.Resources(ctx, f)
			if err != nil {
				return err
			}
			if drifted {
				kept := rs[:0]
				for _, r := range rs {
					if r.Drift != nil && (limit <= 0 || len(kept) < limit) {
						kept = append(kept, r)
					}
				}
				rs = kept
			}
			x, err := view.NewRedactor(ctx, rd)
			if err != nil {
				return err
			}
			views := make([]view.Resource, 0, len(rs))
			for _, r := range rs {
				v := x.Resource(r, nil)
				if output != "table" && x.FlowsMatter(r) {
					if v, err = x.ResourceWithEdges(ctx, rd, r); err != nil {
						return err
					}
				}
				if !all {
					n, err := rd.ChildCount(ctx, r.ID())
					if err != nil {
						return err
					}
					v.Children = &n
				}
				views = append(views, v)
			}
			var ctl *converge.Control
			if cr, ok := rd.(stateapi.ControlReader); ok {
				ctl, _ = cr.Control(ctx) // the pin and suspensions, shown when known
			}
			if output != "table" {
				out := map[string]any{"resources": views}
				if ctl != nil && ctl.Pin != nil {
					out["pin"] = ctl.Pin
				}
				if ctl != nil && len(ctl.Suspended) > 0 {
					out["suspended"] = ctl.Suspended
				}
				return view.WriteData(c.OutOrStdout(), output, out)
			}
			// The store keeps no revision per resource: the applied
			// one heads the table.
			var applied *converge.AppliedSource
			if src, ok := rd.(interface {
				Source(ctx context.Context) (*converge.AppliedSource, error)
			}); ok {
				if s, err := src.Source(ctx); err == nil {
					applied = s
				}
			}
			created := make([]time.Time, len(rs))
			for i, r := range rs {
				created[i] = r.CreatedAt
			}
			return view.WriteList(c.OutOrStdout(), applied, ctl, views, created, time.Now())
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
