package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/scheduler"
)

type doOptions struct {
	args    []string
	timeout time.Duration
	verbose bool
	output  string
}

func newDoCommand(g *globals) *cobra.Command {
	var o doOptions
	c := &cobra.Command{
		Use:   "do KIND/NAME VERB",
		Short: "Run an operator verb the resource's kind declares on its worker",
		Long: `do dispatches VERB, an operator verb KIND declares among its reactions
(e.g. enable_flow_logs), to the worker serving the resource's kind version,
with the --arg key=value pairs, and prints the outcome. The outcome is
recorded as an event of the resource (converge events KIND/NAME); a verb
that succeeds with a status replaces the resource's status.

A verb the kind does not declare is refused (exit 1, naming the declared
verbs); a verb the worker fails exits 1 with its message.

When a converge daemon holds the state, the verb goes through its admin API;
with --state etcd://… served by replicas it goes to the leading replica through
etcd, from any machine; otherwise do starts the engine and the repository's declared workers on the
state for the verb's duration (without applying the repository).`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			id, err := converge.ParseID(args[0])
			if err != nil {
				return err
			}
			kv, err := parseArgs(o.args)
			if err != nil {
				return err
			}
			return runDo(c.Context(), c.OutOrStdout(), c.ErrOrStderr(), g, id, args[1], kv, o)
		},
	}
	f := c.Flags()
	f.StringArrayVar(&o.args, "arg", nil, "a key=value argument for the verb (repeatable)")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up after this long")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "also log the engine's info and debug messages and the workers' output (warnings and errors always show)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table|json|yaml")
	return c
}

// parseArgs turns key=value pairs into a map; a key given twice keeps the
// last value.
func parseArgs(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, usageErr("--arg %q: want key=value", p)
		}
		m[k] = v
	}
	return m, nil
}

func runDo(ctx context.Context, out, errOut io.Writer, g *globals, id converge.ID, verb string, args map[string]string, o doOptions) (err error) {
	if err := checkOutput(o.output, "table", "json", "yaml"); err != nil {
		return err
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
	r, err := rd.Resource(ctx, id)
	if errors.Is(err, converge.ErrNotFound) {
		return notFound(ctx, rd, id)
	} else if err != nil {
		return err
	}
	x, err := view.NewRedactor(ctx, rd)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	start := time.Now()
	res, err := ctl.Do(ctx, id, verb, args)
	for i := 0; errors.Is(err, scheduler.ErrNotRunning) && i < 100; i++ {
		// The engine started for this command is still starting its loop.
		time.Sleep(10 * time.Millisecond)
		res, err = ctl.Do(ctx, id, verb, args)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return failed("%s %s: no result after %s", id, verb, o.timeout)
	case errors.Is(err, converge.ErrNotFound):
		return failed("resource %s not found", id)
	case notTaken(err):
		return err // no leader took it: the environment failed, not the verb
	case err != nil:
		// Refusals (undeclared verb, no worker, being deleted) and failed
		// outcomes are the checked thing failing.
		return failed("%s", strings.TrimPrefix(err.Error(), "admin api: "))
	case res.Outcome != converge.OutcomeOK:
		return failed("%s %s: %s: %s", id, verb, res.Outcome, res.Message)
	}
	if o.output != "table" {
		st := json.RawMessage("null")
		if len(res.Status) > 0 {
			st = x.Status(r, res.Status)
		}
		return view.WriteData(out, o.output, view.Do{Resource: id, Verb: verb, Outcome: res.Outcome.String(), Message: res.Message,
			Status: st, Seconds: time.Since(start).Seconds()})
	}
	fmt.Fprintf(out, "%s %s: %s in %s\n", id, verb, res.Outcome, time.Since(start).Round(time.Millisecond))
	if res.Message != "" {
		fmt.Fprintln(out, res.Message)
	}
	if len(res.Status) > 0 {
		fmt.Fprintf(out, "status: %s\n", x.Status(r, res.Status))
	}
	return nil
}
