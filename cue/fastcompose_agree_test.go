package cue

import (
	"strings"
	"testing"
)

// TestFastComposeAgreesWithCUE: each kind of difference a differential
// run between the fast path and CUE found (issue 23) either composes as
// CUE does or is outside the subset (wantWhy: ComposePath says why, at
// compile time) or falls back for that spec (wantFast false).
func TestFastComposeAgreesWithCUE(t *testing.T) {
	tests := []struct {
		name     string
		imports  []string
		expr     string
		spec     string
		wantFast bool   // the fast path composes the spec
		wantWhy  string // the expression is outside the subset, for this reason
	}{
		// 1. Type names shadowed by a field or a let.
		{
			name:    "a field named like a type is no type",
			expr:    `{#port: {number: int, weight: number}, children: [for p in spec.ports {kind: "p", name: "p\(p)", spec: #port & {number: p, weight: 5}}]}`,
			spec:    `{"ports":[80]}`,
			wantWhy: "#port.weight is not a parameter",
		},
		{
			name:     "a field named like a type is a reference",
			expr:     `{#port: {number: int, weight: number}, children: [for p in spec.ports {kind: "p", name: "p\(p)", spec: #port & {number: p}}]}`,
			spec:     `{"ports":[80]}`,
			wantFast: true,
		},
		{
			name:    "a let named like a type",
			expr:    `{let string = "x", #d: {a: string, b: "\(a)!"}, children: [for t in spec.teams {kind: "k", name: t, spec: #d & {a: t}}]}`,
			spec:    `{"teams":["y"]}`,
			wantWhy: "reference string: a definition reads no field or let",
		},
		{
			name:    "a top-level field named int",
			expr:    `{int: 3, #d: {n: int}, children: [for t in spec.teams {kind: "k", name: t, spec: #d & {n: 4}}]}`,
			spec:    `{"teams":["y"]}`,
			wantWhy: "reference int: a definition reads no field or let",
		},
		// 2. Chained unification.
		{
			name:    "a definition unified with two literals",
			expr:    `{#d: {a: string, b: string}, children: [for t in spec.teams {kind: "k", name: t, spec: #d & {a: "x"} & {a: t, b: "y"}}]}`,
			spec:    `{"teams":["z"]}`,
			wantWhy: "chain",
		},
		{
			name:    "a chain with a field the definition lacks",
			expr:    `{#d: {a: string, b: string}, children: [for t in spec.teams {kind: "k", name: t, spec: #d & {zzz: 1} & {a: t, b: "y"}}]}`,
			spec:    `{"teams":["z"]}`,
			wantWhy: "chain",
		},
		{
			name:    "a literal, a definition and a literal",
			expr:    `{#d: {a: string, b: string}, children: [for t in spec.teams {kind: "k", name: t, spec: {a: "q"} & #d & {a: t, b: "y"}}]}`,
			spec:    `{"teams":["z"]}`,
			wantWhy: "chain",
		},
		{
			name:    "a chain selected from",
			expr:    `{#d: {a: string, b: string}, children: [for t in spec.teams {kind: "k", name: (#d & {a: "x"} & {a: t, b: "y"}).a}]}`,
			spec:    `{"teams":["z"]}`,
			wantWhy: "chain",
		},
		// 3. Hidden and definition selectors.
		{
			name: "a hidden selector on the spec",
			expr: `{let S = spec, children: [{kind: "k", name: "n", spec: {x: S.m._x}}]}`,
			spec: `{"m":{"_x":"v"}}`,
		},
		{
			name: "a definition selector on the spec",
			expr: `{let S = spec, children: [{kind: "k", name: "n", spec: {x: S.m.#x}}]}`,
			spec: `{"m":{"#x":"v"}}`,
		},
		{
			name: "a hidden selector on a struct literal with a quoted label",
			expr: `{children: [for t in spec.teams {kind: "k", name: t, spec: {x: {"_x": t}._x}}]}`,
			spec: `{"teams":["z"]}`,
		},
		{
			name:     "a quoted label indexed",
			expr:     `{let S = spec, children: [for t in S.teams {kind: "k", name: t, spec: {x: {"_x": t}["_x"], y: S.m["_x"]}}]}`,
			spec:     `{"teams":["z"],"m":{"_x":"v"}}`,
			wantFast: true,
		},
		{
			name: "a hidden field of an instance indexed",
			expr: `{#d: {a: string, _h: "h"}, children: [for t in spec.teams {kind: "k", name: t, spec: {x: (#d & {a: t})["_h"]}}]}`,
			spec: `{"teams":["z"]}`,
		},
		{
			name:     "a hidden field of an instance selected",
			expr:     `{#d: {a: string, _h: "h\(a)"}, let i = #d & {a: "j"}, children: [for t in spec.teams {kind: "k", name: t, spec: {x: (#d & {a: t})._h, y: i._h}}]}`,
			spec:     `{"teams":["z"]}`,
			wantFast: true,
		},
		// 4. _ is never bound.
		{
			name:    "_ as a for key",
			expr:    `{children: [for _, v in spec.teams {kind: "k", name: "\(v)\(_)"}]}`,
			spec:    `{"teams":["z"]}`,
			wantWhy: "_",
		},
		{
			name:    "_ as a for value",
			expr:    `{children: [for k, _ in spec.m {kind: "k", name: k, spec: {v: _}}]}`,
			spec:    `{"m":{"a":"b"}}`,
			wantWhy: "_",
		},
		{
			name:     "_ as an unused for key",
			expr:     `{children: [for _, v in spec.teams {kind: "k", name: v}]}`,
			spec:     `{"teams":["z"]}`,
			wantFast: true,
		},
		// 5. Field order of definition instances.
		{
			name:    "a literal in another order than the definition",
			expr:    `{#d: {a: string, c: "\(a)\(b)", b: string}, children: [for t in spec.teams {kind: "k", name: t, spec: #d & {b: "1", a: t}}]}`,
			spec:    `{"teams":["z"]}`,
			wantWhy: "order",
		},
		{
			name:     "a literal in the definition's order",
			expr:     `{#d: {a: string, c: "\(a)\(b)", b: string}, children: [for t in spec.teams {kind: "k", name: t, spec: {a: t, b: "1"} & #d}]}`,
			spec:     `{"teams":["z"]}`,
			wantFast: true,
		},
		{
			name:     "a literal in another order, selected from",
			expr:     `{#d: {a: string, c: "\(a)\(b)", b: string}, children: [for t in spec.teams {kind: "k", name: (#d & {b: "1", a: t}).c}]}`,
			spec:     `{"teams":["z"]}`,
			wantFast: true,
		},
		// 6. Negative zero.
		{
			name: "a negative times zero",
			expr: `{let S = spec, children: [for x in S.offsets {kind: "net", name: "net-\(x * S.stride)", spec: {o: x * S.stride}}]}`,
			spec: `{"offsets":[-1,1],"stride":0}`,
		},
		{
			name: "zero times a negative",
			expr: `{children: [for x in spec.offsets {kind: "net", name: "n", spec: {o: 0 * x}}]}`,
			spec: `{"offsets":[-1]}`,
		},
		{
			name:     "products that are not negative zero",
			expr:     `{let S = spec, children: [for x in S.offsets {kind: "net", name: "net-\(x * S.stride)", spec: {o: x * S.stride, z: 0 * 0, n: -x}}]}`,
			spec:     `{"offsets":[0],"stride":-2}`,
			wantFast: false, // 0 * -2 is -0
		},
		{
			name:     "a product with no zero",
			expr:     `{let S = spec, children: [for x in S.offsets {kind: "net", name: "net-\(x * S.stride)", spec: {o: x * S.stride, z: 0 * 0, n: -(x - x)}}]}`,
			spec:     `{"offsets":[-1,1],"stride":3}`,
			wantFast: true,
		},
		// strconv.ParseInt with a base CUE refuses.
		{
			name:    "ParseInt base 1",
			imports: []string{"strconv"},
			expr:    `{let B = spec.base, children: [for t in spec.teams {kind: "k", name: "n", spec: {v: strconv.ParseInt(t, B, 64)}}]}`,
			spec:    `{"teams":["1"],"base":1}`,
		},
		{
			name:    "ParseInt base 63",
			imports: []string{"strconv"},
			expr:    `{let B = spec.base, children: [for t in spec.teams {kind: "k", name: "n", spec: {v: strconv.ParseInt(t, B, 64)}}]}`,
			spec:    `{"teams":["1"],"base":63}`,
		},
		{
			name:     "ParseInt base 62",
			imports:  []string{"strconv"},
			expr:     `{let B = spec.base, children: [for t in spec.teams {kind: "k", name: "n", spec: {v: strconv.ParseInt(t, B, 64)}}]}`,
			spec:     `{"teams":["Z"],"base":62}`,
			wantFast: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := composeKind(t, tt.expr, tt.imports...)
			fast, why, _ := s.ComposePath(tRef)
			if tt.wantWhy != "" {
				if fast || !strings.Contains(why, tt.wantWhy) {
					t.Fatalf("ComposePath: fast %v, why %q; want off the fast path because of %q", fast, why, tt.wantWhy)
				}
			} else if !fast {
				t.Fatalf("not on the fast path: %s", why)
			}
			got, _, cueErr := bothWays(t, s, tt.spec)
			if tt.wantWhy == "" && got != tt.wantFast {
				t.Errorf("fast %v, want %v (CUE: %v)", got, tt.wantFast, cueErr)
			}
		})
	}
}
