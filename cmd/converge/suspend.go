package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
)

// newSuspendCommand is converge suspend [KIND/NAME]; newResumeCommand its
// undoing.
func newSuspendCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "suspend [KIND/NAME]",
		Short: "Stop reconciling one root's subtree, or everything, until converge resume",
		Long: `suspend stops new dispatches for the subtree of the root KIND/NAME, or for
every resource without one (Flux's suspend): no reconcile, resync or
recompose starts until converge resume. What is running finishes. Deletes
are honoured (a resource being deleted or pruned is torn down), and
operator verbs (converge do) run. New revisions are still applied to the
store: their changes reach the workers once resumed.

The suspension is kept in the store across restarts, taken at once by a
converge serve holding the state, and shown by get and /metrics
(converge_suspended, converge_suspended_held).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			return changeSuspension(ctx, c, g, args, true)
		},
	}
}

func newResumeCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "resume [KIND/NAME]",
		Short: "Resume reconciling what converge suspend stopped",
		Long: `resume lifts the suspension of the root KIND/NAME, or, without one, the
suspension of everything; what was held back is dispatched again.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			return changeSuspension(ctx, c, g, args, false)
		},
	}
}

func changeSuspension(ctx context.Context, c *cobra.Command, g *globals, args []string, suspend bool) error {
	if err := resolveSource(ctx, g); err != nil {
		return err
	}
	dir, err := changeDir(g)
	if err != nil {
		return err
	}
	var root converge.ID
	what := "everything"
	if len(args) == 1 {
		id, err := converge.ParseID(args[0])
		if err != nil {
			return usageErr("%v", err)
		}
		if suspend {
			if err := checkRoot(ctx, g, c, id); err != nil {
				return err
			}
		}
		root, what = id, string(id)
	}
	return updateControl(c.Context(), g, dir, func(ctl *converge.Control, daemon bool) (string, error) {
		if !suspend {
			if !ctl.Resume(root) {
				return "", failed("resume: %s is not suspended", what)
			}
			return fmt.Sprintf("resumed %s", what), nil
		}
		if ctl.Suspend(converge.Suspension{Root: root, By: currentUser(), At: time.Now().UTC()}) {
			return fmt.Sprintf("%s was suspended already", what), nil
		}
		if daemon {
			return fmt.Sprintf("suspended %s: the converge serve holding the state dispatches nothing new for it until converge resume", what), nil
		}
		return fmt.Sprintf("suspended %s: nothing new is dispatched for it until converge resume", what), nil
	}, c.OutOrStdout(), c.ErrOrStderr())
}

// checkRoot refuses an id that does not exist or is not a root (it has
// an owner: suspend the root it comes from).
func checkRoot(ctx context.Context, g *globals, c *cobra.Command, id converge.ID) error {
	rd, done, err := openReader(g, c.ErrOrStderr())
	if err != nil {
		return err
	}
	defer done()
	r, err := rd.Resource(ctx, id)
	if errors.Is(err, converge.ErrNotFound) {
		return notFound(ctx, rd, id)
	}
	if err != nil {
		return err
	}
	if r.Owner != "" {
		return usageErr("suspend %s: not a root (composed by %s); suspend a root, or everything", id, r.Owner)
	}
	return nil
}
