package cue

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	cuelang "cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"

	"github.com/convergehq/converge"
)

// vpcKind returns vpc/v1 with the given spec schema.
func vpcKind(version int, spec string) *converge.Kind {
	return &converge.Kind{Name: "vpc", Version: version, SpecSchema: spec, StatusSchema: "{...}", ConfigSchema: "{}",
		Source: fmt.Sprintf("kinds/vpc-v%d.cue:1", version)}
}

// rulesOf returns the findings' rules and paths as "RULE path" lines.
func rulesOf(fs []converge.Finding) []string {
	out := []string{}
	for _, f := range fs {
		out = append(out, f.Rule+" "+f.Path)
	}
	return out
}

// TestLintRules has one row per rule and per row of the Subsume facts
// table in docs/ARCHITECTURE.md (those rows are marked "facts").
func TestLintRules(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		want     []string // "RULE path", in finding order
	}{
		{name: "identical", old: `{a: string}`, new: `{a: string}`},
		{name: "facts: optional field added", old: `{a: string}`, new: `{a: string, b?: int}`},
		{name: "facts: regular field added", old: `{a: string}`, new: `{a: string, b: string}`,
			want: []string{"REQUIRED_FIELD_ADDED vpc/v1 spec.b"}},
		{name: "facts: required field added", old: `{a: string}`, new: `{a: string, b!: string}`,
			want: []string{"REQUIRED_FIELD_ADDED vpc/v1 spec.b"}},
		{name: "facts: nested required field added", old: `{n: {a?: int}}`, new: `{n: {a?: int, b!: string}}`,
			want: []string{"REQUIRED_FIELD_ADDED vpc/v1 spec.n.b"}},
		{name: "required field below a new optional struct", old: `{a: string}`, new: `{a: string, n?: {b!: string, c: int}}`},
		{name: "regular field with a default added", old: `{a: string}`, new: `{a: string, b: *"x" | string}`},
		{name: "regular struct of optional fields added", old: `{a: string}`, new: `{a: string, n: {b?: string}}`},
		{name: "facts: field removed", old: `{a: string, b: string}`, new: `{a: string}`,
			want: []string{"FIELD_REMOVED vpc/v1 spec.b"}},
		{name: "optional field removed", old: `{a: string, b?: string}`, new: `{a: string}`,
			want: []string{"FIELD_REMOVED vpc/v1 spec.b"}},
		{name: "facts: optional became required", old: `{a?: string}`, new: `{a!: string}`,
			want: []string{"FIELD_BECAME_REQUIRED vpc/v1 spec.a"}},
		{name: "optional became regular", old: `{a?: string}`, new: `{a: string}`,
			want: []string{"FIELD_BECAME_REQUIRED vpc/v1 spec.a"}},
		{name: "required became optional", old: `{a!: string}`, new: `{a?: string}`},
		{name: "facts: type changed", old: `{a: string}`, new: `{a: int}`,
			want: []string{"TYPE_CHANGED vpc/v1 spec.a"}},
		{name: "type narrowed from a disjunction", old: `{a: int | string}`, new: `{a: int}`,
			want: []string{"TYPE_CHANGED vpc/v1 spec.a"}},
		{name: "type widened", old: `{a: int}`, new: `{a: int | string}`},
		{name: "facts: bound tightened", old: `{a: int & >=1}`, new: `{a: int & >=2}`,
			want: []string{"CONSTRAINT_NARROWED vpc/v1 spec.a"}},
		{name: "bound widened", old: `{a: int & >=1 & <=10}`, new: `{a: int & >=0 & <=10}`},
		{name: "facts: enum narrowed", old: `{a: "x" | "y" | "z"}`, new: `{a: "x" | "y"}`,
			want: []string{"CONSTRAINT_NARROWED vpc/v1 spec.a"}},
		{name: "enum value added", old: `{a: "x" | "y"}`, new: `{a: "x" | "y" | "z"}`},
		{name: "facts: regex added", old: `{a: string}`, new: `{a: =~"^a"}`,
			want: []string{"CONSTRAINT_NARROWED vpc/v1 spec.a"}},
		{name: "regex changed", old: `{a: =~"^a"}`, new: `{a: =~"^b"}`,
			want: []string{"CONSTRAINT_NARROWED vpc/v1 spec.a"}},
		{name: "facts: list element narrowed", old: `{a: [...string]}`, new: `{a: [...int]}`,
			want: []string{"ELEMENT_NARROWED vpc/v1 spec.a[*]"}},
		{name: "list element constraint narrowed", old: `{a: [...string]}`, new: `{a: [...=~"^x"]}`,
			want: []string{"ELEMENT_NARROWED vpc/v1 spec.a[*]"}},
		{name: "list element widened", old: `{a: [...int]}`, new: `{a: [...(int | string)]}`},
		{name: "open list made a tuple", old: `{a: [...string]}`, new: `{a: [string, string]}`,
			want: []string{"ELEMENT_NARROWED vpc/v1 spec.a"}},
		{name: "required field added in list elements", old: `{teams: [...{name: string}]}`, new: `{teams: [...{name: string, lead!: string}]}`,
			want: []string{"REQUIRED_FIELD_ADDED vpc/v1 spec.teams[*].lead"}},
		{name: "optional field added in list elements", old: `{teams: [...{name: string}]}`, new: `{teams: [...{name: string, lead?: string}]}`},
		{name: "facts: identical strings.MinRunes(1)", old: "import \"strings\"\n{a: strings.MinRunes(1)}",
			new: "import \"strings\"\n{a: strings.MinRunes(1)}"},
		{name: "identical strings.MinRunes(1) and an optional field added", old: "import \"strings\"\n{a: strings.MinRunes(1)}",
			new: "import \"strings\"\n{a: strings.MinRunes(1), b?: int}"},
		{name: "strings.MinRunes tightened", old: "import \"strings\"\n{a: strings.MinRunes(1)}",
			new: "import \"strings\"\n{a: strings.MinRunes(3)}", want: []string{"CONSTRAINT_NARROWED vpc/v1 spec.a"}},
		{name: "facts: default changed", old: `{a: *"x" | "y"}`, new: `{a: *"y" | "x"}`,
			want: []string{"DEFAULT_CHANGED vpc/v1 spec.a"}},
		{name: "default removed", old: `{a: *"x" | "y"}`, new: `{a: "x" | "y"}`,
			want: []string{"DEFAULT_CHANGED vpc/v1 spec.a"}},
		{name: "default added", old: `{a: "x" | "y"}`, new: `{a: *"x" | "y"}`},
		{name: "facts: open struct closed", old: `{n: {a: int, ...}}`, new: `{n: {a: int}}`,
			want: []string{"STRUCT_CLOSED vpc/v1 spec.n"}},
		{name: "map pattern removed", old: `{tags?: [string]: string}`, new: `{tags?: {}}`,
			want: []string{"STRUCT_CLOSED vpc/v1 spec.tags"}},
		{name: "map value type changed", old: `{tags?: [string]: string}`, new: `{tags?: [string]: int}`,
			want: []string{"TYPE_CHANGED vpc/v1 spec.tags[string]"}},
		{name: "map value widened", old: `{tags?: [string]: string}`, new: `{tags?: [string]: string | int}`},
		{name: "field removed from an open struct", old: `{n: {a: int, b?: string, ...}}`, new: `{n: {a: int, ...}}`},
		{name: "field removed, now under a map pattern", old: `{n: {a?: string, [string]: string}}`, new: `{n: {[string]: string}}`},
		{name: "field removed, now under a narrower map pattern", old: `{n: {a?: string, [string]: string}}`, new: `{n: {[string]: "x"}}`,
			want: []string{"CONSTRAINT_NARROWED vpc/v1 spec.n.a", "CONSTRAINT_NARROWED vpc/v1 spec.n[string]"}},
		{name: "field declared in an open struct", old: `{n: {a: int, ...}}`, new: `{n: {a: int, b?: string, ...}}`,
			want: []string{"TYPE_CHANGED vpc/v1 spec.n.b"}},
		{name: "field declared under a map pattern, same constraint", old: `{n: {[string]: string}}`, new: `{n: {[string]: string, b?: string}}`},
		{name: "struct opened", old: `{n: {a: int}}`, new: `{n: {a: int, ...}}`},
		{name: "unclassified: a disjunction of structs narrowed", old: `{n: {a: int} | {b: int}}`, new: `{n: {a: int}}`,
			want: []string{"UNCLASSIFIED_CHANGE vpc/v1 spec.n"}},
		{name: "a struct validator tightened", old: "import \"struct\"\n{n: struct.MinFields(1) & {a?: int, b?: int}}",
			new: "import \"struct\"\n{n: struct.MinFields(2) & {a?: int, b?: int}}", want: []string{"CONSTRAINT_NARROWED vpc/v1 spec.n"}},
		{name: "list validator tightened", old: "import \"list\"\n{a: list.MinItems(1) & [...string]}",
			new: "import \"list\"\n{a: list.MinItems(2) & [...string]}", want: []string{"CONSTRAINT_NARROWED vpc/v1 spec.a"}},
		{name: "unclassified: a pattern label narrowed (whole-value Subsume)", old: `{tags?: [=~"^a"]: int}`, new: `{tags?: [=~"^ab"]: int}`,
			want: []string{"UNCLASSIFIED_CHANGE vpc/v1 spec"}},
		{name: "struct validator unchanged, optional field added", old: "import \"struct\"\n{n: struct.MinFields(1) & {a?: int}}",
			new: "import \"struct\"\n{n: struct.MinFields(1) & {a?: int, b?: int}}"},
		{name: "list validator unchanged, element widened", old: "import \"list\"\n{a: list.MinItems(1) & [...int]}",
			new: "import \"list\"\n{a: list.MinItems(1) & [...(int | string)]}"},
		{name: "definition reference unchanged", old: `{#T: {n: string}, a: [...#T]}`, new: `{#T: {n: string}, a: [...#T], b?: #T}`},
		{name: "schema invalid", old: `{a: string}`, new: `{a: }`,
			want: []string{"SCHEMA_INVALID vpc/v1 spec"}},
		{name: "two rules in one change", old: `{a: string, b?: int}`, new: `{a: int, c!: string}`,
			want: []string{"FIELD_REMOVED vpc/v1 spec.b", "REQUIRED_FIELD_ADDED vpc/v1 spec.c", "TYPE_CHANGED vpc/v1 spec.a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Lint([]*converge.Kind{vpcKind(1, tt.old)}, []*converge.Kind{vpcKind(1, tt.new)})
			want := tt.want
			if want == nil {
				want = []string{}
			}
			gotRules, wantRules := rulesOf(got), slices.Clone(want)
			slices.Sort(gotRules)
			slices.Sort(wantRules)
			if !slices.Equal(gotRules, wantRules) {
				t.Errorf("Lint rules = %q, want %q\nfindings:\n%s", gotRules, wantRules, findingLines(got))
			}
			for _, f := range got {
				if !strings.Contains(f.Message, "kind_version 2") {
					t.Errorf("finding %s: message lacks the remedy: %s", f.Rule, f.Message)
				}
				if got, want := f.File, "kinds/vpc-v1.cue"; got != want {
					t.Errorf("finding %s: file = %q, want %q", f.Rule, got, want)
				}
			}
		})
	}
}

func findingLines(fs []converge.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "  %s: %s\n", f.Rule, f)
	}
	return b.String()
}

// TestLintKinds covers what is compared: kind versions removed or added,
// the config schema, and not the status schema.
func TestLintKinds(t *testing.T) {
	v1 := vpcKind(1, `{a: string}`)
	v2 := vpcKind(2, `{a: string, region: string}`)
	tests := []struct {
		name      string
		old, new  []*converge.Kind
		wantRules []string
	}{
		{name: "kind version removed", old: []*converge.Kind{v1, v2}, new: []*converge.Kind{v2},
			wantRules: []string{"KV_REMOVED vpc/v1"}},
		{name: "kind version added", old: []*converge.Kind{v1}, new: []*converge.Kind{v1, v2}},
		{name: "new kind", old: nil, new: []*converge.Kind{v1}},
		{name: "config field became required",
			old:       []*converge.Kind{{Name: "vpc", Version: 1, SpecSchema: "{}", ConfigSchema: `{bucket?: string}`, Source: "kinds/vpc-v1.cue:1"}},
			new:       []*converge.Kind{{Name: "vpc", Version: 1, SpecSchema: "{}", ConfigSchema: `{bucket!: string}`, Source: "kinds/vpc-v1.cue:1"}},
			wantRules: []string{"FIELD_BECAME_REQUIRED vpc/v1 config.bucket"}},
		{name: "status narrowed is not breaking",
			old: []*converge.Kind{{Name: "vpc", Version: 1, SpecSchema: "{}", StatusSchema: `{vpc_id?: string}`, Source: "kinds/vpc-v1.cue:1"}},
			new: []*converge.Kind{{Name: "vpc", Version: 1, SpecSchema: "{}", StatusSchema: `{vpc_id!: int}`, Source: "kinds/vpc-v1.cue:1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := rulesOf(Lint(tt.old, tt.new))
			want := tt.wantRules
			if want == nil {
				want = []string{}
			}
			if !slices.Equal(got, want) {
				t.Errorf("Lint rules = %q, want %q", got, want)
			}
		})
	}
}

// TestLintPositions checks that findings about a CUE kind file point at the
// field in the new revision, name the old position, and advise the next
// free kind_version.
func TestLintPositions(t *testing.T) {
	oldTree := fstest.MapFS{"kinds/vpc-v1.cue": {Data: []byte(`type:         "kind"
kind:         "vpc"
kind_version: 1
spec: {
	account_id: =~"^.{12}$"
	cidr:       string
	teams: [...{name: string}]
}
`)}}
	newTree := fstest.MapFS{"kinds/vpc-v1.cue": {Data: []byte(`// a comment moves everything down
type:         "kind"
kind:         "vpc"
kind_version: 1
spec: {
	account_id: =~"^.{12}$"
	cidr:       int
	region:     string
	teams: [...#Team]
	#Team: {name: string, lead!: string}
}
`)}}
	load := func(tree fstest.MapFS) []*converge.Kind {
		res, err := Load(tree, ".", Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Valid() {
			t.Fatalf("load: %v", res.Findings)
		}
		return res.Desired.Kinds
	}
	v2 := vpcKind(2, "{}")
	got := LintTrees(load(oldTree), append(load(newTree), v2), oldTree, newTree)
	want := []struct{ rule, at, oldAt string }{
		{"TYPE_CHANGED", "kinds/vpc-v1.cue:7:2", "kinds/vpc-v1.cue:6:2"},
		{"REQUIRED_FIELD_ADDED", "kinds/vpc-v1.cue:8:2", "kinds/vpc-v1.cue:4:1"},
		{"REQUIRED_FIELD_ADDED", "kinds/vpc-v1.cue:10:24", "kinds/vpc-v1.cue:7:13"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d findings, want %d:\n%s", len(got), len(want), findingLines(got))
	}
	for i, w := range want {
		f := got[i]
		if got := fmt.Sprintf("%s:%d:%d", f.File, f.Line, f.Column); f.Rule != w.rule || got != w.at {
			t.Errorf("finding %d = %s at %s, want %s at %s", i, f.Rule, got, w.rule, w.at)
		}
		if !strings.Contains(f.Message, "was "+w.oldAt) {
			t.Errorf("finding %d message lacks the old position %s: %s", i, w.oldAt, f.Message)
		}
		if !strings.Contains(f.Message, "ship it as kind_version 3") {
			t.Errorf("finding %d message lacks the remedy kind_version 3: %s", i, f.Message)
		}
	}
}

// BenchmarkLintClassic lints the classic example's seven kinds against a
// copy with vpc v1's additive change: the per-commit cost of Lint itself,
// without loading (docs/BENCHMARKS.md, "Lint").
func BenchmarkLintClassic(b *testing.B) {
	root := filepath.Join("..", "examples", "classic")
	res, err := Load(os.DirFS(root), ".", Options{})
	if err != nil || !res.Valid() {
		b.Fatalf("load classic: %v %v", err, res.Findings)
	}
	add, err := os.ReadFile(filepath.Join("..", "testdata", "fixtures", "classic", "vpc-v1-additive.cue"))
	if err != nil {
		b.Fatal(err)
	}
	newTree := fstest.MapFS{"kinds/vpc-v1.cue": {Data: add}}
	next, err := Load(newTree, ".", Options{})
	if err != nil || len(next.Desired.Kinds) != 1 {
		b.Fatalf("load additive vpc v1: %v %v", err, next.Findings)
	}
	newKinds := []*converge.Kind{next.Desired.Kinds[0]}
	for _, k := range res.Desired.Kinds {
		if k.Ref() != next.Desired.Kinds[0].Ref() {
			newKinds = append(newKinds, k)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if fs := Lint(res.Desired.Kinds, newKinds); len(fs) != 0 {
			b.Fatalf("additive change: %v", fs)
		}
	}
}

// ExampleLint compares vpc v1 as applied with a candidate that adds a
// required field and an optional one: only the required field breaks.
func ExampleLint() {
	applied := []*converge.Kind{{Name: "vpc", Version: 1, Source: "kinds/vpc-v1.cue:1",
		SpecSchema: `{cidr: string, tags?: [string]: string}`}}
	candidate := []*converge.Kind{{Name: "vpc", Version: 1, Source: "kinds/vpc-v1.cue:1",
		SpecSchema: `{cidr: string, tags?: [string]: string, owner?: string, region!: string}`}}
	for _, f := range Lint(applied, candidate) {
		fmt.Println(f.Rule, f.Path)
		fmt.Println(f.Message)
	}
	// Output:
	// REQUIRED_FIELD_ADDED vpc/v1 spec.region
	// new required string field; documents without it are refused (an optional region? or a default would be compatible) (at kinds/vpc-v1.cue:1:1, was kinds/vpc-v1.cue:1:1); ship it as kind_version 2
}

// TestSubsumeFacts pins the rows of the Subsume facts table in
// docs/ARCHITECTURE.md ("Breaking changes: the Subsume facts") that the
// structural walk exists for: cuelang.org/go's Subsume (new ⊒ old, default
// mode, on the compiled #S definitions) answers these rows wrongly. If a
// CUE upgrade fixes one, this test fails: re-measure before simplifying
// Lint.
func TestSubsumeFacts(t *testing.T) {
	tests := []struct {
		name         string
		old, new     string
		wantBreaking bool // what Subsume says (the wrong answer)
	}{
		{name: "required field added", old: `{a: string}`, new: `{a: string, b!: string}`, wantBreaking: false},
		{name: "nested required field added", old: `{n: {a?: int}}`, new: `{n: {a?: int, b!: string}}`, wantBreaking: false},
		{name: "list element narrowed", old: `{a: [...string]}`, new: `{a: [...int]}`, wantBreaking: false},
		{name: "identical strings.MinRunes(1)", old: "import \"strings\"\n{a: strings.MinRunes(1)}",
			new: "import \"strings\"\n{a: strings.MinRunes(1)}", wantBreaking: true},
		{name: "default changed", old: `{a: *"x" | "y"}`, new: `{a: *"y" | "x"}`, wantBreaking: false},
		{name: "open struct closed", old: `{n: {a: int, ...}}`, new: `{n: {a: int}}`, wantBreaking: false},
	}
	l := &linter{ctx: cuecontext.New()}
	compile := func(src string) cuelang.Value {
		t.Helper()
		w, err := wrapSchema("s", src, false)
		if err != nil {
			t.Fatal(err)
		}
		v, err := build(l.ctx, "s", w)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, n := compile(tt.old), compile(tt.new)
			if got, want := n.Subsume(o) != nil, tt.wantBreaking; got != want {
				t.Errorf("Subsume says breaking = %v, want %v (the measured, wrong answer)", got, want)
			}
			lintBreaking := len(Lint([]*converge.Kind{vpcKind(1, tt.old)}, []*converge.Kind{vpcKind(1, tt.new)})) > 0
			if lintBreaking == tt.wantBreaking {
				t.Errorf("Lint says breaking = %v, the same as Subsume's wrong answer", lintBreaking)
			}
		})
	}
}
