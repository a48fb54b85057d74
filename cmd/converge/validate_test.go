package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateCommand runs `converge validate` in-process on the classic
// example and on a broken copy of one of its files, checking the exit class
// and both output formats.
func TestValidateCommand(t *testing.T) {
	root := repoRoot(t)
	broken := t.TempDir()
	if err := os.WriteFile(filepath.Join(broken, "r.yaml"), []byte("type: resource\nkind: nope\nkind_version: 1\nname: r\nspec: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Two kinds composing in CUE: one on the fast path, one off it.
	composers := t.TempDir()
	if err := os.WriteFile(filepath.Join(composers, "k.cue"), []byte(`type: "kind", kind: "fast", kind_version: 1, reactions: ["compose"]
spec: teams: [...string]
compose: {children: [for t in spec.teams {kind: "slow", name: t}]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// On the fast path, but not in the parts shape (spec is read outside
	// the comprehension): no deltas.
	if err := os.WriteFile(filepath.Join(composers, "f.cue"), []byte(`type: "kind", kind: "flat", kind_version: 1, reactions: ["compose"]
spec: teams: [...string]
compose: {n: len(spec.teams), children: [for t in spec.teams {kind: "slow", name: t}]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// Off the fast path because the subset cannot follow CUE there.
	if err := os.WriteFile(filepath.Join(composers, "c.cue"), []byte(`type: "kind", kind: "chain", kind_version: 1, reactions: ["compose"]
spec: teams: [...string]
compose: {#d: {a: string}, children: [for t in spec.teams {kind: "slow", name: (#d & {a: "x"} & {a: t}).a}]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(composers, "s.cue"), []byte(`import "strings"

type: "kind", kind: "slow", kind_version: 1, reactions: ["compose"]
spec: teams: [...string]
compose: {children: [for t in spec.teams {kind: "fast", name: strings.Repeat(t, 2)}]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		wantFailed bool // exit 1
		wantUsage  bool // exit 2
		wantOut    string
	}{
		{name: "classic", args: []string{"validate", filepath.Join(root, "examples", "classic")}, wantOut: "21 documents, 7 kinds, 0 errors\n"},
		{name: "invalid", args: []string{"validate", broken}, wantFailed: true,
			wantOut: "r.yaml:2:1: kind: unknown kind \"nope\"\n1 document, 0 kinds, 1 error\n"},
		{name: "composers", args: []string{"validate", composers}, wantOut: "c.cue:3:10: note: chain v1 composes through CUE's evaluator, ~30x slower than the fast path (outside its subset: a chain of unifications with a definition: only #d & {...} is on the fast path (CUE unifies every conjunct))\n" +
			"f.cue:3:10: note: flat v1 composes on the fast path\n" +
			"k.cue:3:10: note: fast v1 composes on the fast path, and a recompose composes only the changed elements of its list\n" +
			"s.cue:5:10: note: slow v1 composes through CUE's evaluator, ~30x slower than the fast path (outside its subset: builtin strings.Repeat/2)\n" +
			"4 documents, 4 kinds, 0 errors\n"},
		{name: "missing dir", args: []string{"validate", filepath.Join(broken, "nope")}, wantUsage: true},
		{name: "bad output", args: []string{"validate", "-o", "xml", broken}, wantUsage: true},
		{name: "two dirs", args: []string{"validate", broken, broken}, wantUsage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newRootCommand()
			var out bytes.Buffer
			c.SetArgs(tt.args)
			c.SetOut(&out)
			c.SetErr(&out)
			err := c.Execute()
			var f errFailed
			if got, want := errors.As(err, &f), tt.wantFailed; got != want {
				t.Errorf("failed (exit 1) = %v, want %v (err %v)", got, want, err)
			}
			if got, want := err != nil && !errors.As(err, &f), tt.wantUsage; got != want {
				t.Errorf("usage error (exit 2) = %v, want %v (err %v)", got, want, err)
			}
			if tt.wantOut != "" {
				if got := out.String(); got != tt.wantOut {
					t.Errorf("output:\n%s\nwant:\n%s", got, tt.wantOut)
				}
			}
		})
	}

	c := newRootCommand()
	var out bytes.Buffer
	c.SetArgs([]string{"validate", "-o", "json", broken})
	c.SetOut(&out)
	if err := c.Execute(); err == nil {
		t.Fatal("want exit 1")
	}
	var rep struct {
		Errors []struct {
			File, Path, Rule, Message string
			Line, Column              int
		} `json:"errors"`
		Documents, Kinds int
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("json output: %v\n%s", err, out.String())
	}
	if len(rep.Errors) != 1 || rep.Documents != 1 || rep.Kinds != 0 {
		t.Fatalf("report = %+v", rep)
	}
	e := rep.Errors[0]
	if got, want := strings.Join([]string{e.File, e.Path, e.Rule}, " "), "r.yaml kind KIND_UNKNOWN"; got != want || e.Line != 2 || e.Column != 1 {
		t.Errorf("error = %+v, want r.yaml:2:1 kind KIND_UNKNOWN", e)
	}
}
