package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
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
	f.BoolVarP(&o.verbose, "verbose", "v", false, "log the engine's and the workers' output")
	f.StringSliceVar(&o.startWorkers, "start-worker", nil, "also start a builtin worker from local configuration: NAME[:REPLICAS] (the only workers started for a remote --repo)")
	f.BoolVar(&o.watch, "watch", false, "dev mode: keep running and re-apply the uncommitted work tree on every save")
	o.forge.addFlags(f)
	return c
}

func runSync(ctx context.Context, c *cobra.Command, g *globals, o syncOptions) error {
	out, errOut := c.OutOrStdout(), c.ErrOrStderr()
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
	logOut := io.Discard
	if o.verbose {
		logOut = errOut
	}
	log := slog.New(slog.NewTextHandler(logOut, nil))
	if err := o.forge.start(ctx, src, log); err != nil {
		return err
	}
	defer o.forge.stop(errOut)
	syncer := &gitsync.Syncer{Source: src, Path: g.path, Log: log}
	rev, err := src.Head()
	if err != nil {
		return err
	}
	pass, err := syncer.Check(rev)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "revision %s: %d documents, %d kinds\n", rev, pass.Loaded.Documents, len(pass.Loaded.Desired.Kinds))
	if !pass.Valid() {
		for _, f := range pass.Record.Errors {
			fmt.Fprintln(errOut, f)
		}
		// Record the verdict without starting anything.
		if err := recordOnly(dir, pass); err != nil {
			fmt.Fprintln(errOut, "converge:", err)
		}
		writeNotes(src, pass, errOut)
		o.forge.publish(pass)
		return failed("revision %s is invalid (%d errors); nothing applied", rev, len(pass.Record.Errors))
	}
	// A local repository is trusted to name its workers; a remote one never
	// makes converge start a command.
	workers := extra
	if !src.Remote() {
		workers = append(workers, pass.Loaded.Desired.Settings.Workers...)
	}
	e, err := startEngine(ctx, engineOptions{
		stateDir: dir, repoDir: src.Root(), workers: workers, log: log, workerOut: logOut,
	})
	if err != nil {
		return err
	}
	defer e.close()
	syncer.Records, syncer.Engine, syncer.Lint, syncer.Compose = e.store, e.sched, lintFunc(), e.sched.DryCompose
	if err := syncer.Apply(ctx, pass); err != nil {
		return err
	}
	if pass.Held != "" {
		for _, f := range pass.Record.Findings {
			fmt.Fprintln(errOut, f)
		}
		writeNotes(src, pass, errOut)
		o.forge.publish(pass)
		return failed("revision %s not applied: %s", rev, pass.Held)
	}
	writeNotes(src, pass, errOut) // converge/sync pending until finishSync
	o.forge.publish(pass)
	if p := pass.Plan; p != nil {
		fmt.Fprintf(out, "applied: %d created, %d updated, %d flipped, %d deleted\n", len(p.Create), len(p.Update), len(p.Flip), len(p.Delete))
	}
	start := time.Now()
	res := waitSettled(ctx, e, out, o, expectedWorkers(workers))
	err = finishSync(e, syncer, pass, res, time.Since(start), out, errOut)
	o.forge.publish(pass)
	if !o.watch {
		return err
	}
	return watchWorkTree(ctx, e, syncer, o, out, errOut, expectedWorkers(workers))
}

// watchWorkTree is dev mode: on every save below the work tree's --path it
// validates the uncommitted documents and, when they are valid, applies
// them (labelled as a dirty revision) and waits for them to settle.
func watchWorkTree(ctx context.Context, e *engine, syncer *gitsync.Syncer, o syncOptions, out, errOut io.Writer, wantWorkers int) error {
	dir := filepath.Join(syncer.Source.Root(), filepath.FromSlash(syncer.Path))
	fmt.Fprintf(out, "watching %s (dev mode: uncommitted changes are applied as %s@dirty; Ctrl+C stops)\n", dir, syncer.Source.Ref())
	err := gitsync.WatchTree(ctx, dir, 300*time.Millisecond, func() {
		pass, err := syncer.CheckWorkTree()
		if err != nil {
			fmt.Fprintln(errOut, "converge:", err)
			return
		}
		if !pass.Valid() {
			for _, f := range pass.Record.Errors {
				fmt.Fprintln(errOut, f)
			}
			fmt.Fprintf(errOut, "work tree invalid (%d errors); nothing applied\n", len(pass.Record.Errors))
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
			syncer.SetSyncStatus(pass, converge.StateSuccess, "no changes")
			return
		}
		fmt.Fprintf(out, "applied work tree: %d created, %d updated, %d flipped, %d deleted\n", len(p.Create), len(p.Update), len(p.Flip), len(p.Delete))
		start := time.Now()
		res := waitSettled(ctx, e, out, o, wantWorkers)
		finishSync(e, syncer, pass, res, time.Since(start), out, errOut)
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

// waitSettled shows progress until the graph converges, is stuck for the
// grace period (with every expected worker connected), the timeout passes
// or ctx ends.
func waitSettled(ctx context.Context, e *engine, out io.Writer, o syncOptions, wantWorkers int) settleResult {
	pr := newProgress(out)
	defer pr.done()
	deadline := time.NewTimer(o.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var stuckSince time.Time
	for {
		p := e.sched.Progress()
		pr.show(p)
		switch {
		case p.Settled == scheduler.Converged:
			return settledConverged
		case p.Settled == scheduler.Stuck && len(e.srv.Workers()) >= wantWorkers:
			if stuckSince.IsZero() {
				stuckSince = time.Now()
			} else if time.Since(stuckSince) >= o.grace {
				return settledStuck
			}
		default:
			stuckSince = time.Time{}
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

func finishSync(e *engine, syncer *gitsync.Syncer, pass *gitsync.Pass, res settleResult, elapsed time.Duration, out, errOut io.Writer) error {
	flushCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.sched.Flush(flushCtx); err != nil {
		return fmt.Errorf("flush state: %w", err)
	}
	p := e.sched.Progress()
	summary := fmt.Sprintf("%d/%d Ready", p.Counts.Ready, p.Counts.Total)
	state, desc := converge.StateSuccess, summary
	var err error
	switch res {
	case settledConverged:
		fmt.Fprintf(out, "converged: %s in %s, %d dispatched\n", summary, elapsed.Round(time.Millisecond), p.Dispatched)
	case settledInterrupted:
		state, desc = converge.StatePending, "interrupted: "+summary
		err = failed("interrupted: %s", summary)
	default:
		why := "stuck"
		if res == settledTimeout {
			why = "timed out"
		}
		state, desc = converge.StateFailure, why+": "+summary
		problems := e.sched.Problems()
		fmt.Fprintf(errOut, "%s: %s; not converged:\n", why, summary)
		for _, pr := range problems {
			fmt.Fprintf(errOut, "  %s %s: %s\n", pr.ID, pr.Phase, pr.Reason)
		}
		names := make([]string, 0, 3)
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
	writeNotes(syncer.Source, pass, errOut)
	return err
}

// recordOnly stores a failed revision's verdict in the store, if no other
// process holds it.
func recordOnly(dir string, pass *gitsync.Pass) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	st, err := openStoreForWrite(dir)
	if err != nil {
		return err
	}
	defer st.Close()
	return st.PutRevision(pass.Record)
}
