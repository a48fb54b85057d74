package cue

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/txtar"
)

var updateCorpus = flag.Bool("update", false, "rewrite the want sections of testdata/compose/*.txtar and its CUE_VERSION from CUE's evaluator")

// corpusDir holds the golden corpus of compose expressions, and
// CUE_VERSION the cuelang.org/go version its want sections were made
// with.
const corpusDir = "testdata/compose"

// refreshCorpus says how to re-run the corpus.
const refreshCorpus = "re-run the corpus: go test ./cue -run 'TestComposeCorpus$' -update, review the diff of cue/testdata/compose (a want that changed is CUE's behaviour moving: make the fast path follow it or leave the construct out of the subset, docs/ARCHITECTURE.md \"Composition in CUE\"), and commit it"

// TestComposeCorpus runs each expression of the golden corpus
// (testdata/compose/*.txtar) through both paths. A file holds a comment,
// an "imports" section (one path a line, optional), an "expr" section,
// "spec N" sections and, for each, a "want N" section: how the spec
// composes ("fast", "fallback": the fast path left it to CUE, "cue": the
// expression is off the fast path) and CUE's composition or error; a
// "path" section says whether the expression is on the fast path and if
// not why. The fast path must give CUE's composition exactly or fall
// back (bothWays), and CUE's answer must be the recorded one: a change
// means CUE's evaluator moved (TestComposeCorpusCUEVersion). -update
// rewrites the want and path sections.
func TestComposeCorpus(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(corpusDir, "*.txtar"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus in %s: %v", corpusDir, err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			ar, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			sections := map[string]string{}
			for _, f := range ar.Files {
				sections[f.Name] = string(f.Data)
			}
			expr := strings.TrimSpace(sections["expr"])
			if expr == "" {
				t.Fatal("no expr section")
			}
			s := composeKind(t, expr, strings.Fields(sections["imports"])...)
			fast, why, _ := s.ComposePath(tRef)
			path := "fast\n"
			if !fast {
				path = "off the fast path: " + why + "\n"
			}
			got := map[string]string{"path": path}
			for _, f := range ar.Files {
				n, ok := strings.CutPrefix(f.Name, "spec ")
				if !ok {
					continue
				}
				spec := strings.TrimSpace(string(f.Data))
				composedFast, out, cerr := bothWays(t, s, spec)
				how := "cue"
				switch {
				case composedFast:
					how = "fast"
				case fast:
					how = "fallback"
				}
				if cerr != nil {
					out = "error: " + cerr.Error() + "\n"
				}
				got["want "+n] = how + "\n" + out
			}
			if *updateCorpus {
				var kept []txtar.File
				for _, f := range ar.Files {
					if f.Name != "path" && !strings.HasPrefix(f.Name, "want ") {
						kept = append(kept, f)
						if n, ok := strings.CutPrefix(f.Name, "spec "); ok {
							kept = append(kept, txtar.File{Name: "want " + n, Data: []byte(got["want "+n])})
						}
					}
				}
				ar.Files = append([]txtar.File{{Name: "path", Data: []byte(path)}}, kept...)
				if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			for name, want := range sections {
				if name != "path" && !strings.HasPrefix(name, "want ") {
					continue
				}
				if g, ok := got[name]; !ok {
					t.Errorf("section %q has no spec", name)
				} else if g != want {
					t.Errorf("%s:\n%s\nrecorded:\n%s\n(%s)", name, g, want, refreshCorpus)
				}
			}
			for name := range got {
				if _, ok := sections[name]; !ok {
					t.Errorf("no section %q: %s", name, refreshCorpus)
				}
			}
		})
	}
	if *updateCorpus {
		if err := os.WriteFile(filepath.Join(corpusDir, "CUE_VERSION"), []byte(cueVersion(t)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestComposeCorpusCUEVersion fails when the cuelang.org/go this package
// is built with is not the version the corpus was checked against: the
// fast path re-implements CUE's evaluation, so a new CUE must be run
// against the corpus (and the fuzz targets) before it is trusted.
func TestComposeCorpusCUEVersion(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(corpusDir, "CUE_VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cueVersion(t), string(bytes.TrimSpace(b)); got != want {
		t.Errorf("cuelang.org/go is %s, but the compose corpus was checked against %s: %s", got, want, refreshCorpus)
	}
}

// cueVersion is the version of cuelang.org/go the test binary is built
// with: from its build info when that lists modules, else from the
// module's go.mod (a replace directive of it included).
func cueVersion(tb testing.TB) string {
	tb.Helper()
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path != "cuelang.org/go" {
				continue
			}
			if m.Replace != nil {
				return fmt.Sprintf("%s => %s %s", m.Version, m.Replace.Path, m.Replace.Version)
			}
			return m.Version
		}
	}
	b, err := os.ReadFile("../go.mod")
	if err != nil {
		tb.Fatal(err)
	}
	var version, replace string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		switch {
		case len(f) >= 2 && f[0] == "cuelang.org/go" && strings.HasPrefix(f[1], "v"):
			version = f[1]
		case len(f) >= 3 && (f[0] == "replace" && f[1] == "cuelang.org/go" || f[0] == "cuelang.org/go" && f[1] == "=>"):
			_, r, _ := strings.Cut(line, "=>")
			replace = strings.Join(strings.Fields(r), " ")
		}
	}
	if version == "" {
		tb.Fatal("go.mod requires no cuelang.org/go")
	}
	if replace != "" {
		return version + " => " + replace
	}
	return version
}

// TestComposeCorpusCovers: the corpus holds an expression for each kind
// of difference issue 23 found, so none is dropped by accident.
func TestComposeCorpusCovers(t *testing.T) {
	for _, name := range []string{"def_shadowed_type", "def_shadowed_let", "def_chain", "def_chain_closed", "selector_hidden",
		"underscore", "def_order", "def_order_other", "negative_zero", "fallback_values", "flows_order", "parseint_base"} {
		if _, err := os.Stat(filepath.Join(corpusDir, name+".txtar")); err != nil {
			t.Errorf("corpus: %v", err)
		}
	}
}
