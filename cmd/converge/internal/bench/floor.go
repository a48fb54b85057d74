package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/scheduler"
)

// Floor is the time a perfect engine would need on this machine to
// converge the run's graph from empty, composed from the raw rates
// measured in the same run, and converge's ratio to it.
//
// The model: every resource costs one validation of its spec and one of
// its status, one worker round trip and one durable put. Validation and
// round trips both take the CPU (each raw rate was measured with the
// whole machine), so their times add; puts wait on fsync, which overlaps
// with them, so the slower of the two sides counts. On top of that the
// graph's dependency depth is paid in latency, not throughput: each level
// waits for its producers' (or its composer's) answer and commit before
// it can start, one unary round trip and one fsynced transaction a level.
// The root's compose is the composer's own work (the Go composer's time,
// when the bench measured it), paid once before its children start.
type Floor struct {
	Resources int `json:"resources"`
	// Depth is the longest chain of the graph, counting a composer
	// before its children and a producer before its consumers.
	Depth int `json:"depth"`
	// ValidationsPerSec is the rate of spec and status validations
	// (cue.Schemas, as the engine validates), measured on the run's own
	// resources.
	ValidationsPerSec float64 `json:"validations_per_second"`
	// The parts of the floor, in seconds.
	ValidateSeconds float64 `json:"validate_seconds"`
	DispatchSeconds float64 `json:"round_trip_seconds"`
	PutSeconds      float64 `json:"put_seconds"`
	DepthSeconds    float64 `json:"depth_seconds"`
	ComposeSeconds  float64 `json:"compose_seconds"`
	// Seconds is the floor; Ratio is the median run's time over it.
	Seconds float64 `json:"seconds"`
	Ratio   float64 `json:"ratio"`
}

// maxValidations bounds the resources validated to measure the rate: a
// sample spread over the whole graph.
const maxValidations = 50_000

// graphFacts walks the converged graph from its declared roots: how many
// resources it holds, its depth, and the validation rate of a sample of
// them against schemas.
func graphFacts(ctx context.Context, g scheduler.Graph, roots []*converge.Resource, schemas *cue.Schemas) (n, depth int, perSec float64, err error) {
	err = g.Read(ctx, func(v scheduler.GraphView) {
		n = v.Len()
		level := make(map[converge.ID]int, n)
		var order []*converge.Resource
		var walk func(r *converge.Resource)
		walk = func(r *converge.Resource) {
			order = append(order, r)
			v.Children(r.ID(), walk)
		}
		for _, root := range roots {
			if r := v.Get(root.ID()); r != nil {
				walk(r)
			}
		}
		var levelOf func(id converge.ID, seen int) int
		levelOf = func(id converge.ID, seen int) int {
			if l, ok := level[id]; ok {
				return l
			}
			r := v.Get(id)
			if r == nil || seen > len(order) {
				return 0 // a producer outside the graph, or a cycle (refused at apply)
			}
			l := 1
			if r.Owner != "" {
				l = max(l, levelOf(r.Owner, seen+1)+1)
			}
			v.Producers(id, func(p converge.ID) { l = max(l, levelOf(p, seen+1)+1) })
			level[id] = l
			return l
		}
		for _, r := range order {
			depth = max(depth, levelOf(r.ID(), 0))
		}
		step := max(1, len(order)/maxValidations)
		for i := 0; i < len(order) && i < 100*step; i += step {
			_ = schemas.ValidateSpec(order[i].Ref(), order[i].Spec) // warm the evaluators up
		}
		done := 0
		start := time.Now()
		for i := 0; i < len(order); i += step {
			r := order[i]
			ref := r.Ref()
			// Errors count as work done: the rate is what is measured,
			// and a converged graph's resources are valid.
			_ = schemas.ValidateSpec(ref, r.Spec)
			done++
			if len(r.Status) > 0 {
				_ = schemas.ValidateStatus(ref, r.Status)
				done++
			}
		}
		if el := time.Since(start).Seconds(); el > 0 {
			perSec = float64(done) / el
		}
	})
	return n, depth, perSec, err
}

// floor composes rep's raw rates and the graph's facts into the Floor of
// a graph of n resources at depth, and its ratio to the median run.
func floor(rep *Report, n, depth int, validationsPerSec float64) *Floor {
	f := &Floor{Resources: n, Depth: depth, ValidationsPerSec: validationsPerSec}
	per := func(rate float64) float64 {
		if rate <= 0 {
			return 0
		}
		return float64(n) / rate
	}
	// Two validations a resource: its spec, then its status.
	f.ValidateSeconds = 2 * per(validationsPerSec)
	f.DispatchSeconds = per(rep.Dispatch256)
	f.PutSeconds = per(rep.BboltPuts)
	if rep.RawGRPC1 > 0 && rep.BboltTxns > 0 {
		f.DepthSeconds = float64(depth) * (1/rep.RawGRPC1 + 1/rep.BboltTxns)
	}
	if rep.Compose != nil && !rep.Compose.Skipped {
		f.ComposeSeconds = rep.Compose.GoSeconds
	}
	f.Seconds = f.ComposeSeconds + max(f.ValidateSeconds+f.DispatchSeconds, f.PutSeconds) + f.DepthSeconds
	if f.Seconds > 0 {
		f.Ratio = rep.MedianSeconds / f.Seconds
	}
	return f
}

// String says the floor and its parts in one line.
func (f *Floor) String() string {
	return fmt.Sprintf("floor: %.3fs for %d resources at depth %d (compose %.3fs + max(validate %.3fs + round trips %.3fs, puts %.3fs) + depth %.4fs); converge %.2f× the floor",
		f.Seconds, f.Resources, f.Depth, f.ComposeSeconds, f.ValidateSeconds, f.DispatchSeconds, f.PutSeconds, f.DepthSeconds, f.Ratio)
}
