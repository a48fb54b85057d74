package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/builtin"
	"github.com/convergehq/converge/cmd/converge/internal/repopath"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/controlplane"
)

type syncOptions struct {
	watch        bool
	startWorkers []string
	timeout      time.Duration
	// deadline is when --timeout runs out: it covers the whole command
	// (fetch, load, apply and the wait), not only the wait. Zero in
	// --watch mode, where each save's wait gets --timeout of its own.
	deadline time.Time
	grace    time.Duration
	verbose  bool
	forge    forgeOptions // --forge…: also post statuses to a forge
	output   string       // -o: table (lines as it goes), json or yaml (one report at the end)
	// overrideChangeLimit applies the revision past the change limit,
	// recorded in its verdict.
	overrideChangeLimit bool
	signatures          signatureOptions
}

func newSyncCommand(g *globals) *cobra.Command {
	var o syncOptions
	c := &cobra.Command{
		Use:   "sync",
		Short: "Apply the repository's newest revision and run until it has converged",
		Long: `sync reads the documents at the head of the followed branch (through git,
not the working tree), validates them, applies them to the store, starts the
worker processes the repository declares, and runs until every resource is
Ready (exit 0), nothing can progress (exit 1, naming what is stuck and why),
or --timeout passes (exit 1, with what is still pending).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runSync(c.Context(), c, g, o) },
	}
	addSyncFlags(c, g, &o)
	return c
}

// addSyncFlags adds sync's flags to c (sync, rollback).
func addSyncFlags(c *cobra.Command, g *globals, o *syncOptions) {
	f := c.Flags()
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	f.DurationVar(&o.grace, "stuck-grace", 2*time.Second, "how long nothing must progress before sync gives up")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "also log the engine's info and debug messages and the workers' output (warnings and errors always show)")
	f.StringSliceVar(&o.startWorkers, "start-worker", nil, "also start a worker from local configuration: a builtin NAME[:REPLICAS], or NAME=COMMAND (a worker binary, its path relative to the current directory); the only workers started for a remote --repo")
	f.BoolVar(&o.watch, "watch", false, "dev mode: keep running and re-apply the uncommitted work tree on every save")
	f.BoolVar(&o.overrideChangeLimit, "override-change-limit", false, "apply the revision even when it changes more resources than change_limit in converge.cue allows; the verdict records the override (a commit can ask for it with the trailer \"Converge-Override: change-limit\")")
	o.forge.addFlags(f)
	o.signatures.addFlags(f)
	addReinitFlag(f, g)
	f.StringVarP(&o.output, "output", "o", "table", "output format: table|json|yaml (json and yaml print one report when sync ends; the progress goes to stderr)")
}

// addReinitFlag adds --reinit-state to f (sync and serve).
func addReinitFlag(f *pflag.FlagSet, g *globals) {
	f.BoolVar(&g.reinitState, "reinit-state", false, "when state.db exists but is empty or damaged, move it aside (state.db.damaged-TIME) and start a fresh store: every resource is created again (without it such a file is an error; only a missing file starts fresh)")
}

func runSync(ctx context.Context, c *cobra.Command, g *globals, o syncOptions) (err error) {
	out, errOut := c.OutOrStdout(), c.ErrOrStderr()
	if err := checkOutput(o.output, "table", "json", "yaml"); err != nil {
		return err
	}
	var rep *view.SyncReport
	if o.output != "table" {
		if o.watch {
			return usageErr("sync --watch prints as it goes: -o %s needs a sync that ends", o.output)
		}
		// The lines a person reads go to stderr; stdout gets the report.
		rep = &view.SyncReport{Errors: []string{}, NotReady: []view.NotReadyGroup{}}
		stdout := out
		out = errOut
		defer func() {
			if werr := view.WriteData(stdout, o.output, rep); werr != nil && err == nil {
				err = werr
			}
		}()
	} else if g.logFormat == "json" {
		// Every line is JSON, the report's as the logs'.
		out = view.NewJSONLines(out)
	}
	if !o.watch {
		o.deadline = time.Now().Add(o.timeout)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, o.deadline)
		defer cancel()
		defer func() {
			// The deadline cut a step short (a fetch, a load): that is
			// the timeout the user set, exit 1, not an environment error.
			// (A step's own timer at the same deadline may fire a hair
			// before ctx's: the clock says it too.)
			if err != nil && (ctx.Err() == context.DeadlineExceeded || !time.Now().Before(o.deadline)) && !errors.As(err, new(errFailed)) {
				err = failed("timed out: --timeout %v ran out before the sync finished (%v)", o.timeout, err)
			}
		}()
	}
	if err := resolveSource(ctx, g); err != nil {
		return err
	}
	dir, err := stateDir(g)
	if err != nil {
		return err
	}
	policy, err := o.signatures.policy()
	if err != nil {
		return err
	}
	if policy != nil && o.watch {
		return usageErr("sync --watch applies the uncommitted work tree, which is not signed: drop --allowed-signers and --trusted-keys, or sync without --watch")
	}
	if o.watch && repopath.IsRemote(g.repo) {
		return usageErr("sync --watch watches a local work tree; --repo %s is remote", g.repo)
	}
	src, err := openSource(ctx, g, dir)
	if err != nil {
		return err
	}
	extra, err := builtin.ParseStartWorkers(o.startWorkers)
	if err != nil {
		return err
	}
	log := g.logger(errOut, o.verbose)
	o.forge.configured = g.headSettings.ForgeTimeout
	if err := o.forge.start(ctx, src, dir, log); err != nil {
		return err
	}
	defer o.forge.stop()
	// One set of options makes the syncer that checks the revision
	// before the engine starts (it starts the workers the revision
	// declares) and the one the engine applies it with.
	so := controlplane.SyncerOptions{Source: src, Path: g.path, Log: log, Signatures: policy}
	if o.overrideChangeLimit {
		so.OverrideChangeLimit, so.OverrideBy = true, "sync --override-change-limit (user "+currentUser()+")"
	}
	so.LoadTimeout, so.Sandbox = loadBudget(g, g.headSettings)
	// The pin is read before the store is held (a damaged store,
	// --reinit-state, or another command holding the lock: read as no
	// pin); it is checked again once the engine holds the store.
	ctl, err := storedControl(ctx, g, dir)
	if err != nil {
		ctl = &converge.Control{}
	}
	if ctl.Pin != nil && o.watch {
		return usageErr("sync --watch applies the work tree, but %s is pinned (converge rollback): converge unpin first", ctl.Pin.Revision)
	}
	rev, pinned, err := gitsync.Target(src, ctl)
	if err != nil {
		return err
	}
	if pinned {
		fmt.Fprintf(errOut, "pinned: %s (by %s); converge unpin follows %s again\n", rev, ctl.Pin.By, src.Ref())
	}
	if !o.watch {
		noteUncommitted(errOut, src, g.path, "sync")
		if total, ok := standing(ctx, g, dir, rev); ok {
			if rep != nil {
				rep.Revision, rep.Verdict = rev.String(), "already_applied"
				rep.Applied, rep.Counts = &view.AppliedCounts{}, &converge.Counts{Total: total, Ready: total}
			}
			fmt.Fprintf(out, "revision %s: already applied\n", rev)
			fmt.Fprintf(out, "converged: %d/%d Ready; nothing to do\n", total, total)
			return nil
		}
	}
	if !o.watch {
		// A daemon holds the state: it applies, this sync waits for its
		// verdict (instead of failing on the store's lock).
		d, err := findDaemon(ctx, g, dir, true, errOut)
		if err != nil {
			return err
		}
		if d != nil {
			defer d.done()
			return syncThroughDaemon(ctx, out, errOut, g, d, rev, o, rep)
		}
	}
	pass, err := so.Checker().CheckContext(ctx, rev)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "revision %s: %s, %s\n", rev, plural(pass.Loaded.Documents, "document"), plural(len(pass.Loaded.Desired.Kinds), "kind"))
	if rep != nil {
		rep.Revision = rev.String()
	}
	if !pass.Valid() {
		for _, f := range pass.Record.Errors {
			fmt.Fprintln(errOut, f)
			if rep != nil {
				rep.Errors = append(rep.Errors, f.String())
			}
		}
		if rep != nil {
			rep.Verdict = "invalid"
		}
		// Record the verdict without starting anything.
		var writes lastWrites
		if err := recordOnly(ctx, g, dir, pass); errors.Is(err, state.ErrLocked) {
			fmt.Fprintln(errOut, "note: the verdict is not in the store: another converge holds it")
		} else {
			writes.add("record the verdict in the store", err)
		}
		writes.add("", o.forge.report(pass))
		return writes.join(failed("revision %s is invalid (%s); nothing applied", rev, plural(len(pass.Record.Errors), "error")))
	}
	// A local repository is trusted to name its workers; a remote one never
	// makes converge start a command.
	workers := extra
	if !src.Remote() {
		workers = append(workers, pass.Loaded.Desired.Settings.Workers...)
	}
	e, err := startEngine(ctx, controlplane.Options{
		StateDir: dir, Etcd: g.etcd, RepoDir: src.Root(), Workers: workers, Log: log, WrapStore: g.wrapStore,
		Reinit: g.reinitState,
		// A sync that ends at convergence does not start the loaded
		// rows' overdue resyncs (a daemon, --watch included, does).
		Scheduler: scheduler.Config{PostponeLoadedResyncs: !o.watch},
	})
	if err != nil {
		return err
	}
	var writes lastWrites
	defer func() {
		// The engine's close is its last flush and the store's close:
		// a failure there is a write this sync lost.
		writes.add("close engine", e.Close())
		err = writes.join(err)
	}()
	if now, err := e.Store().Control(ctx); err != nil {
		return err
	} else if pinnedHash(now) != pinnedHash(ctl) {
		return failed("sync: the pin changed while sync started (converge rollback or unpin ran): run sync again")
	}
	syncer := e.Syncer(so)
	if err := syncer.Apply(ctx, pass); err != nil {
		return err
	}
	if pass.Held != "" {
		for _, f := range pass.Record.Findings {
			fmt.Fprintln(errOut, f)
		}
		if rep != nil {
			rep.Verdict, rep.Held = "held", pass.Held
		}
		writes.add("", o.forge.report(pass))
		return failed("revision %s not applied: %s", rev, pass.Held)
	}
	if ov := pass.Record.Override; ov != "" {
		fmt.Fprintf(errOut, "note: %s\n", ov)
		if rep != nil {
			rep.Override = ov
		}
	}
	// converge/sync pending until finishSync; a failure here is told
	// now, and the last report decides.
	if err := o.forge.report(pass); err != nil {
		fmt.Fprintln(errOut, "converge:", err)
	}
	// On an empty store nothing was priced (no dry run): what was
	// created is counted once the revision settles.
	if !pass.Fresh {
		reportApplied(e, pass, out, errOut, rep, "applied")
	}
	start := time.Now()
	res := waitSettled(ctx, e, out, o)
	for _, w := range gitsync.UnservedVerbs(pass.Loaded.Desired.Kinds, e.Server().Serves) {
		fmt.Fprintln(errOut, "warning:", w)
	}
	if pass.Fresh {
		reportApplied(e, pass, out, errOut, rep, "applied")
	}
	err = finishSync(e, syncer, pass, res, time.Since(start), out, errOut, howToStartWorker(src.Remote(), false), rep)
	writes.add("", o.forge.report(pass))
	if !o.watch {
		return err
	}
	if err != nil {
		// dev mode goes on: the next save may fix it.
		fmt.Fprintln(errOut, "converge:", err)
	}
	return watchWorkTree(ctx, e, syncer, o, out, errOut)
}

// syncThroughDaemon is sync while a converge serve holds the state: it
// asks the daemon to fetch and apply now (the admin API's reconcile) and
// waits for the verdict of rev, the head this sync read. It refuses when
// the daemon follows another repository or path (its applied source), or
// answers with another head (it follows a remote or another branch),
// and when what holds the state is another sync.
func syncThroughDaemon(ctx context.Context, out, errOut io.Writer, g *globals, d *daemon, rev converge.Revision, o syncOptions, rep *view.SyncReport) error {
	cl := d.api
	if src, err := cl.Source(ctx); err == nil && src != nil && (!repopath.SameRepo(g.repo, src) || src.Path != g.path) {
		return usageErr("sync: the converge serve holding the state follows %s (path %q), not %s (path %q): sync there, or stop it",
			src.Repo, src.Path, g.repo, g.path)
	}
	wctx, cancel := context.WithTimeout(ctx, o.timeout) // ctx carries the command's deadline too
	defer cancel()
	r, err := cl.Reconcile(wctx, "")
	if err != nil {
		return usageErr("sync: another converge holds the state and cannot apply for this one: %v", err)
	}
	if r.Hash != rev.Hash {
		return usageErr("sync: the converge serve holding the state follows %s, not this repository's head %s: push, or wait for its poll", r.Revision, rev)
	}
	fmt.Fprintf(errOut, "a converge serve holds the state: it applied %s; waiting for its verdict\n", rev)
	start := time.Now()
	err = awaitVerdict(wctx, out, d.rd, rev.String(), rev.Hash)
	if rep != nil {
		rep.Revision, rep.Seconds = rev.String(), time.Since(start).Seconds()
		switch {
		case err == nil:
			rep.Verdict = "converged"
		case errors.As(err, new(errFailed)):
			rep.Verdict = "failed"
			rep.Errors = append(rep.Errors, err.Error())
		default:
			rep.Verdict = "timed_out"
			rep.Errors = append(rep.Errors, err.Error())
		}
	}
	return err
}

// watchWorkTree is dev mode: on every save below the work tree's --path it
// validates the uncommitted documents and, when they are valid, applies
// them (labelled as a dirty revision) and waits for them to settle.
func watchWorkTree(ctx context.Context, e *controlplane.Engine, syncer *gitsync.Syncer, o syncOptions, out, errOut io.Writer) error {
	dir := filepath.Join(syncer.Source.Root(), filepath.FromSlash(syncer.Path))
	fmt.Fprintf(out, "watching %s (dev mode: uncommitted changes are applied as %s@dirty; Ctrl+C stops)\n", dir, syncer.Source.Ref())
	err := gitsync.WatchTree(ctx, dir, 300*time.Millisecond, func() {
		pass, err := syncer.CheckWorkTree(ctx)
		if err != nil {
			fmt.Fprintln(errOut, "converge:", err)
			return
		}
		if !pass.Valid() {
			for _, f := range pass.Record.Errors {
				fmt.Fprintln(errOut, f)
			}
			fmt.Fprintf(errOut, "work tree invalid (%s); nothing applied\n", plural(len(pass.Record.Errors), "error"))
			// Every save gets a verdict in the store, as every commit
			// does: `converge status @dirty` shows it.
			if err := syncer.Records.PutRevision(ctx, pass.Record); err != nil {
				fmt.Fprintln(errOut, "converge:", err)
			}
			return
		}
		if err := syncer.Apply(ctx, pass); err != nil {
			fmt.Fprintln(errOut, "converge:", err)
			return
		}
		if pass.Held != "" {
			fmt.Fprintf(errOut, "work tree not applied: %s\n", pass.Held)
			return
		}
		p := pass.Plan
		if p.Empty() {
			// The first look, or a save that changed nothing: nothing
			// to wait for, and no verdict left pending.
			if err := syncer.SetSyncStatus(ctx, pass, converge.StateSuccess, "no changes"); err != nil {
				fmt.Fprintln(errOut, "converge:", err)
			}
			return
		}
		reportApplied(e, pass, out, errOut, nil, "applied work tree")
		start := time.Now()
		res := waitSettled(ctx, e, out, o)
		if err := finishSync(e, syncer, pass, res, time.Since(start), out, errOut, howToStartWorker(syncer.Source.Remote(), false), nil); err != nil {
			fmt.Fprintln(errOut, "converge:", err)
		}
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// currentUser names who runs converge, for a recorded override.
func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "uid " + strconv.Itoa(os.Getuid())
}

// reportApplied prints what pass applied, in plan's words and counts
// (gitsync.Pass.AppliedSummary), and puts it in rep.
func reportApplied(e *controlplane.Engine, pass *gitsync.Pass, out, errOut io.Writer, rep *view.SyncReport, what string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := pass.AppliedSummary(ctx, e.Scheduler().Graph())
	if err != nil {
		fmt.Fprintln(errOut, "converge:", err)
		return
	}
	fmt.Fprintf(out, "%s: %s\n", what, s.AppliedText())
	if rep != nil {
		rep.Applied = &view.AppliedCounts{Created: s.Create, Updated: s.Update, Flipped: s.Flip, Deleted: s.Delete, Pruned: s.Prune}
		rep.Summary = &view.Summary{PlanSummary: s}
	}
}

// waitSettled shows progress until the graph converges, is stuck, the
// timeout passes or ctx ends (controlplane.Engine.WaitSettled).
func waitSettled(ctx context.Context, e *controlplane.Engine, out io.Writer, o syncOptions) controlplane.Settled {
	pr := view.NewProgress(out)
	defer pr.Done()
	wait := o.timeout
	if !o.deadline.IsZero() {
		wait = time.Until(o.deadline)
	}
	return e.WaitSettled(ctx, controlplane.WaitOptions{Wait: wait, Grace: o.grace, Progress: pr.Show})
}

// finishSync makes the wait on pass's revision durable, records its
// verdict in the store (controlplane.Engine.FinishSync) and prints it
// (the caller reports it to the git note); a stuck or timed-out run
// names what is not converged: a failing commit of state first, then the
// resources and, when a kind has no worker, why (howToStart when no
// declared worker failed). A last flush that fails turns a converged wait
// into a failed one: nothing is converged until it is durable.
func finishSync(e *controlplane.Engine, syncer *gitsync.Syncer, pass *gitsync.Pass, res controlplane.Settled, elapsed time.Duration, out, errOut io.Writer, howToStart string, rep *view.SyncReport) error {
	v := e.FinishSync(syncer, pass, res, howToStart, maxListed)
	p := v.Progress
	var err error
	if rep != nil {
		counts := p.Counts
		rep.Counts, rep.Dispatched, rep.Seconds = &counts, p.Dispatched, elapsed.Seconds()
		rep.Verdict = v.Settled.String()
		if p.CommitError != "" {
			rep.Errors = append(rep.Errors, "commit state: "+p.CommitError)
		}
		for _, gr := range v.Groups {
			rep.NotReady = append(rep.NotReady, view.NotReadyGroup{Phase: gr.Phase, Reason: gr.Reason, Pattern: gr.Pattern,
				Permanent: gr.Permanent, Count: gr.Count, Resources: gr.IDs})
		}
	}
	switch v.Settled {
	case controlplane.SettledConverged:
		fmt.Fprintf(out, "converged: %s in %s, %d dispatched\n", v.Summary, elapsed.Round(time.Millisecond), p.Dispatched)
	case controlplane.SettledInterrupted:
		err = failed("%s", v.Description)
	case controlplane.SettledSuspended:
		fmt.Fprintf(errOut, "%s\n", v.Description)
		err = failed("not converged (suspended): %d resources wait for converge resume", p.Held)
	default:
		why := v.Why()
		fmt.Fprintf(errOut, "%s: %s; not converged:\n", why, v.Summary)
		var names []string
		if c := v.CommitProblem; c != "" {
			fmt.Fprintf(errOut, "  %s\n", c)
			names = append(names, c)
		}
		view.WriteProblemGroups(errOut, v.Groups, view.ExamplesPerCause)
		if v.Hint != "" {
			fmt.Fprintf(errOut, "hint: %s\n", v.Hint)
		}
		for i, pr := range v.Problems {
			if i == 3 {
				names = append(names, fmt.Sprintf("+%d more", len(v.Problems)-3))
				break
			}
			names = append(names, string(pr.ID))
		}
		if v.Settled == controlplane.SettledUndurable {
			// An environment error (exit 2): the store cannot keep
			// what this run did.
			err = fmt.Errorf("not converged (%s): %s", why, v.CommitProblem)
		} else {
			err = failed("not converged (%s): %s", why, strings.Join(names, ", "))
		}
	}
	var w lastWrites
	w.add("record the verdict in the store", v.RecordErr)
	return w.join(err)
}

// recordOnly stores a failed revision's verdict in the store, if no other
// process holds it.
func recordOnly(ctx context.Context, g *globals, dir string, pass *gitsync.Pass) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	st, err := openStoreForWrite(g, dir)
	if err != nil {
		return err
	}
	// PutRevision is durable when it returns: a failed close loses nothing.
	defer st.Close()
	return st.PutRevision(ctx, pass.Record)
}

// standing reports what controlplane.Standing says of the store in dir
// for rev; false when there is no store or another converge holds it.
func standing(ctx context.Context, g *globals, dir string, rev converge.Revision) (total int, ok bool) {
	if ok, _ := hasState(g, dir); !ok {
		return 0, false // the engine's open says what is wrong
	}
	st, err := openState(g, dir, false, 100*time.Millisecond)
	if err != nil {
		return 0, false
	}
	defer st.Close()
	return controlplane.Standing(ctx, st, rev)
}

// maxListed is how many resources a stuck verdict names.
const maxListed = 20

// noteUncommitted tells the user (on errOut) which files below path in
// the work tree differ from the commit that cmd reads: edits a user may
// expect it to apply. A failure to tell is not an error of cmd.
func noteUncommitted(errOut io.Writer, src *gitsync.Source, path, cmd string) {
	files, err := src.Uncommitted(path)
	if err != nil || len(files) == 0 {
		return
	}
	const show = 3
	list := strings.Join(files[:min(show, len(files))], ", ")
	if len(files) > show {
		list += fmt.Sprintf(" (+%d more)", len(files)-show)
	}
	fmt.Fprintf(errOut, "note: %s reads the last commit; the work tree has uncommitted changes it does not apply: %s (commit them, or use sync --watch to apply the work tree)\n", cmd, list)
}
