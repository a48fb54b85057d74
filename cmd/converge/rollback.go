package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/stateapi"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/controlplane"
)

// newRollbackCommand is converge rollback [REV]: pin a revision and apply
// it, as sync does.
func newRollbackCommand(g *globals) *cobra.Command {
	var o syncOptions
	c := &cobra.Command{
		Use:   "rollback [REV]",
		Short: "Pin an earlier good revision and apply it instead of the branch head, until converge unpin",
		Long: `rollback pins REV (default: the newest revision before the applied one that
was applied and converged) and applies it as sync does: sync and serve
apply the pinned revision instead of the head of the followed branch
until converge unpin. The pin is kept in the store; status, get, the
site, serve's log and /metrics (converge_pinned) show it.

A revision whose documents are invalid, or whose kinds break the kinds
live resources were applied under (the apply-time lint), is refused:
nothing is pinned. While a converge serve holds the state it takes the
pin and applies it, and rollback waits for its verdict.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if o.watch {
				return usageErr("rollback: --watch applies the work tree, not a pinned revision")
			}
			rev := ""
			if len(args) == 1 {
				rev = args[0]
			}
			if err := pin(c.Context(), c.ErrOrStderr(), g, rev); err != nil {
				return err
			}
			return runSync(c.Context(), c, g, o)
		},
	}
	addSyncFlags(c, g, &o)
	return c
}

// newUnpinCommand is converge unpin: follow the branch head again.
func newUnpinCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "unpin",
		Short: "Drop the pin converge rollback set: sync and serve follow the branch head again",
		Long: `unpin drops the pin converge rollback set. A converge serve holding the
state follows the head of its branch again at once; otherwise the next
converge sync applies the head.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			if err := resolveSource(ctx, g); err != nil {
				return err
			}
			dir, err := changeDir(g)
			if err != nil {
				return err
			}
			out := c.OutOrStdout()
			return updateControl(c.Context(), g, dir, func(ctl *converge.Control, daemon bool) (string, error) {
				if ctl.Pin == nil {
					return "", failed("unpin: no revision is pinned")
				}
				was := ctl.Pin.Revision
				ctl.Pin = nil
				if daemon {
					return fmt.Sprintf("unpinned %s: the converge serve holding the state follows the branch head again", was), nil
				}
				return fmt.Sprintf("unpinned %s: converge sync applies the branch head", was), nil
			}, out, c.ErrOrStderr())
		},
	}
}

// pin checks rev (default: the previous good revision) against the
// stored kinds and records it as the pin.
func pin(ctx context.Context, errOut io.Writer, g *globals, revArg string) error {
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
	rd, done, err := openReader(g, errOut)
	if err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	kinds, err := rd.Kinds(ctx)
	var applied *converge.AppliedSource
	var recs []*converge.RevisionRecord
	if err == nil {
		if sr, ok := rd.(stateapi.Sourcer); ok {
			applied, err = sr.Source(ctx)
		}
	}
	if err == nil {
		if rv, ok := rd.(stateapi.Revisioner); ok {
			recs, err = rv.Revisions(ctx, 0)
		}
	}
	done()
	if err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	var rev converge.Revision
	if revArg != "" {
		if rev, err = src.Revision(revArg); err != nil {
			return err
		}
	} else {
		cur := ""
		if applied != nil {
			cur = applied.Revision.Hash
		}
		r, ok := gitsync.PreviousGood(recs, cur)
		if !ok {
			return failed("rollback: no earlier revision was applied and converged: name one (converge rollback REV)")
		}
		if rev, err = src.Revision(r.Hash); err != nil {
			return err
		}
	}
	syncer := &gitsync.Syncer{Source: src, Path: g.path, Lint: lintFunc()}
	setTimeouts(g, nil, syncer, g.headSettings)
	if _, err := syncer.CheckPin(ctx, rev, kinds); err != nil {
		return failed("rollback refused: %v", err)
	}
	from := ""
	if applied != nil {
		from = applied.Revision.Hash
	}
	p := &converge.Pin{Revision: rev, By: currentUser(), At: time.Now().UTC(), From: from}
	return updateControl(ctx, g, dir, func(ctl *converge.Control, _ bool) (string, error) {
		ctl.Pin = p
		return fmt.Sprintf("pinned %s (%s): sync and serve apply it instead of the head of %s until converge unpin", rev, rev.Subject, src.Ref()), nil
	}, errOut, errOut)
}

// updateControl reads the stored Control, lets change edit it, and
// writes it back: through the admin API while a converge holds the state
// (daemon true), else to the store. change's message is printed to out.
func updateControl(ctx context.Context, g *globals, dir string, change func(c *converge.Control, daemon bool) (string, error), out, errOut io.Writer) error {
	// A local daemon's socket is asked only of a directory state: next
	// to an etcd state it may be a converge on another state.
	d, err := findDaemon(ctx, g, dir, g.etcd == nil, errOut)
	if err != nil {
		return err
	}
	if d != nil {
		defer d.done()
		cl := d.api
		msg, before, after, err := controlplane.UpdateControl(ctx, cl, func(c *converge.Control) (string, error) { return change(c, true) })
		if err != nil {
			return err
		}
		fmt.Fprintln(out, msg)
		if before == after {
			return nil // the pin is unchanged: nothing to fetch
		}
		if _, err := cl.Reconcile(ctx, ""); err != nil {
			fmt.Fprintf(out, "note: the daemon follows it at its next poll: %v\n", err)
		}
		return nil
	}
	if ok, err := hasState(g, dir); err != nil || !ok {
		if err == nil {
			err = failed("no state in %s: run converge sync first", dir)
		}
		return err
	}
	st, err := openStoreForWrite(g, dir)
	if errors.Is(err, state.ErrLocked) {
		return fmt.Errorf("open state: %w (a converge holds it and takes no control: stop it, or wait for it)", err)
	}
	if err != nil {
		return controlplane.OpenError(err)
	}
	defer st.Close()
	ctl, err := st.Control(ctx)
	if err != nil {
		return err
	}
	msg, err := change(ctl, false)
	if err != nil {
		return err
	}
	if err := st.PutControl(ctx, ctl); err != nil {
		return err
	}
	fmt.Fprintln(out, msg)
	return st.Close()
}

// pinnedHash is the commit c pins, or "".
func pinnedHash(c *converge.Control) string {
	if c == nil || c.Pin == nil {
		return ""
	}
	return c.Pin.Revision.Hash
}

// storedControl returns the Control of the state in dir (through the
// admin API while a converge holds it); the zero Control when there is
// no state.
func storedControl(ctx context.Context, g *globals, dir string) (*converge.Control, error) {
	ok, err := hasState(g, dir)
	if err != nil || !ok {
		return &converge.Control{}, err
	}
	st, err := openState(g, dir, false, 200*time.Millisecond)
	if errors.Is(err, state.ErrLocked) {
		cl, cerr := dialAdmin(dir)
		if cerr != nil {
			return nil, fmt.Errorf("open state: %w (a running converge holds it)", err)
		}
		return cl.Control(ctx)
	}
	if err != nil {
		return nil, controlplane.OpenError(err)
	}
	defer st.Close() // read only: a failed close loses nothing
	return st.Control(ctx)
}
