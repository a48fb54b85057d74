package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/convergehq/converge"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/forge"
)

// statusView is `converge status -o json`.
type statusView struct {
	Revision string                  `json:"revision"`
	Statuses []converge.CommitStatus `json:"statuses"`
}

func newStatusCommand(g *globals) *cobra.Command {
	var output string
	var fo forgeOptions
	c := &cobra.Command{
		Use:   "status [REV]",
		Short: "Show a commit's statuses (validate, lint, sync) from its git note",
		Long: `status prints the commit statuses converge wrote for REV (default HEAD) as a
git note under refs/notes/converge, the same JSON that
'git notes --ref converge show REV' prints. It exits 1 when a status is
failure or error, or when the commit has no statuses yet.

With --forge it also posts them as commit statuses to GitHub, Gitea/Forgejo
or GitLab (token from $CONVERGE_FORGE_TOKEN), skipping any the forge
already shows: the notes are the source of truth, the forge a copy.`,
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
			rep, err := fo.reporter(os.Getenv)
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
			if rep != nil {
				for _, s := range st {
					if err := rep.Report(c.Context(), r.Hash, fo.target(r.Hash, s)); err != nil {
						return err
					}
				}
				fmt.Fprintf(c.ErrOrStderr(), "reported %d statuses of %s to %s %s\n", len(st), r, fo.kind, fo.repo)
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
	fo.addFlags(c.Flags())
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

// forgeTokenEnv names the environment variable holding the forge token.
const forgeTokenEnv = "CONVERGE_FORGE_TOKEN"

// forgeOptions say where commit statuses are posted besides git notes.
// A command that posts while it runs (sync) calls start, publish for each
// recorded pass, and stop.
type forgeOptions struct {
	kind    string // --forge: github|gitea|gitlab, "" for none
	url     string // --forge-url
	repo    string // --forge-repo: owner/name, or a GitLab project id or path
	siteURL string // --site-url: target_url base

	pub    *forge.Publisher // set by start; nil without --forge
	cancel context.CancelFunc
	done   chan struct{} // closed when the publisher's Run returns
}

// start begins posting published statuses to the configured forge in the
// background; without --forge it does nothing.
func (o *forgeOptions) start(ctx context.Context, log *slog.Logger) error {
	rep, err := o.reporter(os.Getenv)
	if err != nil || rep == nil {
		return err
	}
	o.pub = forge.NewPublisher(rep, log)
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	o.cancel, o.done = cancel, make(chan struct{})
	go func() {
		defer close(o.done)
		o.pub.Run(runCtx)
	}()
	return nil
}

// publish queues pass's statuses for the forge and returns at once.
func (o *forgeOptions) publish(pass *gitsync.Pass) {
	if o.pub == nil || pass == nil || pass.Record == nil || pass.Revision.Dirty {
		return
	}
	for _, st := range pass.Record.Statuses {
		o.pub.Publish(pass.Revision.Hash, o.target(pass.Revision.Hash, st))
	}
}

// stop posts what is still queued, for at most forgeDrain, then stops the
// background poster. What it could not post is reported on errOut; the git
// notes keep it, and `converge status --forge …` posts it later.
func (o *forgeOptions) stop(errOut io.Writer) {
	if o.pub == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), forgeDrain)
	defer cancel()
	if err := o.pub.Flush(ctx); err != nil {
		fmt.Fprintf(errOut, "converge: forge: %v (%d statuses not posted; the git notes keep them)\n", err, o.pub.Pending())
	}
	o.cancel()
	<-o.done
}

// forgeDrain bounds how long a command waits at exit for the forge.
const forgeDrain = 30 * time.Second

func (o *forgeOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.kind, "forge", "", "also post statuses to a forge: github|gitea|gitlab (token from $"+forgeTokenEnv+")")
	f.StringVar(&o.url, "forge-url", "", "forge URL: GitHub's API root (default https://api.github.com), a Gitea or GitLab instance's web root (GitLab default https://gitlab.com)")
	f.StringVar(&o.repo, "forge-repo", "", "repository on the forge: OWNER/NAME, or a GitLab project id or path")
	f.StringVar(&o.siteURL, "site-url", "", "the status site's URL, linked from each status")
}

// reporter returns the Reporter the flags configure, or nil without
// --forge.
func (o *forgeOptions) reporter(getenv func(string) string) (forge.Reporter, error) {
	if o.kind == "" {
		return nil, nil
	}
	token := getenv(forgeTokenEnv)
	if token == "" {
		return nil, usageErr("--forge %s: set $%s to the forge token", o.kind, forgeTokenEnv)
	}
	if o.repo == "" {
		return nil, usageErr("--forge %s: --forge-repo is required", o.kind)
	}
	owner, name, ok := strings.Cut(o.repo, "/")
	ownerRepo := ok && owner != "" && name != "" && !strings.Contains(name, "/")
	switch o.kind {
	case "github", "gitea":
		if !ownerRepo {
			return nil, usageErr("--forge-repo %q: want OWNER/NAME", o.repo)
		}
		if o.kind == "github" {
			return forge.NewGitHub(o.url, owner, name, token), nil
		}
		if o.url == "" {
			return nil, usageErr("--forge gitea: --forge-url is required")
		}
		return forge.NewGitea(o.url, owner, name, token), nil
	case "gitlab":
		return forge.NewGitLab(o.url, o.repo, token), nil
	}
	return nil, usageErr("--forge %q: want github, gitea or gitlab", o.kind)
}

// target returns st with its target URL pointing at the revision's row
// on the status site, when --site-url is set and st has none.
func (o *forgeOptions) target(hash string, st converge.CommitStatus) converge.CommitStatus {
	if st.TargetURL == "" && o.siteURL != "" {
		st.TargetURL = strings.TrimRight(o.siteURL, "/") + "/#rev-" + hash
	}
	return st
}
