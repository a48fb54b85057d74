package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/builtin"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/stateapi"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/controlplane"
	"github.com/convergehq/converge/sync/forge"
)

// planOptions are plan's flags.
type planOptions struct {
	output   string
	rev      string
	workTree bool
	// exitCode: exit 1 when the plan has changes; detailed: exit 0 no
	// changes, 2 changes, 1 invalid, breaking, held or any error
	// (terraform plan -detailed-exitcode).
	exitCode, detailed bool
	maxDetail          int
	all                bool
	// refresh observes every stored resource and shows its drift.
	refresh bool
	// base and head plan a pull request: head against the graph base's
	// documents and dry-run composes make (no store); pr posts the plan
	// as that pull request's comment on the forge.
	base, head string
	pr         int
	forge      forgeOptions
}

func newPlanCommand(g *globals) *cobra.Command {
	var o planOptions
	c := &cobra.Command{
		Use:   "plan",
		Short: "Show what syncing a revision would create, update, flip, delete and prune, changing nothing",
		Long: `plan diffs a revision's documents against the stored state and dry-runs
the compose of every composer the revision creates or changes, listing the
children the recompose would create, update and prune ("composed by" and
"pruned by" the composer). The dry runs go to the workers of the converge
daemon holding the state, or else to the workers a local repository
declares, started for the plan; a remote repository's are never started.
The prune guard and the change limit are applied to the sum, as sync
applies them.

Every changed field shows its old and new value (~ cidr: "10.0.0.0/24" →
"10.1.0.0/24"), a created resource its spec (+), a deleted or pruned one
what goes (-); a secret field shows (secret) only. Identical changes are
grouped ("1,176 vpc (vpc/v1, composed by classicbom/classic)"), with counts
per kind and per row of the composer's spec (a BOM's domains and teams);
the teardown of what is deleted is listed in the order it runs, each
resource's finalizer named. Beyond --max-detail groups only their lines
are shown: --all shows everything.

Exit codes: 0 whatever the plan (1 invalid, 2 an environment error); with
--detailed-exitcode, as terraform plan -detailed-exitcode: 0 no changes,
2 changes, 1 invalid, breaking, held or an error; with --exit-code, 1 when
the plan has changes.

With --refresh, every stored resource whose kind declares the observe
reaction is observed through the same workers, changing nothing, and the
drift found (the fields that differ from git, never their values; an
object gone or without converge's mark) is listed beside the git changes,
with what a sync would do about it (heal, or leave it under drift_policy
report).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkOutput(o.output, "table", "json", "yaml", "markdown"); err != nil {
				return err
			}
			if o.workTree && o.rev != "" {
				return usageErr("plan: --work-tree and --rev name two revisions; give one")
			}
			if o.head != "" && o.base == "" {
				return usageErr("plan: --head needs --base (the pull request's target)")
			}
			if o.base != "" && (o.workTree || o.rev != "") {
				return usageErr("plan: --base plans --head against it; drop --rev and --work-tree")
			}
			if o.pr > 0 && (o.base == "" || o.forge.kind == "") {
				return usageErr("plan: --comment needs --base and --forge (with --forge-repo, the token in $%s)", forgeTokenEnv)
			}
			if o.maxDetail < 0 {
				return usageErr("plan: --max-detail %d is negative", o.maxDetail)
			}
			err := runPlan(c.Context(), c.OutOrStdout(), c.ErrOrStderr(), g, o)
			if o.detailed && err != nil && !errors.As(err, new(errExit)) {
				return errExit{code: exitFailed, err: err}
			}
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&o.rev, "rev", "", "revision to plan (default: the head of the followed branch)")
	f.BoolVar(&o.workTree, "work-tree", false, "plan the uncommitted documents of the work tree, as sync --watch applies them")
	f.BoolVar(&o.exitCode, "exit-code", false, "exit 1 when the plan has changes")
	f.BoolVar(&o.refresh, "refresh", false, "also observe every stored resource through the workers and show its drift from git (changes nothing)")
	f.BoolVar(&o.detailed, "detailed-exitcode", false, "exit 0 with no changes, 2 with changes, 1 when invalid, breaking or held (terraform's -detailed-exitcode)")
	f.IntVar(&o.maxDetail, "max-detail", 30, "show the fields of at most this many groups of changes (0: all)")
	f.StringVar(&o.base, "base", "", "plan a pull request: its target revision, whose graph is built from its documents and dry-run composes (no store needed)")
	f.StringVar(&o.head, "head", "", "with --base: the pull request's revision (default HEAD)")
	f.IntVar(&o.pr, "comment", 0, "with --base and --forge: post the plan as pull request (GitLab: merge request) N's comment, updating the one posted before")
	f.StringVar(&o.forge.kind, "forge", "", "with --comment: github|gitea|gitlab (token from $"+forgeTokenEnv+")")
	f.StringVar(&o.forge.url, "forge-url", "", "forge URL: GitHub's API root (default https://api.github.com), a Gitea or GitLab instance's web root")
	f.StringVar(&o.forge.repo, "forge-repo", "", "repository on the forge: OWNER/NAME, or a GitLab project id or path")
	f.DurationVar(&o.forge.timeout, "forge-timeout", 0, "give up on a request to the forge that takes longer (default 30s)")
	f.BoolVar(&o.all, "all", false, "show every change and teardown step in full (--max-detail 0)")
	addOutputFlag(c, &o.output, "table")
	return c
}

func runPlan(ctx context.Context, out, errOut io.Writer, g *globals, o planOptions) error {
	if err := resolveSource(ctx, g); err != nil {
		return err
	}
	dir, err := stateDir(g)
	if err != nil {
		return err
	}
	src, err := openSource(ctx, g, dir)
	if err != nil {
		return err
	}
	syncer := &gitsync.Syncer{Source: src, Path: g.path}
	setTimeouts(g, nil, syncer, g.headSettings)
	var pass, basePass *gitsync.Pass
	switch {
	case o.base != "":
		head := o.head
		if head == "" {
			head = "HEAD"
		}
		var br, hr converge.Revision
		if br, err = src.Revision(o.base); err != nil {
			return err
		}
		if hr, err = src.Revision(head); err != nil {
			return err
		}
		if basePass, err = syncer.CheckContext(ctx, br); err != nil {
			return err
		}
		if !basePass.Valid() {
			return failed("base revision %s is invalid (%s): plan against a valid base", br, plural(len(basePass.Record.Errors), "error"))
		}
		pass, err = syncer.CheckContext(ctx, hr)
	case o.workTree:
		pass, err = syncer.CheckWorkTree(ctx)
	default:
		var r converge.Revision
		if o.rev == "" {
			noteUncommitted(errOut, src, g.path, "plan")
			r, err = src.Head()
		} else {
			r, err = src.Revision(o.rev)
		}
		if err != nil {
			return err
		}
		pass, err = syncer.CheckContext(ctx, r)
	}
	if err != nil {
		return err
	}
	r := pass.Revision
	if !pass.Valid() {
		for _, f := range pass.Record.Errors {
			fmt.Fprintln(errOut, f)
		}
		return failed("revision %s is invalid (%d errors)", r, len(pass.Record.Errors))
	}
	d := pass.Loaded.Desired
	// The dry runs' workers are started once, for the base and the head.
	var compose scheduler.ComposeFunc
	stop := func() {}
	defer func() { stop() }()
	var admin *stateapi.Client
	composer := func() (scheduler.ComposeFunc, error) {
		if compose == nil {
			compose, stop, err = planComposer(ctx, admin, src, d.Settings.Workers)
		}
		return compose, err
	}
	po := gitsync.PlanOptions{Base: basePass, Composer: composer, Lint: lintFunc(), OverrideBy: syncer.ChangeOverride(r)}
	if basePass == nil {
		if po.Stored, admin, err = planSnapshot(ctx, g, dir); err != nil {
			return err
		}
	}
	rv, snap, p, err := gitsync.Plan(ctx, pass, po)
	if errors.Is(err, gitsync.ErrBaseUnknown) {
		return failed("%w", err)
	}
	if err != nil {
		return err
	}
	var refresh *view.Refresh
	if o.refresh {
		if refresh, err = planRefresh(ctx, admin, src, d.Settings.Workers, snap); err != nil {
			return err
		}
	}
	if o.output == "markdown" || o.pr > 0 {
		if err := planComment(ctx, out, errOut, o, rv, basePass, r); err != nil {
			return err
		}
	} else if o.output != "table" {
		data := view.PlanOf(rv)
		data.Refresh = refresh
		if err := view.WriteData(out, o.output, data); err != nil {
			return err
		}
	} else {
		max := o.maxDetail
		if o.all {
			max = 0
		}
		rv.WriteText(out, gitsync.TextOptions{MaxDetail: max, Flag: "plan --all"})
		view.WriteRefresh(out, refresh)
	}
	changes := !p.Empty() || view.RefreshChanges(refresh)
	switch {
	case o.detailed && len(rv.Breaking) > 0:
		return errExit{code: exitFailed, err: fmt.Errorf("plan has %d breaking changes", len(rv.Breaking))}
	case o.detailed && rv.Held != "":
		return errExit{code: exitFailed, err: fmt.Errorf("sync would not apply %s: %s", r, rv.Held)}
	case o.detailed && changes:
		return errExit{code: exitChanges, err: errSilent}
	case o.exitCode && changes:
		return failed("plan has changes")
	}
	return nil
}

// loadSnapshot reads the whole stored state: from the store, or from the
// admin API of the converge holding it. An absent store is empty.
func loadSnapshot(ctx context.Context, dir string) (*converge.Snapshot, error) {
	if ok, err := stateFileExists(dir); err != nil || !ok {
		return &converge.Snapshot{}, err
	}
	st, err := state.Open(dir, state.Options{LockTimeout: 200 * time.Millisecond})
	if errors.Is(err, state.ErrLocked) {
		c, cerr := dialAdmin(dir)
		if cerr != nil {
			return nil, fmt.Errorf("open state: %w (a running converge holds it)", err)
		}
		return c.Snapshot(ctx)
	}
	if err != nil {
		return nil, controlplane.OpenError(err)
	}
	defer st.Close() // read only: a failed close loses nothing
	return st.Load(ctx)
}

// lintFunc returns the breaking-change linter plan and rollback use (the
// engine's syncers, controlplane.Engine.Syncer, use the same).
func lintFunc() gitsync.LintFunc { return cue.LintTrees }

// planSnapshot reads the whole stored state like loadSnapshot, and
// returns the admin API client when a running converge holds the state.
func planSnapshot(ctx context.Context, g *globals, dir string) (*converge.Snapshot, *stateapi.Client, error) {
	if g.etcd != nil {
		// etcd serves readers beside the writer: no daemon to ask.
		st, err := controlplane.OpenEtcd(g.etcd, true, 0)
		if err != nil {
			return nil, nil, controlplane.OpenError(err)
		}
		defer st.Close() // read only: a failed close loses nothing
		snap, err := st.Load(ctx)
		return snap, nil, err
	}
	if ok, _ := stateFileExists(dir); ok {
		if c, err := dialAdmin(dir); err == nil {
			snap, err := c.Snapshot(ctx)
			return snap, c, err
		}
	}
	snap, err := loadSnapshot(ctx, dir)
	return snap, nil, err
}

// planComposer returns where plan's dry-run composes go: the workers of
// the daemon holding the state, or else those a local repository
// declares, started until stop. A remote repository's are never started.
func planComposer(ctx context.Context, admin *stateapi.Client, src *gitsync.Source, workers []converge.WorkerSpec) (scheduler.ComposeFunc, func(), error) {
	if admin != nil {
		return admin.DryCompose, func() {}, nil
	}
	if src.Remote() || len(workers) == 0 {
		why := "the repository declares no workers"
		if src.Remote() {
			why = "plan starts no worker for a remote repository"
		}
		return func(context.Context, *converge.Task) (*converge.Result, error) {
			return nil, fmt.Errorf("no worker: %s", why)
		}, func() {}, nil
	}
	// A worker service that fails before the workers connect shows as
	// dry runs with no answer, which hold the revision.
	srv, stop, err := controlplane.StartWorkersAlone(ctx, src.Root(), workers, builtin.Env)
	if err != nil {
		return nil, nil, err
	}
	return scheduler.DryRunner(srv), stop, nil
}

// planComment prints (-o markdown) or posts (--comment N) the plan as a
// pull request's comment: the summary, blast radius and breaking changes,
// the detail folded and cut to the forge's limit.
func planComment(ctx context.Context, out, errOut io.Writer, o planOptions, rv *gitsync.Review, base *gitsync.Pass, head converge.Revision) error {
	baseName := "the stored state"
	if base != nil {
		baseName = base.Revision.String()
	}
	var detail bytes.Buffer
	rv.WriteText(&detail, gitsync.TextOptions{MaxDetail: 0, Flag: "plan --all"})
	max := forge.MaxCommentGitHub
	var c forge.Commenter
	if o.pr > 0 {
		rep, err := o.forge.reporter(os.Getenv)
		if err != nil {
			return err
		}
		var ok bool
		if c, ok = rep.(forge.Commenter); !ok {
			return usageErr("plan --comment: --forge %s keeps no comments", o.forge.kind)
		}
		max = c.MaxBody()
	}
	body := forge.FitComment(rv.MarkdownHead(forge.Marker, baseName, head.String()), detail.String(), max)
	if c == nil {
		_, err := io.WriteString(out, body)
		return err
	}
	id, created, err := c.Upsert(ctx, o.pr, body)
	if err != nil {
		return err
	}
	verb := "updated"
	if created {
		verb = "posted"
	}
	fmt.Fprintf(errOut, "%s the plan as comment %d on %s %s #%d\n", verb, id, o.forge.kind, o.forge.repo, o.pr)
	rv.WriteText(out, gitsync.TextOptions{MaxDetail: o.maxDetail, Flag: "plan --all"})
	return nil
}
