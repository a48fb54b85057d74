package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge/cmd/converge/internal/scaffold"
	"github.com/convergehq/converge/cue"
)

type initOptions struct {
	kind, module, source string
}

func newInitCommand() *cobra.Command {
	var o initOptions
	c := &cobra.Command{
		Use:   "init DIR",
		Short: "Scaffold a repository and a Go provider worker that converge and pass sdktest",
		Long: `init writes a new converge repository in DIR (which must not exist or be
empty): converge.cue naming a worker, one kind (KIND: a file with declared
content, the stand-in for the API your provider will drive), one resource of
it, and the worker serving the kind in Go (worker/: reconcile, observe,
teardown and an operator verb through providers/sdk), with its acceptance test
(sdktest.RunAcceptance: create, read, no-op, update, drift healed, delete).

converge is not published as a Go module yet, so go.mod replaces it with a
checkout: --converge-source, by default the checkout the current directory is
in, if any.

Then: cd DIR && go mod tidy && go test ./worker && git init -q && git add -A &&
git commit -qm init && converge sync`,
		Example: `  converge init myrepo
  converge init myrepo --kind bucket --module example.com/platform/buckets --converge-source ~/src/converge`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return runInit(c.OutOrStdout(), c.ErrOrStderr(), args[0], o)
		},
	}
	f := c.Flags()
	f.StringVar(&o.kind, "kind", "note", "the kind's name (a DNS label)")
	f.StringVar(&o.module, "module", "", "the worker's Go module path (default example.com/DIR's name)")
	f.StringVar(&o.source, "converge-source", "", "a converge checkout go.mod points at (default: the one the current directory is in)")
	return c
}

func runInit(out, errOut io.Writer, dir string, o initOptions) error {
	if !cue.ValidName(o.kind) {
		return usageErr("init: --kind %q is not a DNS label (lowercase letters, digits and '-')", o.kind)
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return usageErr("init: %s is not empty: init writes a new repository", dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if o.module == "" {
		o.module = "example.com/" + strings.ToLower(filepath.Base(abs))
	}
	if o.source == "" {
		o.source = scaffold.ConvergeCheckout()
	}
	if o.source != "" {
		if o.source, err = filepath.Abs(o.source); err != nil {
			return fmt.Errorf("init: %w", err)
		}
		if !scaffold.IsConvergeCheckout(o.source) {
			return usageErr("init: --converge-source %s: not a converge checkout (no go.mod of github.com/convergehq/converge)", o.source)
		}
	}
	written, err := scaffold.Write(abs, scaffold.Data{Kind: o.kind, Module: o.module, Source: filepath.ToSlash(o.source)})
	for _, f := range written {
		fmt.Fprintf(out, "wrote %s\n", filepath.Join(dir, f))
	}
	if err != nil {
		return err
	}
	if o.source == "" {
		fmt.Fprintln(errOut, "note: go.mod needs a replace directive pointing at a converge checkout (--converge-source): converge is not published as a module yet")
	}
	fmt.Fprintf(out, "next: cd %s && go mod tidy && go test ./worker && git init -q && git add -A && git commit -qm init && converge sync\n", dir)
	return nil
}
