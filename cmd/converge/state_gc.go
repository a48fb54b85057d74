package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge/state"
)

// newStateCommand groups the commands that maintain the store itself.
func newStateCommand(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "state",
		Short: "Maintain the state store",
		Args:  cobra.NoArgs,
	}
	c.AddCommand(newStateGCCommand(g))
	return c
}

func newStateGCCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "gc",
		Short: "Compact state.db into a fresh file and swap it in (refused while a converge holds the store)",
		Long: `gc copies the live data of state.db into a fresh file, checks the copy
against the original, and renames it over state.db. bbolt reuses the
pages of deleted data but never returns them, so a store that once held
far more than it does now (a big BOM torn down) stays that big until gc.
A crash during gc leaves the old file or the new one, whole.

gc needs the store to itself: it fails (exit 2) while sync or serve
holds it.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			if g.etcd != nil {
				return usageErr("state gc: --state %s: gc compacts a bbolt file; an etcd store is compacted by etcd (etcdctl compact, defrag)", g.state)
			}
			dir, err := stateDir(g)
			if err != nil {
				return err
			}
			path := filepath.Join(dir, state.FileName)
			if ok, err := stateFileExists(dir); err != nil || !ok {
				if err == nil {
					err = fmt.Errorf("no state in %s", dir)
				}
				return fmt.Errorf("state gc: %w", err)
			}
			res, err := state.Compact(ctx, dir, state.Options{LockTimeout: 200 * time.Millisecond})
			if errors.Is(err, state.ErrLocked) {
				return fmt.Errorf("state gc: %w: a running converge (sync or serve) holds it; stop it first", err)
			}
			if err != nil {
				return fmt.Errorf("state gc: %w", err)
			}
			fmt.Fprintf(c.OutOrStdout(), "compacted %s: %d -> %d bytes (%.1f MiB freed)\n",
				path, res.Before, res.After, float64(res.Before-res.After)/(1<<20))
			return nil
		},
	}
}
