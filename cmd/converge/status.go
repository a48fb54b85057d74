package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/repopath"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/stateapi"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/controlplane"
	"github.com/convergehq/converge/sync/forge"
)

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

With --state etcd://… it shows the statuses the store recorded (the leading
replica writes each verdict there as well as to its own git note), with REV
resolved in the repository when there is one here, else a commit hash (or a
prefix of one) or HEAD (the applied revision).

REV BRANCH@dirty (or @dirty) shows the verdict of the newest save of the
uncommitted work tree that sync --watch checked, from the store (through
the admin API while sync --watch runs): work trees have no git notes.

With --forge it also posts them as commit statuses to GitHub, Gitea/Forgejo
or GitLab (token from $CONVERGE_FORGE_TOKEN), skipping any the forge
already shows: the notes are the source of truth, the forge a copy. With
--push-status it pushes the notes to the repository's origin.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			if err := resolveSource(ctx, g); err != nil {
				return err
			}
			rev := "HEAD"
			if len(args) == 1 {
				rev = args[0]
			}
			if ref, ok := strings.CutSuffix(rev, "@dirty"); ok {
				if fo.kind != "" || fo.push {
					return usageErr("status %s: a work tree's verdict is never reported (--forge, --push-status)", rev)
				}
				return workTreeStatus(ctx, g, ref, output, c.OutOrStdout(), c.ErrOrStderr())
			}
			if g.etcd != nil && fo.kind == "" && !fo.push {
				return storedStatus(ctx, g, rev, output, c.OutOrStdout(), c.ErrOrStderr())
			}
			// A remote repository's statuses are in its mirror in the
			// state directory, written by sync or serve.
			var dir string
			if repopath.IsRemote(g.repo) {
				var err error
				if dir, err = stateDir(g); err != nil {
					return err
				}
			}
			src, err := openSource(c.Context(), g, dir)
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
			fo.configured = g.headSettings.ForgeTimeout
			rep, err := fo.reporter(os.Getenv)
			if err != nil {
				return err
			}
			v := view.Statuses{Revision: r.String(), Statuses: st}
			if dir, err := stateDir(g); err == nil {
				if ctl, err := storedControl(ctx, g, dir); err == nil {
					v.Pin = ctl.Pin
				}
			}
			if err := view.WriteStatuses(c.OutOrStdout(), output, v); err != nil {
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
			if fo.push {
				if err := src.PushNotes(c.Context()); err != nil {
					return err
				}
			}
			return statusesFailed(r, st)
		},
	}
	addOutputFlag(c, &output, "table")
	fo.addFlags(c.Flags())
	return c
}

// storedStatus prints the statuses of rev that the etcd store recorded:
// what the leader judged, wherever it runs (its git notes are in its own
// mirror of a remote repository, not here). rev is resolved in the
// repository when there is one here, else it is a commit hash (or its
// prefix), or HEAD for the applied revision. It fails (exit 1) when a
// status is failure or error, or rev has none.
func storedStatus(ctx context.Context, g *globals, rev, output string, out, errOut io.Writer) error {
	hash := rev
	if dir, err := changeDir(g); err == nil {
		if src, err := openSource(ctx, g, dir); err == nil {
			r, err := src.Revision(rev)
			if err != nil {
				return err
			}
			hash = r.Hash
		}
	}
	st, err := controlplane.OpenEtcd(g.etcd, true, 0)
	if err != nil {
		return controlplane.OpenError(err)
	}
	defer st.Close() // read only: a failed close loses nothing
	if hash == "HEAD" {
		src, err := st.Source(ctx)
		if err != nil {
			return err
		}
		if src == nil {
			return failed("%s has applied no revision yet", g.state)
		}
		hash = src.Revision.Hash
	}
	rec, err := st.Revision(ctx, hash)
	if errors.Is(err, converge.ErrNotFound) {
		rec, err = view.RevisionByPrefix(ctx, st, hash)
	}
	if errors.Is(err, converge.ErrNotFound) {
		return failed("%s has no statuses in %s (not synced yet)", rev, g.state)
	}
	if err != nil {
		return err
	}
	v := view.Statuses{Revision: rec.Revision.String(), Statuses: rec.Statuses}
	if ctl, err := st.Control(ctx); err == nil {
		v.Pin = ctl.Pin
	}
	if a, err := etcdstate.Leader(*g.etcd); err == nil {
		fmt.Fprintf(errOut, "note: the statuses %s recorded (its leader: %s)\n", g.state, a.Name)
	}
	if err := view.WriteStatuses(out, output, v); err != nil {
		return err
	}
	return statusesFailed(rec.Revision, rec.Statuses)
}

// workTreeStatus prints the verdict of the newest work-tree pass of
// branch ref (any branch if "") that the store recorded, and fails (exit
// 1) when a status is failure or error.
func workTreeStatus(ctx context.Context, g *globals, ref, output string, out, errOut io.Writer) error {
	rd, done, err := openReader(g, errOut)
	if err != nil {
		return err
	}
	defer done()
	rv, ok := rd.(stateapi.Revisioner)
	if !ok {
		return errors.New("status: this state keeps no revision records")
	}
	recs, err := rv.Revisions(ctx, 0)
	if err != nil {
		return err
	}
	var rec *converge.RevisionRecord
	for _, r := range recs {
		if r.Revision.Dirty && (ref == "" || r.Revision.Ref == ref) {
			rec = r
			break
		}
	}
	if rec == nil {
		return failed("%s@dirty has no statuses (sync --watch checked no work tree)", ref)
	}
	v := view.Statuses{Revision: rec.Revision.String(), Statuses: rec.Statuses}
	if err := view.WriteStatuses(out, output, v); err != nil {
		return err
	}
	return statusesFailed(rec.Revision, rec.Statuses)
}

// statusesFailed is status's exit: 1 when a status of rev is failure or
// error, naming the first.
func statusesFailed(rev converge.Revision, st []converge.CommitStatus) error {
	for _, s := range st {
		if s.State == converge.StateFailure || s.State == converge.StateError {
			return failed("%s: %s is %s", rev, s.Context, s.State)
		}
	}
	return nil
}

// report stores pass's statuses as the git note of its revision and
// queues them for the forge and the notes push (controlplane.Statuses.Report),
// once start started them.
func (o *forgeOptions) report(pass *gitsync.Pass) error { return o.run.Report(pass) }

// forgeTokenEnv names the environment variable holding the forge token.
const forgeTokenEnv = "CONVERGE_FORGE_TOKEN"

// forgeOptions say where commit statuses go besides the local git notes:
// a forge's commit-status API (--forge…) and, with --push-status, the
// notes ref of the source's origin. A command that reports while it runs
// calls start, then publish for each recorded pass (or stores records
// through records), then stop.
type forgeOptions struct {
	kind    string        // --forge: github|gitea|gitlab, "" for none
	url     string        // --forge-url
	repo    string        // --forge-repo: owner/name, or a GitLab project id or path
	siteURL string        // --site-url: target_url base
	push    bool          // --push-status
	timeout time.Duration // --forge-timeout: each request to the forge (0: configured)
	// configured is forge_timeout in converge.cue (0: 30s), set by the
	// command before start or reporter.
	configured time.Duration

	// run is the status push start began; the options are copied by
	// value, the run is shared.
	run *controlplane.Statuses
}

// start begins posting to the forge and pushing notes in the background,
// as the flags say (controlplane.StartStatuses): only when the state in
// stateDir owns the repository's notes.
func (o *forgeOptions) start(ctx context.Context, src *gitsync.Source, stateDir string, log *slog.Logger) error {
	rep, err := o.reporter(os.Getenv)
	if err != nil {
		return err
	}
	o.run, err = controlplane.StartStatuses(ctx, src, stateDir, controlplane.StatusOptions{Reporter: rep, Push: o.push, SiteURL: o.siteURL, Log: log})
	return err
}

// stop drains and stops what start began (controlplane.Statuses.Stop).
func (o *forgeOptions) stop() { o.run.Stop() }

// records returns inner with every stored revision record also written
// to its commit's git note and published: serve's Syncer.Records.
func (o *forgeOptions) records(inner gitsync.Records, errOut io.Writer) gitsync.Records {
	return o.run.Records(inner, errOut)
}

func (o *forgeOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.kind, "forge", "", "also post statuses to a forge: github|gitea|gitlab (token from $"+forgeTokenEnv+")")
	f.StringVar(&o.url, "forge-url", "", "forge URL: GitHub's API root (default https://api.github.com), a Gitea or GitLab instance's web root (GitLab default https://gitlab.com)")
	f.StringVar(&o.repo, "forge-repo", "", "repository on the forge: OWNER/NAME, or a GitLab project id or path")
	f.StringVar(&o.siteURL, "site-url", "", "the status site's URL, linked from each status")
	f.DurationVar(&o.timeout, "forge-timeout", 0, "give up on a request to the forge that takes longer (default: forge_timeout in converge.cue, else 30s; each status is tried a few times, the git notes keep what was not posted)")
	f.BoolVar(&o.push, "push-status", false, "push the statuses (git notes under "+gitsync.NotesRef+") to the repository's origin, e.g. back to a remote --repo")
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
	timeout := o.timeout
	if timeout <= 0 {
		timeout = o.configured
	}
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	hc := forge.WithHTTPClient(&http.Client{Timeout: timeout})
	switch o.kind {
	case "github", "gitea":
		if !ownerRepo {
			return nil, usageErr("--forge-repo %q: want OWNER/NAME", o.repo)
		}
		if o.kind == "github" {
			return forge.NewGitHub(o.url, owner, name, token, hc), nil
		}
		if o.url == "" {
			return nil, usageErr("--forge gitea: --forge-url is required")
		}
		return forge.NewGitea(o.url, owner, name, token, hc), nil
	case "gitlab":
		return forge.NewGitLab(o.url, o.repo, token, hc), nil
	}
	return nil, usageErr("--forge %q: want github, gitea or gitlab", o.kind)
}

// target returns st with its target URL pointing at the revision's row
// on the status site, when --site-url is set and st has none.
func (o *forgeOptions) target(hash string, st converge.CommitStatus) converge.CommitStatus {
	return forge.Target(o.siteURL, hash, st)
}
