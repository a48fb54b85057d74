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
