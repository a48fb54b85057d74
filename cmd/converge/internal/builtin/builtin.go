// Package builtin holds the worker processes compiled into converge:
// the provider sets `converge worker NAME` serves (classic,
// classic-leaves, onprem: Providers), the variables of converge's
// environment that reach them (Env), their soft memory limit and pid
// file, and --start-worker's values (ParseStartWorkers).
package builtin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/classic"
	"github.com/convergehq/converge/providers/onprem"
	"github.com/convergehq/converge/providers/sdk"
)

// Names are the provider sets compiled into converge, by the
// name a repository's converge.cue gives as a worker's `builtin`.
const Names = "classic, classic-leaves, onprem"

// newWorkerCommand returns the hidden `converge worker NAME`: it serves a
// builtin provider set through sdk.Serve, exactly as a standalone worker
// binary would (CONVERGE_ADDR, CONVERGE_TOKEN and CONVERGE_WORKER_NAME from
// the environment; for classic also the FAKE_* chaos knobs). converge sync
// starts it for a local repository whose converge.cue names a builtin
// worker. An unknown name or a bad environment is a usage error (exit 2).
// MemoryLimit is a builtin worker's soft memory limit when
// GOMEMLIMIT is not set (see the control plane's, controlplane.Start): composing a million
// children stays under 512 MiB resident.
const MemoryLimit = 384 << 20

// WritePidFile records this worker's pid as
// $CONVERGE_STATE_DIR/workers/$CONVERGE_WORKER_NAME.pid, so an operator (or
// a scenario) can find the process serving a worker name. It does nothing
// outside a supervised run.
func WritePidFile() (remove func(), err error) {
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

// Env are the variables of converge's environment that reach
// the builtin workers besides providers.BaseWorkerEnv: the classic
// workers' fault knobs (README, "The classic example"). Nothing else of
// converge's environment does (README, "Security").
var Env = []string{classic.EnvFaultRate, classic.EnvWorkDelay, classic.EnvDeleteDelay,
	classic.EnvTeardownFail, classic.EnvBadStatus}

// Providers is the builtin provider set name; an unknown name, or a bad
// environment (classic's FAKE_* knobs), is an error.
func Providers(name string) ([]sdk.Provider, error) {
	switch name {
	case "classic":
		o, err := classic.OptionsFromEnv()
		if err != nil {
			return nil, fmt.Errorf("worker classic: %w", err)
		}
		return classic.Providers(o), nil
	case "classic-leaves":
		// The classic providers but the composer: for a
		// repository whose classicbom composes in CUE
		// (examples/datadriven).
		o, err := classic.OptionsFromEnv()
		if err != nil {
			return nil, fmt.Errorf("worker classic-leaves: %w", err)
		}
		var leaves []sdk.Provider
		for _, p := range classic.Providers(o) {
			if p.Kind != "classicbom" {
				leaves = append(leaves, p)
			}
		}
		return leaves, nil
	case "onprem":
		// examples/onprem: PostgreSQL roles and databases and
		// DNS records on real servers (the provider configs say
		// where).
		return onprem.Providers(), nil
	}
	return nil, fmt.Errorf("worker %q: no such builtin worker (have %s)", name, Names)
}

// ParseStartWorkers parses --start-worker NAME[:REPLICAS] values.
func ParseStartWorkers(vals []string) ([]converge.WorkerSpec, error) {
	var out []converge.WorkerSpec
	for _, v := range vals {
		if name, command, ok := strings.Cut(v, "="); ok {
			// A command worker from local configuration: its path is
			// the operator's (relative to the current directory),
			// never the repository's, so a remote --repo can run a
			// custom worker that the remote does not name.
			if name == "" || command == "" || strings.ContainsAny(name, "/ ") {
				return nil, fmt.Errorf("--start-worker %q: want NAME=COMMAND (a path)", v)
			}
			abs, err := filepath.Abs(command)
			if err != nil {
				return nil, fmt.Errorf("--start-worker %q: %w", v, err)
			}
			out = append(out, converge.WorkerSpec{Name: name, Command: []string{abs}, Replicas: 1})
			continue
		}
		name, reps, _ := strings.Cut(v, ":")
		n := 1
		if reps != "" {
			var err error
			if n, err = strconv.Atoi(reps); err != nil || n < 1 {
				return nil, fmt.Errorf("--start-worker %q: want NAME[:REPLICAS]", v)
			}
		}
		if name != "classic" && name != "classic-leaves" {
			return nil, errors.New("--start-worker " + v + ": no such builtin worker (have " + Names + ")")
		}
		out = append(out, converge.WorkerSpec{Name: name, Builtin: name, Replicas: n})
	}
	return out, nil
}
