package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/convergehq/converge/cmd/converge/internal/builtin"
	"github.com/convergehq/converge/providers/sdk"
	"github.com/spf13/cobra"
)

func newWorkerCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:       "worker NAME",
		Short:     "Serve a builtin provider set (" + builtin.Names + ") to the control plane",
		Hidden:    true,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"classic", "classic-leaves", "onprem"},
		RunE: func(c *cobra.Command, args []string) error {
			providers, err := builtin.Providers(args[0])
			if err != nil {
				return err
			}
			if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
				debug.SetMemoryLimit(builtin.MemoryLimit)
			}
			// The SDK logs through slog's default logger (info and up, as
			// text): --log-format and --log-level, or the environment a
			// supervisor sets, change it.
			if c.Flags().Changed("log-format") || c.Flags().Changed("log-level") || os.Getenv(envLogFormat) != "" || os.Getenv(envLogLevel) != "" {
				slog.SetDefault(g.logger(c.ErrOrStderr(), false))
			}
			ctx := c.Context()
			done, err := builtin.WritePidFile()
			if err != nil {
				return err
			}
			defer done()
			if workerProvidersHook != nil {
				providers = workerProvidersHook(providers)
			}
			if err := sdk.Serve(ctx, providers...); err != nil && ctx.Err() == nil {
				return fmt.Errorf("worker %s: %w", args[0], err)
			}
			return nil
		},
	}
}

// workerProvidersHook, when set, wraps a builtin worker's providers
// before it serves them. Only tests set it (history_hooks_test.go: the
// test binary is the converge its worker processes run), to record
// every task a worker completes; it is nil in converge itself.
var workerProvidersHook func([]sdk.Provider) []sdk.Provider
