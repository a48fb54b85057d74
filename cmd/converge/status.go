package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	gitsync "github.com/convergehq/converge/sync"
)

// statusView is `converge status -o json`.
type statusView struct {
	Revision string                  `json:"revision"`
	Statuses []converge.CommitStatus `json:"statuses"`
}

func newStatusCommand(g *globals) *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "status [REV]",
		Short: "Show a commit's statuses (validate, lint, sync) from its git note",
		Long: `status prints the commit statuses converge wrote for REV (default HEAD) as a
git note under refs/notes/converge, the same JSON that
'git notes --ref converge show REV' prints. It exits 1 when a status is
failure or error, or when the commit has no statuses yet.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			if isRemote(g.repo) {
				return usageErr("status --repo %s: want a local repository", g.repo)
			}
			rev := "HEAD"
			if len(args) == 1 {
				rev = args[0]
			}
			src, err := gitsync.OpenLocal(g.repo, g.ref)
			if err != nil {
				return err
			}
			r, err := src.Revision(rev)
			if err != nil {
				return err
			}
			st, err := src.ReadStatuses(r.Hash)
			if errors.Is(err, gitsync.ErrNoNote) {
				return failed("%s has no statuses (not synced yet)", r)
			}
			if err != nil {
				return err
			}
			v := statusView{Revision: r.String(), Statuses: st}
			if output != "table" {
				err = writeData(c.OutOrStdout(), output, v)
			} else {
				err = printStatuses(c.OutOrStdout(), v)
			}
			if err != nil {
				return err
			}
			for _, s := range st {
				if s.State == converge.StateFailure || s.State == converge.StateError {
					return failed("%s: %s is %s", r, s.Context, s.State)
				}
			}
			return nil
		},
	}
	addOutputFlag(c, &output, "table")
	return c
}

func printStatuses(w io.Writer, v statusView) error {
	fmt.Fprintf(w, "revision %s\n", v.Revision)
	rows := [][]string{{"CONTEXT", "STATE", "DESCRIPTION", "TIME"}}
	for _, s := range v.Statuses {
		at := "-"
		if !s.Time.IsZero() {
			at = s.Time.UTC().Format("2006-01-02T15:04:05Z")
		}
		rows = append(rows, []string{s.Context, s.State, orDash(s.Description), at})
	}
	return table(w, rows)
}

// writeNotes stores pass's statuses as the git note of its revision; a
// failure is reported on errOut and does not change the command's outcome
// (the store keeps the record either way).
func writeNotes(src *gitsync.Source, pass *gitsync.Pass, errOut io.Writer) {
	if src == nil || pass == nil || pass.Record == nil || pass.Revision.Dirty {
		return
	}
	if err := src.WriteStatuses(pass.Revision.Hash, pass.Record.Statuses); err != nil {
		fmt.Fprintln(errOut, "converge:", err)
	}
}
