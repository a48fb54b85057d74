package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/convergehq/converge/cmd/converge/internal/builtin"
	"github.com/convergehq/converge/sync/controlplane"
)

// startEngine starts the control plane (controlplane.Start) with what
// every command gives its workers: the builtin workers' environment and
// the engine's log format and level, for it to re-log their lines.
func startEngine(ctx context.Context, o controlplane.Options) (*controlplane.Engine, error) {
	o.BuiltinEnv = builtin.Env
	o.WorkerEnv = workerLogEnv(o.Log)
	return controlplane.Start(ctx, o)
}

// howToStartWorker is the hint for a kind no worker serves; only serve
// takes external workers (--workers-listen).
func howToStartWorker(remote, serve bool) string {
	var how string
	switch {
	case remote:
		how = "a remote repository's workers are never started: start one from local configuration with --start-worker (a builtin NAME, or NAME=COMMAND)"
	default:
		how = "declare a worker for it in converge.cue"
	}
	if serve {
		how += ", or connect one with --workers-listen"
	}
	return how
}

// closeEngine closes e, reporting what went wrong on errOut: for a
// daemon, whose outcome is in its log. A command that reports an outcome
// adds e.Close's error to its lastWrites instead.
func closeEngine(e *controlplane.Engine, errOut io.Writer) {
	if err := e.Close(); err != nil {
		fmt.Fprintln(errOut, "converge: close engine:", err)
	}
}

// lastWrites collects the failures of the writes a command makes once
// its work is done: the verdict in the store, the git note, the engine's
// last flush and the store's close. Any one of them makes the command
// fail (exit 2, naming the write): a command must not exit 0 when what
// it reports was not written.
type lastWrites struct{ errs []error }

// add records err, if any, prefixed with what was written ("" when err
// says it already).
func (w *lastWrites) add(what string, err error) {
	if err == nil {
		return
	}
	if what != "" {
		err = fmt.Errorf("%s: %w", what, err)
	}
	w.errs = append(w.errs, err)
}

// join returns the command's result err with the failed writes: err
// itself when none failed, else a usage-or-environment error (exit 2)
// that says err and then each failed write.
func (w *lastWrites) join(err error) error {
	if len(w.errs) == 0 {
		return err
	}
	werr := errors.Join(w.errs...)
	if err == nil {
		return werr
	}
	return fmt.Errorf("%v\n%w", err, werr)
}
