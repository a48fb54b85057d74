package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	gitsync "github.com/convergehq/converge/sync"
)

type syncOptions struct {
	watch        bool
	startWorkers []string
	timeout      time.Duration
	grace        time.Duration
	verbose      bool
	forge        forgeOptions // --forge…: also post statuses to a forge
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
	f := c.Flags()
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	f.DurationVar(&o.grace, "stuck-grace", 2*time.Second, "how long nothing must progress before sync gives up")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "also log the engine's info and debug messages and the workers' output (warnings and errors always show)")
	f.StringSliceVar(&o.startWorkers, "start-worker", nil, "also start a worker from local configuration: a builtin NAME[:REPLICAS], or NAME=COMMAND (a worker binary, its path relative to the current directory); the only workers started for a remote --repo")
	f.BoolVar(&o.watch, "watch", false, "dev mode: keep running and re-apply the uncommitted work tree on every save")
	o.forge.addFlags(f)
	addReinitFlag(f, g)
	return c
}

// addReinitFlag adds --reinit-state to f (sync and serve).
func addReinitFlag(f *pflag.FlagSet, g *globals) {
	f.BoolVar(&g.reinitState, "reinit-state", false, "when state.db exists but is empty or damaged, move it aside (state.db.damaged-TIME) and start a fresh store: every resource is created again (without it such a file is an error; only a missing file starts fresh)")
}

func runSync(ctx context.Context, c *cobra.Command, g *globals, o syncOptions) error {
	out, errOut := c.OutOrStdout(), c.ErrOrStderr()
	if err := resolveSource(g); err != nil {
		return err
	}
	dir, err := stateDir(g)
	if err != nil {
		return err
	}
	if o.watch && isRemote(g.repo) {
		return usageErr("sync --watch watches a local work tree; --repo %s is remote", g.repo)
	}
	src, err := openSource(ctx, g, dir)
	if err != nil {
		return err
	}
	extra, err := builtinWorkers(o.startWorkers)
	if err != nil {
		return err
	}
	log := newLogger(errOut, o.verbose)
	workerOut := io.Discard // the workers' own output, with -v
	if o.verbose {
		workerOut = errOut
	}
	o.forge.configured = g.headSettings.ForgeTimeout
	if err := o.forge.start(ctx, src, dir, log, errOut); err != nil {
		return err
	}
	defer o.forge.stop(errOut)
	syncer := &gitsync.Syncer{Source: src, Path: g.path, Log: log}
	setTimeouts(g, nil, syncer, g.headSettings)
	rev, err := src.Head()
	if err != nil {
		return err
	}
	if !o.watch {
		if total, ok := standing(g, dir, rev); ok {
			fmt.Fprintf(out, "revision %s: already applied\n", rev)
			fmt.Fprintf(out, "converged: %d/%d Ready; nothing to do\n", total, total)
			return nil
		}
	}
	pass, err := syncer.CheckContext(ctx, rev)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "revision %s: %d documents, %d kinds\n", rev, pass.Loaded.Documents, len(pass.Loaded.Desired.Kinds))
	if !pass.Valid() {
		for _, f := range pass.Record.Errors {
			fmt.Fprintln(errOut, f)
		}
		// Record the verdict without starting anything.
		if err := recordOnly(g, dir, pass); err != nil {
			fmt.Fprintln(errOut, "converge:", err)
		}
		o.forge.report(pass, errOut)
		return failed("revision %s is invalid (%d errors); nothing applied", rev, len(pass.Record.Errors))
	}
	// A local repository is trusted to name its workers; a remote one never
	// makes converge start a command.
	workers := extra
	if !src.Remote() {
		workers = append(workers, pass.Loaded.Desired.Settings.Workers...)
	}
	e, err := startEngine(ctx, engineOptions{
		stateDir: dir, etcd: g.etcd, repoDir: src.Root(), workers: workers, log: log, workerOut: workerOut, wrapStore: g.wrapStore,
		reinit: g.reinitState,
	})
	if err != nil {
		return err
	}
	defer closeEngine(e, errOut)
	syncer.Records, syncer.Engine, syncer.Lint, syncer.Compose = e.store, e.sched, lintFunc(), e.sched.DryCompose
	if err := syncer.Apply(ctx, pass); err != nil {
		return err
	}
	if pass.Held != "" {
		for _, f := range pass.Record.Findings {
			fmt.Fprintln(errOut, f)
		}
		o.forge.report(pass, errOut)
		return failed("revision %s not applied: %s", rev, pass.Held)
	}
	o.forge.report(pass, errOut) // converge/sync pending until finishSync
	if p := pass.Plan; p != nil {
		fmt.Fprintf(out, "applied: %d created, %d updated, %d flipped, %d deleted\n", len(p.Create), len(p.Update), len(p.Flip), len(p.Delete))
	}
	start := time.Now()
	res := waitSettled(ctx, e, out, o)
	err = finishSync(e, syncer, pass, res, time.Since(start), out, errOut, howToStartWorker(src.Remote(), false))
	o.forge.report(pass, errOut)
	if !o.watch {
		return err
	}
	if err != nil {
		// dev mode goes on: the next save may fix it.
		fmt.Fprintln(errOut, "converge:", err)
	}
	return watchWorkTree(ctx, e, syncer, o, out, errOut)
}

// watchWorkTree is dev mode: on every save below the work tree's --path it
// validates the uncommitted documents and, when they are valid, applies
// them (labelled as a dirty revision) and waits for them to settle.
func watchWorkTree(ctx context.Context, e *engine, syncer *gitsync.Syncer, o syncOptions, out, errOut io.Writer) error {
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
			fmt.Fprintf(errOut, "work tree invalid (%d errors); nothing applied\n", len(pass.Record.Errors))
			// Every save gets a verdict in the store, as every commit
			// does: `converge status @dirty` shows it.
			if err := syncer.Records.PutRevision(pass.Record); err != nil {
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
			if err := syncer.SetSyncStatus(pass, converge.StateSuccess, "no changes"); err != nil {
				fmt.Fprintln(errOut, "converge:", err)
			}
			return
		}
		fmt.Fprintf(out, "applied work tree: %d created, %d updated, %d flipped, %d deleted\n", len(p.Create), len(p.Update), len(p.Flip), len(p.Delete))
		start := time.Now()
		res := waitSettled(ctx, e, out, o)
		if err := finishSync(e, syncer, pass, res, time.Since(start), out, errOut, howToStartWorker(syncer.Source.Remote(), false)); err != nil {
			fmt.Fprintln(errOut, "converge:", err)
		}
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// settleResult is how a wait for convergence ended.
type settleResult int

const (
	settledConverged settleResult = iota
	settledStuck
	settledTimeout
	settledInterrupted
)

// waitSettled shows progress until the graph converges, is stuck
// (gitsync.Settle decides), the timeout passes or ctx ends.
func waitSettled(ctx context.Context, e *engine, out io.Writer, o syncOptions) settleResult {
	pr := newProgress(out)
	defer pr.done()
	deadline := time.NewTimer(o.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	settle := gitsync.Settle{Grace: o.grace}
	for {
		p := e.sched.Progress()
		pr.show(p)
		due, _ := e.workers()
		switch settle.Observe(time.Now(), p, due) {
		case gitsync.Converged:
			return settledConverged
		case gitsync.Stuck:
			return settledStuck
		}
		select {
		case <-ctx.Done():
			return settledInterrupted
		case <-deadline.C:
			return settledTimeout
		case <-tick.C:
		}
	}
}

// lastFlushTimeout bounds the flush that makes a converged sync durable.
const lastFlushTimeout = 10 * time.Minute

// finishSync records the verdict of a wait on pass's revision in the
// store and prints it (the caller reports it to the git note); a stuck or
// timed-out run names what is not converged: a failing commit of state
// first, then the resources and, when a kind has no worker, why
// (howToStart when no declared worker failed). A last flush that fails
// turns a converged wait into a failed one: nothing is converged until it
// is durable.
func finishSync(e *engine, syncer *gitsync.Syncer, pass *gitsync.Pass, res settleResult, elapsed time.Duration, out, errOut io.Writer, howToStart string) error {
	// The store may be well behind the graph: a million-child
	// composition's rows drain 8,192 a commit while the work goes on, so
	// the last flush can take minutes (not the seconds it takes at demo
	// size). It is bounded all the same: a store that cannot keep up for
	// that long is failing.
	flushCtx, cancel := context.WithTimeout(context.Background(), lastFlushTimeout)
	defer cancel()
	ferr := e.sched.Flush(flushCtx)
	p := e.sched.Progress()
	if ferr != nil {
		if p.CommitError == "" {
			p.CommitError = ferr.Error()
		}
		if res == settledConverged {
			res = settledStuck
		}
	}
	summary := gitsync.Summary(p)
	state, desc := converge.StateSuccess, summary
	var err error
	switch res {
	case settledConverged:
		fmt.Fprintf(out, "converged: %s in %s, %d dispatched\n", summary, elapsed.Round(time.Millisecond), p.Dispatched)
	case settledInterrupted:
		state, desc = converge.StatePending, gitsync.Verdict("interrupted", p, "")
		err = failed("%s", desc)
	default:
		why := "stuck"
		if res == settledTimeout {
			why = "timed out"
		}
		problems := e.sched.Problems()
		_, failedWorkers := e.workers()
		hint := gitsync.UnservedHint(problems, failedWorkers, howToStart)
		state, desc = converge.StateFailure, gitsync.Verdict(why, p, hint)
		fmt.Fprintf(errOut, "%s: %s; not converged:\n", why, summary)
		var names []string
		if c := gitsync.CommitProblem(p); c != "" {
			fmt.Fprintf(errOut, "  %s\n", c)
			names = append(names, c)
		}
		for _, pr := range problems {
			fmt.Fprintf(errOut, "  %s %s: %s\n", pr.ID, pr.Phase, pr.Reason)
		}
		if hint != "" {
			fmt.Fprintf(errOut, "hint: %s\n", hint)
		}
		for i, pr := range problems {
			if i == 3 {
				names = append(names, fmt.Sprintf("+%d more", len(problems)-3))
				break
			}
			names = append(names, string(pr.ID))
		}
		err = failed("not converged (%s): %s", why, strings.Join(names, ", "))
	}
	if serr := syncer.SetSyncStatus(pass, state, desc); serr != nil {
		fmt.Fprintln(errOut, "converge:", serr)
	}
	return err
}

// recordOnly stores a failed revision's verdict in the store, if no other
// process holds it.
func recordOnly(g *globals, dir string, pass *gitsync.Pass) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	st, err := openStoreForWrite(g, dir)
	if err != nil {
		return err
	}
	// PutRevision is durable when it returns: a failed close loses nothing.
	defer st.Close()
	return st.PutRevision(pass.Record)
}

// standing reports what gitsync.AlreadyConverged says of the store in dir
// for rev, reading only the applied revision, the roots and the owed
// deliveries; false when there is no store or another converge holds it.
func standing(g *globals, dir string, rev converge.Revision) (total int, ok bool) {
	if !hasState(g, dir) {
		return 0, false
	}
	st, err := openState(g, dir, false, 100*time.Millisecond)
	if err != nil {
		return 0, false
	}
	defer st.Close()
	applied, err := st.Applied()
	if err != nil || applied == nil || applied.Hash != rev.Hash {
		return 0, false
	}
	src, err := st.Source()
	if err != nil || src == nil || src.Revision.Hash != rev.Hash {
		return 0, false
	}
	roots, err := st.Resources(state.Filter{RootsOnly: true})
	if err != nil {
		return 0, false
	}
	ds, err := st.Deliveries()
	if err != nil {
		return 0, false
	}
	owed := 0
	for _, d := range ds {
		if !d.Done {
			owed++
		}
	}
	return gitsync.AlreadyConverged(applied, rev, src.Declared, roots, owed)
}
