package cue

import (
	"fmt"
	"strings"
	"testing"

	"github.com/convergehq/converge"
)

// TestParseIntBases: the fast strconv.ParseInt refuses the bases CUE
// refuses (big.Int's SetString panics on them) with an error, not a
// panic.
func TestParseIntBases(t *testing.T) {
	f := fastBuiltins["strconv.ParseInt"].fn
	for _, base := range []int64{-1, 1, 63, 1 << 40} {
		t.Run(fmt.Sprint(base), func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("ParseInt(%q, %d, 64) panics: %v", "1", base, r)
				}
			}()
			if v, err := f([4]any{"1", base, int64(64)}); err == nil {
				t.Errorf("ParseInt(%q, %d, 64) = %v, want an error", "1", base, v)
			}
		})
	}
}

// TestComposeCUEKeepsSpecValues: the CUE fallback reads the spec as CUE
// reads its JSON: a struct of the spec embedded in a comprehension's
// body, or passed through a parameter of type _, keeps its fields (a
// float keeps each spec off the fast path).
func TestComposeCUEKeepsSpecValues(t *testing.T) {
	tests := []struct {
		name, expr, want string
	}{
		{"a struct loop variable embedded", `{children: [for c in spec.c {c}]}`, `child "a" v1 "x" pcr="" spec={"v":1.5}`},
		{"a struct through a _ parameter", `{#w: {v: _}, children: [for c in spec.c {(#w & {v: c}).v}]}`, `child "a" v1 "x" pcr="" spec={"v":1.5}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := composeKind(t, tt.expr)
			r := s.Compose(&converge.Task{ID: "t1", Kind: "t", KindVersion: 1, Reaction: converge.ReactionCompose,
				Spec: []byte(`{"c":[{"kind":"a","name":"x","spec":{"v":1.5}}]}`)})
			if r.Outcome != converge.OutcomeOK {
				t.Fatalf("compose: %s", r.Message)
			}
			if got := composition(t, r.Children, r.Edges); !strings.Contains(got, tt.want) {
				t.Errorf("composition %s, want %s", got, tt.want)
			}
			if st := s.ComposeStats(); st.FellBack != 1 {
				t.Errorf("compose stats %+v, want one fallback", st)
			}
		})
	}
}

// TestFlowOrder: an edge's flows come out in one order, by target and
// then source, on both paths, however often it is composed.
func TestFlowOrder(t *testing.T) {
	const expr = `{let S = spec, children: [{kind: "a", name: "c", spec: {x: S.x}}], edges: [{consumer: "a/c", producer: "b/p", flows: {"status.b": "spec.x", "status.a": "spec.x", "status.c": "spec.w"}}]}`
	want := []converge.ValueFlow{{From: "c", To: "w"}, {From: "a", To: "x"}, {From: "b", To: "x"}}
	s := composeKind(t, expr)
	for _, spec := range []string{`{"x":1}`, `{"x":1.5}`} { // fast, then CUE
		for i := range 20 {
			_, ed, err := s.compose(tRef, []byte(spec))
			if err != nil {
				t.Fatal(err)
			}
			if len(ed) != 1 || fmt.Sprint(ed[0].Flows) != fmt.Sprint(want) {
				t.Fatalf("spec %s, compose %d: edges %v, want flows %v", spec, i, ed, want)
			}
		}
	}
	if st := s.ComposeStats(); st.Fast != 20 || st.FellBack != 20 {
		t.Errorf("compose stats %+v, want 20 fast and 20 through CUE", st)
	}
}

// TestCompareComposePaths: compareComposePaths finds no difference where
// the paths agree (a large composition compared on a sample of its
// parts), and the first difference where the fast path is wrong (here a
// fast composer of another expression stands in for a bug).
func TestCompareComposePaths(t *testing.T) {
	teams := func(n int) []byte {
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf(`"t%d"`, i))
		}
		return []byte(`{"teams":[` + strings.Join(names, ",") + `]}`)
	}
	const expr = `{children: [for t in spec.teams {kind: "a", name: t, spec: {n: t}}], edges: [for t in spec.teams {consumer: "a/\(t)", producer: "p/x", flows: {"status.x": "spec.y"}}]}`
	tests := []struct {
		name     string
		fastExpr string // the fast path's expression, when it differs
		spec     []byte
		want     string
	}{
		{name: "agree", spec: teams(3)},
		{name: "agree on a sample", spec: teams(compareComposeMax * 3)},
		{name: "a child's spec differs", fastExpr: strings.Replace(expr, "n: t", "n: t, m: 1", 1), spec: teams(3),
			want: `child 0: a/t0 v1 spec {"n":"t0","m":1} on the fast path, a/t0 v1 spec {"n":"t0"} through CUE`},
		{name: "a sample differs", fastExpr: strings.Replace(expr, `kind: "a"`, `kind: "b"`, 1), spec: teams(compareComposeMax * 3),
			want: "child 0: b/t0 v1"},
		{name: "a flow differs", fastExpr: strings.Replace(expr, "spec.y", "spec.z", 1), spec: teams(3),
			want: "edge 0: a/t0 -> p/x [{x z}] on the fast path, a/t0 -> p/x [{x y}] through CUE"},
		{name: "a child more", fastExpr: strings.Replace(expr, `children: [`, `children: [{kind: "z", name: "z"}, `, 1), spec: teams(1),
			want: "child 0: z/z v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := composeKind(t, expr)
			if tt.fastExpr != "" {
				other := composeKind(t, tt.fastExpr)
				c := s.composers[tRef]
				c.fc = other.composers[tRef].fc
				s.composers[tRef] = c
			}
			if s.composers[tRef].fc == nil {
				t.Fatal("the expression is not on the fast path")
			}
			got, _ := s.compareComposePaths(tRef, tt.spec)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("compareComposePaths = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestDryRunComparesPaths: with Options.CompareCompose the load's dry run
// reports a fast composition that differs from CUE's as a finding at the
// compose expression, rule COMPOSE_FAST_DIFFERS, naming the resource;
// without it, where the paths agree, or once the load compared
// compareComposeTotal children, there is none.
func TestDryRunComparesPaths(t *testing.T) {
	const expr = `{children: [for t in spec.teams {kind: "a", name: t}]}`
	tests := []struct {
		name     string
		compare  bool
		spent    int // children the load compared before
		fastExpr string
		want     string
	}{
		{name: "the paths agree", compare: true},
		{name: "the fast path differs", compare: true, fastExpr: `{children: [for t in spec.teams {kind: "b", name: t}]}`,
			want: `kinds/t.cue:3:10: compose: COMPOSE_FAST_DIFFERS: the fast path composes differently from CUE's evaluator: child 0: b/x v1 spec none on the fast path, a/x v1 spec none through CUE (composing t/r (r.cue:1)); a bug of converge's fast path: please report it`},
		{name: "not compared", fastExpr: `{children: [for t in spec.teams {kind: "b", name: t}]}`},
		{name: "over the load's budget", compare: true, spent: compareComposeTotal, fastExpr: `{children: [for t in spec.teams {kind: "b", name: t}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := composeKind(t, expr)
			if tt.fastExpr != "" {
				c := s.composers[tRef]
				c.fc = composeKind(t, tt.fastExpr).composers[tRef].fc
				s.composers[tRef] = c
			}
			l := &loader{schemas: s, opts: Options{CompareCompose: tt.compare}, res: &Result{}, compared: tt.spent,
				composers: []*composeSrc{{ref: tRef, at: parseComposeAt("kinds/t.cue:3:10")}}}
			l.res.Desired.Resources = []*converge.Resource{{Kind: "t", KindVersion: 1, Name: "r", Source: "r.cue:1", Declared: []byte(`{"teams":["x"]}`)}}
			l.dryRunComposers(nil)
			var got []string
			for _, f := range l.res.Findings {
				if f.Rule == RuleComposeDiffers {
					got = append(got, fmt.Sprintf("%s:%d:%d: %s: %s: %s", f.File, f.Line, f.Column, f.Path, f.Rule, f.Message))
				}
			}
			if want := []string{tt.want}; tt.want == "" && len(got) != 0 || tt.want != "" && fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("findings %q, want %q", got, tt.want)
			}
		})
	}
}
