package cue

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/classic"
)

// bomSpecJSON is the spec of examples/datadriven's BOM scaled to teams
// (as resources/bom.cue builds it): 58 functional domains fd-00 … fd-57,
// all with networking, the teams spread evenly, the first domains one
// more.
func bomSpecJSON(teams int) json.RawMessage {
	const domains = 58
	per := teams / domains
	extra := teams - per*domains
	width := max(len(fmt.Sprint(per)), 3)
	type team struct {
		Name string `json:"name"`
	}
	type domain struct {
		Name         string `json:"name"`
		Networking   bool   `json:"networking"`
		ServiceTeams []team `json:"service_teams"`
	}
	var spec struct {
		FunctionalDomains []domain `json:"functional_domains"`
	}
	for i := range domains {
		d := domain{Name: fmt.Sprintf("fd-%02d", i), Networking: true, ServiceTeams: []team{}}
		n := per
		if i < extra {
			n++
		}
		for j := range n {
			d.ServiceTeams = append(d.ServiceTeams, team{Name: fmt.Sprintf("team-%0*d", width, j)})
		}
		spec.FunctionalDomains = append(spec.FunctionalDomains, d)
	}
	b, _ := json.Marshal(spec)
	return b
}

// datadrivenSchemas loads examples/datadriven: its classicbom composes in
// CUE.
func datadrivenSchemas(tb testing.TB) *Schemas {
	tb.Helper()
	res, err := Load(os.DirFS("../examples/datadriven"), ".", Options{})
	if err != nil {
		tb.Fatal(err)
	}
	if len(res.Findings) > 0 {
		tb.Fatalf("examples/datadriven: %v", res.Findings)
	}
	return res.Schemas
}

var classicBOMRef = converge.KindRef{Kind: "classicbom", Version: 1}

// goCompose is what the Go composer costs a worker: decode the spec,
// compose.
func goCompose(spec json.RawMessage) (int, error) {
	var s classic.BOMSpec
	if err := json.Unmarshal(spec, &s); err != nil {
		return 0, err
	}
	c, err := classic.ComposeBOM(s)
	if err != nil {
		return 0, err
	}
	return len(c.Children), nil
}

// BenchmarkComposeBOM composes the classic BOM (1,176 teams: 3,644
// children) and the same BOM at 33,000 teams (99,116 children) with the
// Go composer (go), examples/datadriven's CUE compose on its fast path
// (fast: Schemas.Compose) and through CUE's evaluator (cue, only at the
// classic size unless CONVERGE_BENCH_CUE=1: 33,000 teams cost CUE ~6 s
// and 1.5 GB). CONVERGE_BENCH_TEAMS=N composes N teams instead. ratio composes with Go and the fast path in turn and
// reports fast/go, the time ratio measured in the same loop (each
// after a GC). Every
// sub-benchmark reports ns/child.
//
//	go test ./cue -run XXX -bench ComposeBOM -benchmem
func BenchmarkComposeBOM(b *testing.B) {
	s := datadrivenSchemas(b)
	if fast, why, _ := s.ComposePath(classicBOMRef); !fast {
		b.Fatalf("classicbom is not on the fast path: %s", why)
	}
	k := s.kinds[classicBOMRef]
	fastCompose := func(spec json.RawMessage) (int, error) {
		r := s.Compose(&converge.Task{Kind: "classicbom", KindVersion: 1, Reaction: converge.ReactionCompose, Spec: spec})
		if r.Outcome != converge.OutcomeOK {
			return 0, fmt.Errorf("%s", r.Message)
		}
		return len(r.Children), nil
	}
	cueCompose := func(spec json.RawMessage) (int, error) {
		ch, _, err := s.composeCUE(k, spec)
		return len(ch), err
	}
	sizes := []int{1176, 33000}
	if n, err := strconv.Atoi(os.Getenv("CONVERGE_BENCH_TEAMS")); err == nil && n > 0 {
		sizes = []int{n} // e.g. 333000: ~1,000,000 children
	}
	for _, teams := range sizes {
		spec := bomSpecJSON(teams)
		want, err := goCompose(spec)
		if err != nil {
			b.Fatal(err)
		}
		run := func(name string, f func(json.RawMessage) (int, error)) {
			b.Run(fmt.Sprintf("teams=%d/%s", teams, name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					n, err := f(spec)
					if err != nil || n != want {
						b.Fatalf("%d children, want %d: %v", n, want, err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(want), "ns/child")
			})
		}
		run("go", goCompose)
		run("fast", fastCompose)
		if teams < 10000 || os.Getenv("CONVERGE_BENCH_CUE") == "1" {
			run("cue", cueCompose)
		}
		b.Run(fmt.Sprintf("teams=%d/ratio", teams), func(b *testing.B) {
			var tGo, tFast time.Duration
			for b.Loop() {
				// Each starts with no garbage of the other's to collect.
				runtime.GC()
				t0 := time.Now()
				if _, err := goCompose(spec); err != nil {
					b.Fatal(err)
				}
				tGo += time.Since(t0)
				runtime.GC()
				t1 := time.Now()
				if _, err := fastCompose(spec); err != nil {
					b.Fatal(err)
				}
				tFast += time.Since(t1)
			}
			b.ReportMetric(float64(tFast)/float64(tGo), "fast/go")
		})
	}
}

// BenchmarkComposeBOMDelta composes examples/datadriven's BOM at 33,000
// teams (99,116 children) after one team is added to one domain: in full
// (full: the new spec, no base) and as a delta against the old spec
// (delta: the 3 new children, composeparts.go). ratio composes both in
// turn (each after a GC) and reports delta/full, the time ratio measured
// in the same loop. CONVERGE_BENCH_TEAMS=N composes N teams instead.
//
//	nice -n 10 go test ./cue -run XXX -bench ComposeBOMDelta -benchmem
func BenchmarkComposeBOMDelta(b *testing.B) {
	s := datadrivenSchemas(b)
	rev := s.composers[classicBOMRef].rev
	if rev == "" {
		b.Fatal("classicbom has no parts shape")
	}
	teams := 33000
	if n, err := strconv.Atoi(os.Getenv("CONVERGE_BENCH_TEAMS")); err == nil && n > 0 {
		teams = n
	}
	base := bomSpecJSON(teams)
	var bs bomSpec
	if err := json.Unmarshal(base, &bs); err != nil {
		b.Fatal(err)
	}
	bs.FunctionalDomains[7].ServiceTeams = append(bs.FunctionalDomains[7].ServiceTeams, bomTeam{Name: "new"})
	spec := bs.json(b)
	full := func() error {
		r := s.Compose(composeTask(classicBOMRef, spec, nil, ""))
		if r.Outcome != converge.OutcomeOK || r.Delta {
			return fmt.Errorf("full: %s delta=%v %s", r.Outcome, r.Delta, r.Message)
		}
		return nil
	}
	delta := func() error {
		r := s.Compose(composeTask(classicBOMRef, spec, base, rev))
		if r.Outcome != converge.OutcomeOK || !r.Delta || len(r.Children) != 3 {
			return fmt.Errorf("delta: %s delta=%v %d children %s", r.Outcome, r.Delta, len(r.Children), r.Message)
		}
		return nil
	}
	for _, c := range []struct {
		name string
		f    func() error
	}{{"full", full}, {"delta", delta}} {
		b.Run(fmt.Sprintf("teams=%d/%s", teams, c.name), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run(fmt.Sprintf("teams=%d/ratio", teams), func(b *testing.B) {
		var tFull, tDelta time.Duration
		for b.Loop() {
			runtime.GC()
			t0 := time.Now()
			if err := full(); err != nil {
				b.Fatal(err)
			}
			tFull += time.Since(t0)
			runtime.GC()
			t1 := time.Now()
			if err := delta(); err != nil {
				b.Fatal(err)
			}
			tDelta += time.Since(t1)
		}
		b.ReportMetric(float64(tDelta)/float64(tFull), "delta/full")
	})
}
