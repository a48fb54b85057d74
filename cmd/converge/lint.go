package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge/cmd/converge/internal/repopath"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	gitsync "github.com/convergehq/converge/sync"
)

// newLintCommand builds `converge lint --base REV --head REV`: lint every
// first-parent commit of base..head against its first parent, and the
// range as a whole. Exit 1 when any commit (or the range) has a breaking
// change or invalid documents, 0 when every change is additive, 2 on a
// usage or repository error.
func newLintCommand(g *globals) *cobra.Command {
	var base, head, output string
	c := &cobra.Command{
		Use:   "lint --base REV --head REV",
		Short: "Refuse breaking kind schema changes in a range of commits",
		Long: `Lint compares the kinds of every first-parent commit in base..head (as
git rev-list --first-parent lists them) with its parent's, and head's with
those of the first commit's parent (base, or where a branch behind base forked). For the same (kind, kind_version), a removed field, an optional field
made required, a new required field, a changed type or default, a narrowed
constraint or list element, a closed struct, and a removed kind_version are
breaking: ship such a change as a new kind_version. A commit whose documents
are invalid gets its validation errors as findings too.

Documents are read from the commits' trees (below --path), never from a
checkout. Output: text (file:line:col: RULE: message, grouped per commit),
json, or github (workflow annotations; files relative to the repository
root).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			if err := checkOutput(output, "text", "json", "github"); err != nil {
				return err
			}
			if base == "" {
				return usageErr("lint: --base is required")
			}
			if repopath.IsRemote(g.repo) {
				return usageErr("lint %s: lint reads a local repository (clone it and pass its path)", g.repo)
			}
			// The repository, path and state every command resolves alike.
			if err := resolveSource(ctx, g); err != nil {
				return err
			}
			if err := checkLocalPath(g); err != nil {
				return err
			}
			notePathFromState(c.ErrOrStderr(), g, "lint")
			src, err := gitsync.OpenLocal(g.repo, g.ref)
			if err != nil {
				return fmt.Errorf("lint: %w", err)
			}
			sb, err := g.sandbox()
			if err != nil {
				return err
			}
			groups, n, err := gitsync.LintRange(c.Context(), sb, src, g.path, base, head)
			if err != nil {
				return fmt.Errorf("lint: %w", err)
			}
			if err := view.WriteLint(c.OutOrStdout(), output, g.path, groups, n); err != nil {
				return err
			}
			for _, gr := range groups {
				if len(gr.Findings) > 0 {
					return errFailed{errSilent}
				}
			}
			return nil
		},
	}
	c.Flags().StringVar(&base, "base", "", "the revision the range starts after (e.g. origin/main)")
	c.Flags().StringVar(&head, "head", "HEAD", "the newest revision of the range")
	c.Flags().StringVarP(&output, "output", "o", "text", "output format: text|json|github")
	c.Flags().StringVar(&output, "format", "text", "the same as --output")
	c.Flags().MarkHidden("format")
	return c
}
