package bench

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"sort"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/classic"
)

// Compose compares composing the classic BOM with the Go composer
// (classic.ComposeBOM) and with the CUE compose expression of a
// repository whose classicbom composes in CUE (examples/datadriven), in
// this process, on the same BOM (scaled like the converge runs). The CUE
// side is Schemas.Compose, as the control plane runs it: on the fast path
// when the expression is in its subset (docs/ARCHITECTURE.md).
type Compose struct {
	Children int `json:"children"`
	// Path is how the CUE side composed: "fast" (every compose on the
	// fast path), "cue" (CUE's evaluator; Why says why), or "mixed".
	Path string `json:"path"`
	Why  string `json:"why,omitempty"`
	// Skipped: a scale run off the fast path, not compared (see
	// --compose-cue).
	Skipped bool `json:"skipped,omitempty"`
	// GoSeconds and CUESeconds are the medians of --runs composes of
	// every classicbom root (wall time); Ratio is CUE over Go. The CPU
	// figures are the process's CPU time over the same composes (a
	// loaded machine disturbs them less); CPURatio is CUE over Go.
	GoSeconds     float64 `json:"go_seconds"`
	CUESeconds    float64 `json:"cue_seconds"`
	Ratio         float64 `json:"cue_to_go_ratio"`
	GoCPUSeconds  float64 `json:"go_cpu_seconds"`
	CUECPUSeconds float64 `json:"cue_cpu_seconds"`
	CPURatio      float64 `json:"cue_to_go_cpu_ratio"`
	// CUEAllocMiB is what one CUE compose allocates (the Go composer's
	// in GoAllocMiB).
	GoAllocMiB  float64 `json:"go_alloc_mib"`
	CUEAllocMiB float64 `json:"cue_alloc_mib"`
}

func composeCUE(dir string, o Options) (*Compose, error) {
	_, res, err := load(dir, o)
	if err != nil {
		return nil, err
	}
	var roots []*converge.Resource
	for _, r := range res.Desired.Resources {
		if r.Kind == "classicbom" {
			roots = append(roots, r)
		}
	}
	if len(roots) == 0 || !res.Schemas.Composes(roots[0].Ref()) {
		return nil, failure("%s: no classicbom that composes in CUE", dir)
	}
	cb := &Compose{}
	fast, why, _ := res.Schemas.ComposePath(roots[0].Ref())
	if !fast && o.Teams > 0 && !o.ComposeCUEGiven {
		// A scale run on CUE's evaluator costs minutes and gigabytes
		// (docs/BENCHMARKS.md): only when asked for.
		return &Compose{Path: "cue", Why: why, Skipped: true}, nil
	}
	before := res.Schemas.ComposeStats()
	goOnce := func() (int, error) {
		n := 0
		for _, r := range roots {
			var spec classic.BOMSpec
			if err := json.Unmarshal(r.Declared, &spec); err != nil {
				return 0, err
			}
			c, err := classic.ComposeBOM(spec)
			if err != nil {
				return 0, err
			}
			n += len(c.Children)
		}
		return n, nil
	}
	cueOnce := func() (int, error) {
		n := 0
		for _, r := range roots {
			out := res.Schemas.Compose(&converge.Task{Kind: r.Kind, KindVersion: r.KindVersion, Name: r.Name,
				Reaction: converge.ReactionCompose, Spec: r.Declared})
			if out.Outcome != converge.OutcomeOK {
				return 0, fmt.Errorf("cue compose %s: %s", r.ID(), out.Message)
			}
			n += len(out.Children)
		}
		return n, nil
	}
	median := func(f func() (int, error)) (float64, float64, float64, int, error) {
		var secs, cpus []float64
		var alloc float64
		n := 0
		for range max(o.Runs, 1) {
			runtime.GC()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			start, cpu := time.Now(), processCPU()
			k, err := f()
			if err != nil {
				return 0, 0, 0, 0, err
			}
			secs = append(secs, time.Since(start).Seconds())
			cpus = append(cpus, (processCPU() - cpu).Seconds())
			runtime.ReadMemStats(&m1)
			alloc = float64(m1.TotalAlloc-m0.TotalAlloc) / (1 << 20)
			n = k
		}
		sort.Float64s(secs)
		sort.Float64s(cpus)
		return secs[len(secs)/2], cpus[len(cpus)/2], alloc, n, nil
	}
	var gn, cn int
	if cb.GoSeconds, cb.GoCPUSeconds, cb.GoAllocMiB, gn, err = median(goOnce); err != nil {
		return nil, err
	}
	if cb.CUESeconds, cb.CUECPUSeconds, cb.CUEAllocMiB, cn, err = median(cueOnce); err != nil {
		return nil, err
	}
	if gn != cn {
		return nil, fmt.Errorf("the Go composer made %d children, CUE %d", gn, cn)
	}
	cb.Children = gn
	st := res.Schemas.ComposeStats()
	nFast, nCUE := st.Fast-before.Fast, st.CUE-before.CUE
	switch {
	case nCUE == 0:
		cb.Path = "fast"
	case nFast == 0:
		cb.Path, cb.Why = "cue", why
		if fast {
			cb.Why = "the fast path fell back on every spec"
		}
	default:
		cb.Path, cb.Why = "mixed", fmt.Sprintf("%d composes on the fast path, %d through CUE", nFast, nCUE)
	}
	cb.Ratio = cb.CUESeconds / cb.GoSeconds
	if cb.GoCPUSeconds > 0 {
		cb.CPURatio = cb.CUECPUSeconds / cb.GoCPUSeconds
	}
	return cb, nil
}

// isRepository reports whether dir holds a repository (a converge.cue).
func isRepository(dir string) bool {
	_, err := fs.Stat(os.DirFS(dir), "converge.cue")
	return err == nil
}
