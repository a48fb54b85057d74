package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/stateapi"
	gitsync "github.com/convergehq/converge/sync"
)

type reconcileOptions struct {
	wait    bool
	timeout time.Duration
}

func newReconcileCommand(g *globals) *cobra.Command {
	var o reconcileOptions
	c := &cobra.Command{
		Use:   "reconcile [KIND/NAME]",
		Short: "Ask the running daemon to fetch and apply now, or to resync one resource",
		Long: `reconcile pokes the converge serve that holds the state, as flux reconcile
does: without an argument the daemon fetches its repository at once (instead of
at its next poll), applies the newest good commit, and reconcile waits for that
commit's converge/sync verdict and prints it (--wait=false returns at once).
With KIND/NAME the daemon resyncs that resource now, as its resync interval
would, and reconcile prints what it queued. With --state etcd://… the leading
replica does it, from any machine.

Exit codes: 0 the verdict is success (or the resync was queued), 1 the verdict
is a failure, 2 no daemon holds the state (run converge sync instead), no
replica leads an etcd state, or the wait timed out.`,
		Example: `  converge reconcile                    # fetch and apply now, wait for the verdict
  converge reconcile --wait=false       # fetch and apply now, return at once
  converge reconcile vpc/fd-01-team-001 # resync one resource now`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var id converge.ID
			if len(args) == 1 {
				var err error
				if id, err = converge.ParseID(args[0]); err != nil {
					return err
				}
			}
			return runReconcile(c.Context(), c.OutOrStdout(), c.ErrOrStderr(), g, id, o)
		},
	}
	f := c.Flags()
	f.BoolVar(&o.wait, "wait", true, "wait for the followed commit's converge/sync verdict")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "how long to wait for the verdict")
	return c
}

func runReconcile(ctx context.Context, out, errOut io.Writer, g *globals, id converge.ID, o reconcileOptions) error {
	if err := resolveSource(ctx, g); err != nil {
		return err
	}
	dir, err := changeDir(g)
	if err != nil {
		return err
	}
	d, err := findDaemon(ctx, g, dir, true, errOut)
	if err != nil {
		return err
	}
	if d == nil {
		return usageErr("reconcile: no converge serve holds the state in %s; run converge sync to apply the repository", stateName(g, dir))
	}
	defer d.done()
	cl := d.api
	rctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rep, err := cl.Reconcile(rctx, id)
	if errors.Is(err, converge.ErrNotFound) {
		return failed("reconcile: resource %s not found", id)
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(out, rep.Message)
	if id != "" || !o.wait {
		return nil
	}
	return awaitVerdict(rctx, out, d.rd, rep.Revision, rep.Hash)
}

// awaitVerdict waits until the daemon behind rd has judged the commit
// hash (gitsync.FinalVerdict), prints the verdict and returns exit 1
// for anything but success; ctx's end is a timeout (exit 2).
func awaitVerdict(ctx context.Context, out io.Writer, rd stateapi.Revisioner, rev, hash string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		rec, err := rd.Revision(ctx, hash)
		if err != nil && !errors.Is(err, converge.ErrNotFound) {
			return fmt.Errorf("read the verdict of %s: %w", rev, err)
		}
		if s, ok := gitsync.FinalVerdict(rec); ok {
			fmt.Fprintf(out, "revision %s: %s %s: %s\n", rev, s.Context, s.State, s.Description)
			if s.State != converge.StateSuccess {
				return failed("revision %s: %s is %s: %s", rev, s.Context, s.State, s.Description)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("revision %s: no verdict from the daemon yet: %w", rev, ctx.Err())
		case <-tick.C:
		}
	}
}
