package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"

	"github.com/convergehq/converge/providers/classic"
	"github.com/convergehq/converge/providers/onprem"
	"github.com/convergehq/converge/providers/sdk"
	"github.com/spf13/cobra"
)

// builtinWorkerNames are the provider sets compiled into converge, by the
// name a repository's converge.cue gives as a worker's `builtin`.
const builtinWorkerNames = "classic, classic-leaves, onprem"

// newWorkerCommand returns the hidden `converge worker NAME`: it serves a
// builtin provider set through sdk.Serve, exactly as a standalone worker
// binary would (CONVERGE_ADDR, CONVERGE_TOKEN and CONVERGE_WORKER_NAME from
// the environment; for classic also the FAKE_* chaos knobs). converge sync
// starts it for a local repository whose converge.cue names a builtin
// worker. An unknown name or a bad environment is a usage error (exit 2).
// workerMemoryLimit is a builtin worker's soft memory limit when
// GOMEMLIMIT is not set (see defaultMemoryLimit): composing a million
// children stays under 512 MiB resident.
const workerMemoryLimit = 384 << 20

func newWorkerCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:       "worker NAME",
		Short:     "Serve a builtin provider set (" + builtinWorkerNames + ") to the control plane",
		Hidden:    true,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"classic", "classic-leaves", "onprem"},
		RunE: func(c *cobra.Command, args []string) error {
			var providers []sdk.Provider
			switch args[0] {
			case "classic":
				o, err := classic.OptionsFromEnv()
				if err != nil {
					return fmt.Errorf("worker classic: %w", err)
				}
				providers = classic.Providers(o)
			case "classic-leaves":
				// The classic providers but the composer: for a
				// repository whose classicbom composes in CUE
				// (examples/datadriven).
				o, err := classic.OptionsFromEnv()
				if err != nil {
					return fmt.Errorf("worker classic-leaves: %w", err)
				}
				for _, p := range classic.Providers(o) {
					if p.Kind != "classicbom" {
						providers = append(providers, p)
					}
				}
			case "onprem":
				// examples/onprem: PostgreSQL roles and databases and
				// DNS records on real servers (the provider configs say
				// where).
				providers = onprem.Providers()
			default:
				return fmt.Errorf("worker %q: no such builtin worker (have %s)", args[0], builtinWorkerNames)
			}
			if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
				debug.SetMemoryLimit(workerMemoryLimit)
			}
			// The SDK logs through slog's default logger (info and up, as
			// text): --log-format and --log-level, or the environment a
			// supervisor sets, change it.
			if c.Flags().Changed("log-format") || c.Flags().Changed("log-level") || os.Getenv(envLogFormat) != "" || os.Getenv(envLogLevel) != "" {
				slog.SetDefault(g.logger(c.ErrOrStderr(), false))
			}
			ctx := c.Context()
			done, err := writePidFile()
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

// writePidFile records this worker's pid as
// $CONVERGE_STATE_DIR/workers/$CONVERGE_WORKER_NAME.pid, so an operator (or
// a scenario) can find the process serving a worker name. It does nothing
// outside a supervised run.
func writePidFile() (remove func(), err error) {
	dir, name := os.Getenv("CONVERGE_STATE_DIR"), os.Getenv("CONVERGE_WORKER_NAME")
	if dir == "" || name == "" || filepath.Base(name) != name {
		return func() {}, nil
	}
	p := filepath.Join(dir, "workers", name+".pid")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, fmt.Errorf("write pid file: %w", err)
	}
	// Write and rename, so a reader never sees a half-written file.
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write pid file: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return nil, fmt.Errorf("write pid file: %w", err)
	}
	// Best effort: a pid file left behind is replaced by the next worker
	// of that name.
	return func() { os.Remove(p) }, nil
}

// builtinWorkerEnv are the variables of converge's environment that reach
// the builtin workers besides providers.BaseWorkerEnv: the classic
// workers' fault knobs (README, "The classic example"). Nothing else of
// converge's environment does (README, "Security").
var builtinWorkerEnv = []string{classic.EnvFaultRate, classic.EnvWorkDelay, classic.EnvDeleteDelay,
	classic.EnvTeardownFail, classic.EnvBadStatus}
