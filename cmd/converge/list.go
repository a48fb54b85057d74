package main

import (
	"strconv"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
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
				if err := checkKind(rd, kind); err != nil {
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
			rs, err := rd.Resources(f)
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
			x, err := newRedactor(rd)
			if err != nil {
				return err
			}
			views := make([]resourceView, 0, len(rs))
			for _, r := range rs {
				v := x.view(r, nil)
				if output != "table" && x.flowsMatter(r) {
					if v, err = x.viewWithEdges(rd, r); err != nil {
						return err
					}
				}
				if !all {
					n, err := rd.ChildCount(r.ID())
					if err != nil {
						return err
					}
					v.Children = &n
				}
				views = append(views, v)
			}
			if output != "table" {
				return writeData(c.OutOrStdout(), output, map[string]any{"resources": views})
			}
			rows := [][]string{{"RESOURCE", "VERSION", "PHASE", "CHILDREN", "REASON"}}
			for _, v := range views {
				kids := "-"
				if v.Children != nil {
					kids = strconv.Itoa(*v.Children)
				}
				ph := string(v.Phase)
				if v.Drift != nil {
					ph += " (drifted)"
				}
				rows = append(rows, []string{v.Kind + "/" + v.Name, "v" + strconv.Itoa(v.KindVersion), ph, kids, orDash(v.Reason)})
			}
			return table(c.OutOrStdout(), rows)
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
