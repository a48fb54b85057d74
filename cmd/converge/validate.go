package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/repopath"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/cue"
)

// newValidateCommand builds `converge validate [DIR]`: load every document
// under DIR (default ".") from the working tree and check it. Exit 0 when
// valid, 1 when any finding, 2 when DIR cannot be read.
func newValidateCommand(g *globals) *cobra.Command {
	var (
		maxFileSize int64
		output      string
	)
	c := &cobra.Command{
		Use:   "validate [DIR]",
		Short: "Check every document of a repository directory against its kind's schema",
		Long: `Validate reads every *.cue, *.json, *.yaml and *.yml document under DIR
(default: --repo joined with --path, i.e. the current directory), compiles the kinds' CUE schemas and checks
every resource, provider config and binding. Each problem prints as
file:line:col: path: message, relative to DIR; a summary line follows.
Each resource of a kind that composes in CUE on the fast path is composed
both ways, on the fast path and by CUE's evaluator (a composition of over
2,000 children on a sample of its parts list): a difference is an error
(COMPOSE_FAST_DIFFERS).
The documents are evaluated in a child process under a budget
(--load-document-timeout, --load-memory, --load-output): a file that goes
over it is an error naming it.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			// DIR, or else --repo and --path as every other command reads
			// them (here from the working tree, not from git).
			if len(args) == 0 && !repopath.IsRemote(g.repo) {
				if err := resolveSource(ctx, g); err != nil {
					return err
				}
				if err := checkLocalPath(g); err != nil {
					return err
				}
				notePathFromState(c.ErrOrStderr(), g, "validate")
			}
			dir := documentsDir(g)
			if len(args) == 1 {
				d, err := repopath.ValidateDir(g.repo, args[0])
				if err != nil {
					return err
				}
				dir = d
			} else if repopath.IsRemote(g.repo) {
				return usageErr("validate reads a local directory; --repo %s is remote (use lint or plan)", g.repo)
			}
			out := output
			if out == "" {
				out = "text"
			}
			if out != "text" && out != "json" {
				return fmt.Errorf("output %q: want text or json", out)
			}
			st, err := os.Stat(dir)
			if err != nil {
				return fmt.Errorf("validate: %w", err)
			}
			if !st.IsDir() {
				return fmt.Errorf("validate %s: not a directory", dir)
			}
			// The documents are evaluated in a child process under
			// the load budget: any committer writes them.
			sb, err := g.sandbox()
			if err != nil {
				return err
			}
			// Each declared CUE composition on the fast path is also
			// composed by CUE's evaluator: a difference is an error.
			res, err := sb.Load(c.Context(), os.DirFS(dir), ".", cue.Options{MaxFileSize: maxFileSize, CompareCompose: true})
			if err != nil {
				return fmt.Errorf("validate: %w", err)
			}
			rep := view.Validate{Errors: res.Findings, Documents: res.Documents, Kinds: len(res.Desired.Kinds), Files: res.Files, Composers: view.ComposerPaths(res)}
			if rep.Errors == nil {
				rep.Errors = []converge.Finding{}
			}
			if err := view.WriteValidate(c.OutOrStdout(), out, rep); err != nil {
				return err
			}
			if len(rep.Errors) > 0 {
				return errFailed{errSilent}
			}
			return nil
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	c.Flags().Int64Var(&maxFileSize, "max-file-size", cue.DefaultMaxFileSize, "refuse files larger than this many bytes")
	return c
}

// plural renders "1 error", "0 errors" (converge.Plural).
func plural(n int, noun string) string { return converge.Plural(n, noun) }
