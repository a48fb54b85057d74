package cue

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"testing"

	cuelang "cuelang.org/go/cue"
	cuejson "cuelang.org/go/encoding/json"

	"github.com/convergehq/converge"
)

// childSpecs returns n composed-child-like specs in the classic mix: per
// team an account, a vpc and a route; per functional domain a tgw.
func childSpecs(n int) (refs []converge.KindRef, specs []json.RawMessage) {
	add := func(kind string, v any) {
		b, _ := json.Marshal(v)
		refs = append(refs, converge.KindRef{Kind: kind, Version: 1})
		specs = append(specs, b)
	}
	for i := 0; len(specs) < n; i++ {
		if i%20 == 0 {
			add("tgw", map[string]any{"name": fmt.Sprintf("fd-%02d", i/20)})
		}
		add("account", map[string]any{"team_name": fmt.Sprintf("team-%04d", i)})
		add("vpc", map[string]any{"account_id": fmt.Sprintf("%012d", i), "cidr": fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)})
		add("route", map[string]any{"vpc_id": fmt.Sprintf("vpc-%08x", i), "tgw_id": fmt.Sprintf("tgw-%08x", i/20)})
	}
	return refs[:n], specs[:n]
}

func classicSchemas(tb testing.TB) *Schemas {
	tb.Helper()
	res, err := Load(os.DirFS("../examples/classic"), ".", Options{})
	if err != nil {
		tb.Fatal(err)
	}
	if len(res.Findings) > 0 {
		tb.Fatalf("examples/classic: %v", res.Findings)
	}
	return res.Schemas
}

// BenchmarkLoadClassic loads and validates the whole classic example,
// the 1,176-team BOM included.
func BenchmarkLoadClassic(b *testing.B) {
	fsys := os.DirFS("../examples/classic")
	b.ReportAllocs()
	for b.Loop() {
		res, err := Load(fsys, ".", Options{})
		if err != nil || len(res.Findings) > 0 {
			b.Fatal(err, res.Findings)
		}
	}
}

// BenchmarkSandboxLoadClassic is BenchmarkLoadClassic in a child process
// under the default budget (what validate, sync and serve do): the price of
// the process, the copy of the documents and compiling the kinds again.
func BenchmarkSandboxLoadClassic(b *testing.B) {
	fsys := os.DirFS("../examples/classic")
	sb := testSandbox(Budget{})
	b.ReportAllocs()
	for b.Loop() {
		res, err := sb.Load(context.Background(), fsys, ".", Options{})
		if err != nil || len(res.Findings) > 0 {
			b.Fatal(err, res.Findings)
		}
	}
}

// BenchmarkValidateSpec validates 5,400 composed-child-like specs per
// iteration through Schemas.ValidateSpec.
func BenchmarkValidateSpec(b *testing.B) {
	s := classicSchemas(b)
	refs, specs := childSpecs(5400)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i := range specs {
			if err := s.ValidateSpec(refs[i], specs[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*len(specs))/b.Elapsed().Seconds(), "validations/s")
}

// BenchmarkBaselineJSONDecode decodes the same 5,400 specs with
// encoding/json into map[string]any: the same-run baseline.
func BenchmarkBaselineJSONDecode(b *testing.B) {
	_, specs := childSpecs(5400)
	b.ReportAllocs()
	for b.Loop() {
		for i := range specs {
			var m map[string]any
			if err := json.Unmarshal(specs[i], &m); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*len(specs))/b.Elapsed().Seconds(), "decodes/s")
}

// TestValidateSpecMemoryBounded runs many validations through one Schemas
// and checks the live heap stays bounded: evaluators are recycled, so the
// values a cue.Context accumulates are dropped.
func TestValidateSpecMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("200k validations take a few seconds; skipped under -short")
	}
	s := classicSchemas(t)
	refs, specs := childSpecs(5400)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	const total = 200000
	var at50k uint64
	for n := 0; n < total; n++ {
		i := n % len(specs)
		if err := s.ValidateSpec(refs[i], specs[i]); err != nil {
			t.Fatal(err)
		}
		if n == 50000 {
			at50k = heap()
		}
	}
	end := heap()
	t.Logf("live heap after 50k validations: %.1f MiB, after %dk: %.1f MiB", float64(at50k)/(1<<20), total/1000, float64(end)/(1<<20))
	if end > at50k+32<<20 {
		t.Errorf("live heap grew from %d to %d bytes between 50k and %d validations", at50k, end, total)
	}
}

// BenchmarkValidateSpecMemory runs 200,000 validations per iteration with
// evaluators recycled every N validations, and reports the live heap at
// the end (after a GC) next to the rate: the price and the gain of
// recycling a cue.Context.
func BenchmarkValidateSpecMemory(b *testing.B) {
	refs, specs := childSpecs(5400)
	for _, every := range []int{2000, 20000, 200000, 1 << 30} {
		name := fmt.Sprintf("recycle=%d", every)
		if every == 1<<30 {
			name = "recycle=never"
		}
		b.Run(name, func(b *testing.B) {
			defer func(old int) { recycleAfter = old }(recycleAfter)
			recycleAfter = every
			const total = 200000
			var m runtime.MemStats
			for b.Loop() {
				s := classicSchemas(b)
				for n := 0; n < total; n++ {
					i := n % len(specs)
					if err := s.ValidateSpec(refs[i], specs[i]); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&m)
				runtime.KeepAlive(s)
			}
			b.ReportMetric(float64(m.HeapAlloc)/(1<<20), "live-MiB")
			b.ReportMetric(float64(b.N*total)/b.Elapsed().Seconds(), "validations/s")
		})
	}
}

// BenchmarkDecodePath compares the ways to turn a JSON spec into a CUE
// value before unifying it with a compiled schema, on one evaluator: the
// design choice behind Schemas.validate (docs/BENCHMARKS.md).
func BenchmarkDecodePath(b *testing.B) {
	s := classicSchemas(b)
	refs, specs := childSpecs(5400)
	ev := s.newEvaluator()
	schs := make([]cuelang.Value, len(specs))
	for i := range specs {
		v, err := s.schema(ev, schemaKey{refs[i], "spec"})
		if err != nil {
			b.Fatal(err)
		}
		schs[i] = v
	}
	paths := []struct {
		name   string
		decode func(spec []byte) (cuelang.Value, error)
	}{
		{"encode", func(spec []byte) (cuelang.Value, error) {
			x, err := decodeJSON(spec)
			return ev.ctx.Encode(x), err
		}},
		{"extract", func(spec []byte) (cuelang.Value, error) {
			x, err := cuejson.Extract("spec", spec)
			if err != nil {
				return cuelang.Value{}, err
			}
			return ev.ctx.BuildExpr(x), nil
		}},
		{"compilebytes", func(spec []byte) (cuelang.Value, error) {
			return ev.ctx.CompileBytes(spec), nil
		}},
	}
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for i := range specs {
					v, err := p.decode(specs[i])
					if err != nil {
						b.Fatal(err)
					}
					if errs := check(schs[i], v); len(errs) > 0 {
						b.Fatal(errs[0].msg)
					}
				}
			}
			b.ReportMetric(float64(b.N*len(specs))/b.Elapsed().Seconds(), "validations/s")
		})
	}
}
