// Package scaffold writes the repository `converge init` starts from:
// settings naming a worker, one kind, one resource of it, and the Go
// worker serving the kind with its acceptance test
// (sdktest.RunAcceptance), from the templates in templates/.
package scaffold

import (
	"bytes"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
)

// templates holds the templates of `converge init`: a repository
// (settings, a kind, a resource) and the Go worker serving the kind, with
// its acceptance test (sdktest.RunAcceptance).
//
//go:embed templates/*.tmpl
var templates embed.FS

// files maps each template to the file it becomes ("KIND" is the kind's
// name).
var files = []struct{ tmpl, path string }{
	{"converge.cue.tmpl", "converge.cue"},
	{"kind.cue.tmpl", "kinds/KIND.cue"},
	{"hello.cue.tmpl", "resources/hello.cue"},
	{"go.mod.tmpl", "go.mod"},
	{"gitignore.tmpl", ".gitignore"},
	{"main.go.tmpl", "worker/main.go"},
	{"provider.go.tmpl", "worker/provider.go"},
	{"provider_test.go.tmpl", "worker/provider_test.go"},
}

// Data is what the templates are filled with: the kind's name, the
// worker's Go module path, and the converge checkout its go.mod replaces
// converge with ("" for none; slash-separated).
type Data struct{ Kind, Module, Source string }

// Write writes the scaffold below dir (an absolute path) and returns the
// files it wrote, relative to dir, in order; on an error, those written
// before it.
func Write(dir string, data Data) (written []string, err error) {
	for _, f := range files {
		t, err := template.ParseFS(templates, "templates/"+f.tmpl)
		if err != nil {
			return written, fmt.Errorf("init: template %s: %w", f.tmpl, err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return written, fmt.Errorf("init: template %s: %w", f.tmpl, err)
		}
		rel := filepath.FromSlash(strings.ReplaceAll(f.path, "KIND", data.Kind))
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return written, fmt.Errorf("init: %w", err)
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			return written, fmt.Errorf("init: %w", err)
		}
		written = append(written, rel)
	}
	return written, nil
}

// ConvergeCheckout returns the converge checkout the current directory
// is in, or "".
func ConvergeCheckout() string {
	d, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if IsConvergeCheckout(d) {
			return d
		}
		up := filepath.Dir(d)
		if up == d {
			return ""
		}
		d = up
	}
}

// IsConvergeCheckout reports whether dir holds converge's own go.mod.
func IsConvergeCheckout(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(first) == "module github.com/convergehq/converge"
}
