package main

import (
	"bytes"
	"embed"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge/cue"
)

// scaffold holds the templates of `converge init`: a repository (settings,
// a kind, a resource) and the Go worker serving the kind, with its
// acceptance test (sdktest.RunAcceptance).
//
//go:embed scaffold/*.tmpl
var scaffold embed.FS

// scaffoldFiles maps each template to the file it becomes ("KIND" is the
// kind's name).
var scaffoldFiles = []struct{ tmpl, path string }{
	{"converge.cue.tmpl", "converge.cue"},
	{"kind.cue.tmpl", "kinds/KIND.cue"},
	{"hello.cue.tmpl", "resources/hello.cue"},
	{"go.mod.tmpl", "go.mod"},
	{"gitignore.tmpl", ".gitignore"},
	{"main.go.tmpl", "worker/main.go"},
	{"provider.go.tmpl", "worker/provider.go"},
	{"provider_test.go.tmpl", "worker/provider_test.go"},
}

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
		o.source = convergeCheckout()
	}
	if o.source != "" {
		if o.source, err = filepath.Abs(o.source); err != nil {
			return fmt.Errorf("init: %w", err)
		}
		if !isConvergeCheckout(o.source) {
			return usageErr("init: --converge-source %s: not a converge checkout (no go.mod of github.com/convergehq/converge)", o.source)
		}
	}
	data := struct{ Kind, Module, Source string }{o.kind, o.module, filepath.ToSlash(o.source)}
	for _, f := range scaffoldFiles {
		t, err := template.ParseFS(scaffold, "scaffold/"+f.tmpl)
		if err != nil {
			return fmt.Errorf("init: template %s: %w", f.tmpl, err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return fmt.Errorf("init: template %s: %w", f.tmpl, err)
		}
		path := filepath.Join(abs, filepath.FromSlash(strings.ReplaceAll(f.path, "KIND", o.kind)))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("init: %w", err)
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("init: %w", err)
		}
		fmt.Fprintf(out, "wrote %s\n", filepath.Join(dir, filepath.FromSlash(strings.ReplaceAll(f.path, "KIND", o.kind))))
	}
	if o.source == "" {
		fmt.Fprintln(errOut, "note: go.mod needs a replace directive pointing at a converge checkout (--converge-source): converge is not published as a module yet")
	}
	fmt.Fprintf(out, "next: cd %s && go mod tidy && go test ./worker && git init -q && git add -A && git commit -qm init && converge sync\n", dir)
	return nil
}

// convergeCheckout returns the converge checkout the current directory
// is in, or "".
func convergeCheckout() string {
	d, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if isConvergeCheckout(d) {
			return d
		}
		up := filepath.Dir(d)
		if up == d {
			return ""
		}
		d = up
	}
}

// isConvergeCheckout reports whether dir holds converge's own go.mod.
func isConvergeCheckout(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(first) == "module github.com/convergehq/converge"
}
