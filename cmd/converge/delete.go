package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/builtin"
	"github.com/convergehq/converge/cmd/converge/internal/repopath"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state/stateapi"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/controlplane"
)

type deleteOptions struct {
	wait    bool
	timeout time.Duration
	verbose bool
	output  string
	report  *view.Delete // -o json|yaml: filled in as delete ends
}

func newDeleteCommand(g *globals) *cobra.Command {
	var o deleteOptions
	c := &cobra.Command{
		Use:   "delete KIND/NAME",
		Short: "Tear a resource down with everything it owns and everything depending on it",
		Long: `delete marks the teardown tree of KIND/NAME (the resource, everything it
owns and everything that depends on any of those) and tears it down in
reverse dependency order: a dependent's teardown runs and its row is removed
before its dependency's; a composition root goes last.

When a converge daemon holds the state, the request goes through its admin
API. With --state etcd://… served by replicas (or from a machine without the
repository) it goes to the leading replica through etcd, wherever it runs
(--leader-wait bounds the wait for one to take it). Otherwise delete starts the engine and the repository's declared workers
on the state (like sync, without applying the repository) for as long as the
teardown takes.

With --wait (the default) delete returns once KIND/NAME is gone (exit 0),
which is after the rest of its teardown tree, or after --timeout exits 1
naming what the teardown is stuck on. With --wait=false it returns as soon
as the teardown is marked (durably): a daemon carries it on, otherwise the
next converge sync does.

A composed resource whose owner still emits it comes back at once: the owner
recomposes as soon as the teardown is done (without a daemon, at the latest at
the next converge sync). Delete the owner, or remove it from the owner's spec,
to keep it gone.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			id, err := converge.ParseID(args[0])
			if err != nil {
				return err
			}
			return runDelete(c.Context(), c.OutOrStdout(), c.ErrOrStderr(), g, id, o)
		},
	}
	f := c.Flags()
	f.BoolVar(&o.wait, "wait", true, "wait until the teardown tree is gone")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up waiting after this long")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "also log the engine's info and debug messages and the workers' output (warnings and errors always show)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table|json|yaml (json and yaml print one report when delete ends)")
	return c
}

func runDelete(ctx context.Context, out, errOut io.Writer, g *globals, id converge.ID, o deleteOptions) (err error) {
	if err := checkOutput(o.output, "table", "json", "yaml"); err != nil {
		return err
	}
	if o.output != "table" {
		rep := &view.Delete{Resource: id}
		stdout := out
		out = errOut
		start := time.Now()
		defer func() {
			if rep.Verdict == "" {
				return // refused before it started: the error says why
			}
			rep.Seconds = time.Since(start).Seconds()
			if werr := view.WriteData(stdout, o.output, rep); werr != nil && err == nil {
				err = werr
			}
		}()
		o.report = rep
	}
	ctl, rd, done, err := openController(ctx, g, errOut, o.verbose)
	if err != nil {
		return err
	}
	defer func() {
		var w lastWrites
		w.add("", done())
		err = w.join(err)
	}()
	before, err := rd.Resource(ctx, id)
	if errors.Is(err, converge.ErrNotFound) {
		return notFound(ctx, rd, id)
	}
	if err != nil {
		return err
	}
	start := time.Now()
	if err := ctl.Delete(ctx, id); err != nil {
		if errors.Is(err, converge.ErrNotFound) {
			return failed("resource %s not found", id)
		}
		return err
	}
	if !o.wait {
		o.verdict("deleting", "", "")
		fmt.Fprintf(out, "deleting %s\n", id)
		view.WriteComesBack(out, before)
		return nil
	}
	deadline := time.NewTimer(o.timeout)
	defer deadline.Stop()
	// The poll reads the resource's whole row: every 20 ms at first,
	// then every twentieth of the time taken so far, at most 250 ms. A
	// million-child root's row is megabytes, and reading it back to back
	// took a core for the whole 4-minute teardown.
	tick := time.NewTimer(20 * time.Millisecond)
	defer tick.Stop()
	get := rd.Resource
	if h, ok := rd.(interface {
		ResourceHead(context.Context, converge.ID) (*converge.Resource, error)
	}); ok {
		// Only the row's UID and owner are read: a local store leaves
		// the spec out (a million-child root's is 15 MB; cloning it at
		// each poll took 25 s of CPU of a 1M teardown).
		get = h.ResourceHead
	}
	for {
		r, err := get(ctx, id)
		switch {
		case errors.Is(err, converge.ErrNotFound):
			o.verdict("deleted", "", "")
			fmt.Fprintf(out, "deleted %s in %s\n", id, time.Since(start).Round(time.Millisecond))
			view.WriteComesBack(out, before)
			return nil
		case err != nil:
			return err
		case r.UID != before.UID:
			// Its owner re-created it after the teardown.
			o.verdict("recreated", r.Owner, "")
			fmt.Fprintf(out, "deleted %s in %s; re-created by %s\n", id, time.Since(start).Round(time.Millisecond), r.Owner)
			return nil
		}
		if ec, ok := ctl.(*engineController); ok {
			if stuck, hint := ec.e.Stuck(&ec.settle, ec.howToStart); stuck {
				if hint != "" {
					fmt.Fprintln(errOut, "hint:", hint)
				}
				on := view.StuckOn(ctx, rd, id)
				o.verdict("stuck", "", on)
				return failed("stuck: %s", on)
			}
		}
		select {
		case <-ctx.Done():
			on := view.StuckOn(ctx, rd, id)
			o.verdict("interrupted", "", on)
			return failed("interrupted: %s is still being torn down (%s)", id, on)
		case <-deadline.C:
			on := view.StuckOn(ctx, rd, id)
			o.verdict("timed_out", "", on)
			return failed("timed out after %s: %s", o.timeout, on)
		case <-tick.C:
			tick.Reset(min(max(20*time.Millisecond, time.Since(start)/20), 250*time.Millisecond))
		}
	}
}

// controller is the write side delete and do need: a daemon's admin API
// or a scheduler started for the command.
type controller interface {
	Delete(ctx context.Context, id converge.ID) error
	Do(ctx context.Context, id converge.ID, verb string, args map[string]string) (*converge.Result, error)
}

// openController returns the daemon holding the state (through its admin
// API) or, when none does, an engine started on the state with the
// workers the repository's head revision declares. done stops what was
// started and returns what its last writes lost (the engine's close).
func openController(ctx context.Context, g *globals, errOut io.Writer, verbose bool) (controller, reader, func() error, error) {
	if err := resolveSource(ctx, g); err != nil {
		return nil, nil, nil, err
	}
	dir, err := changeDir(g)
	if err != nil {
		return nil, nil, nil, err
	}
	if ok, err := hasState(g, dir); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("no state in %s: run converge sync first", dir)
		}
		return nil, nil, nil, err
	}
	if d, err := findDaemon(ctx, g, dir, true, errOut); err != nil || d != nil {
		if err != nil {
			return nil, nil, nil, err
		}
		return d.api, d.rd, func() error { d.done(); return nil }, nil
	}
	workers, repoDir, err := declaredWorkers(g)
	if err != nil {
		return nil, nil, nil, err
	}
	o := controlplane.Options{StateDir: dir, Etcd: g.etcd, RepoDir: repoDir, Workers: workers, Log: g.logger(errOut, verbose),
		BuiltinEnv: builtin.Env}
	o.WorkerEnv = workerLogEnv(o.Log)
	e, c, err := controlplane.StartForCommand(ctx, o)
	if err != nil {
		return nil, nil, nil, err
	}
	if c != nil {
		return c, c, func() error { return nil }, nil
	}
	done := func() error {
		if err := e.Close(); err != nil {
			return fmt.Errorf("close engine: %w", err)
		}
		return nil
	}
	ec := &engineController{Scheduler: e.Scheduler(), e: e, howToStart: howToStartWorker(repopath.IsRemote(g.repo), false),
		settle: gitsync.Settle{Grace: 2 * time.Second, CommitGrace: controlplane.CommitGrace}}
	return ec, e.Store(), done, nil
}

// engineController is the controller of an engine delete or do started:
// its scheduler, and whether the engine is stuck (controlplane.Engine.Stuck).
type engineController struct {
	*scheduler.Scheduler
	e          *controlplane.Engine
	howToStart string
	settle     gitsync.Settle
}

// declaredWorkers returns the worker processes to start and where: those
// the store recorded for the applied revision when resolveSource used
// its source, else those the head revision's converge.cue (below --path)
// declares, read without loading (or applying) anything else. A remote
// repository's workers are never started.
func declaredWorkers(g *globals) ([]converge.WorkerSpec, string, error) {
	if repopath.IsRemote(g.repo) {
		return nil, "", nil
	}
	if src := g.source; src != nil && !src.Remote {
		return src.Workers, src.Repo, nil
	}
	src, err := gitsync.OpenLocal(g.repo, g.ref)
	if err != nil {
		return nil, "", err
	}
	workers, err := headWorkers(g, src, g.path)
	return workers, src.Root(), err
}

var _ controller = (*stateapi.Client)(nil)
var _ controller = (*scheduler.Scheduler)(nil)

// verdict records how delete ended, for -o json|yaml.
func (o deleteOptions) verdict(v string, recreatedBy converge.ID, stuckOn string) {
	if o.report != nil {
		o.report.Verdict, o.report.RecreatedBy, o.report.StuckOn = v, recreatedBy, stuckOn
	}
}
