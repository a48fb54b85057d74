package history

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/anishathalye/porcupine"
)

// Run is one recorded run: everything the clients saw.
type Run struct {
	Effects    []Effect
	Deliveries []Delivery
	Verdicts   []VerdictRead
	Writes     []Write
	Seen       []Observed
	Faults     []Fault
	// Settled says the run ended converged (the head applied and
	// converged): every revision's verdict must then be final.
	Settled bool
	// TermErrors are the replicas' log lines that show the condition of
	// KnownVerdictLostAtTermStart: a write cut short as its term ended,
	// or a pending verdict not resumed.
	TermErrors []string
}

// Report is what Check found. A run passes when Violations is empty.
type Report struct {
	Effects, Resources, Verdicts, Revisions, Faults int
	// Retries counts effects that repeated an earlier one's task (the
	// same UID and idempotency key): at-least-once at work.
	Retries    int
	Deliveries DeliveryReport
	Fencing    FenceReport
	// Took is how long the checks ran.
	Took       time.Duration
	Violations []string
	// Known are violations of an issue the histories found (each names
	// it; all fixed): TestReplicasHistory fails on them unless
	// CONVERGE_HISTORY_LENIENT=1.
	Known []string
}

func (r Report) String() string {
	return fmt.Sprintf("%d effects on %d resources (%d repeating a task), %d verdict reads of %d revisions, %d deliveries of %d keys (%d retried after a fault), %d writes in %d terms (%d whose writer never learned it landed), %d faults; checked in %v: %d violations, %d known",
		r.Effects, r.Resources, r.Retries, r.Verdicts, r.Revisions, len(r.Deliveries.Retries)+r.Deliveries.Keys, r.Deliveries.Keys, len(r.Deliveries.Retries),
		r.Fencing.Writes, r.Fencing.Terms, r.Fencing.Unrecorded, r.Faults, r.Took.Round(time.Millisecond), len(r.Violations), len(r.Known))
}

// linearizabilityTimeout bounds each porcupine check: a history's
// partitions are small (one resource's effects, one revision's reads),
// so it is never reached on a legal one.
const linearizabilityTimeout = 2 * time.Minute

// Check checks every promise over run. When a porcupine model finds a
// partition illegal, its visualization is written to dir (NAME.html)
// and named in the violation.
func Check(run Run, dir string) Report {
	start := time.Now()
	rep := Report{Effects: len(run.Effects), Verdicts: len(run.Verdicts), Faults: len(run.Faults)}
	uids := map[string]bool{}
	tasks := map[[2]string]bool{}
	for _, e := range run.Effects {
		uids[e.UID] = true
		k := [2]string{e.UID, e.Key}
		if tasks[k] {
			rep.Retries++
		}
		tasks[k] = true
	}
	rep.Resources = len(uids)
	revs := map[string]bool{}
	for _, v := range run.Verdicts {
		revs[v.Revision] = true
	}
	rep.Revisions = len(revs)
	rep.Violations = append(rep.Violations, linearizable("effects", EffectModel, EffectOperations(run.Effects), dir)...)
	verdicts := VerdictOperations(run.Verdicts)
	if v := linearizable("verdicts", VerdictModel, verdicts, dir); len(v) > 0 {
		// The only fault an error verdict's revision? Then it is the
		// known issue, not a new one.
		if porcupine.CheckOperations(errorRevisable, verdicts) {
			for _, msg := range v {
				rep.Known = append(rep.Known, KnownErrorVerdictRevised+": "+msg)
			}
		} else {
			rep.Violations = append(rep.Violations, v...)
		}
	}
	if run.Settled {
		v, k := CheckSettled(run.Verdicts, run.TermErrors)
		rep.Violations = append(rep.Violations, v...)
		rep.Known = append(rep.Known, k...)
	}
	rep.Deliveries = CheckDeliveries(run.Deliveries, run.Faults, run.Writes, run.Seen)
	rep.Violations = append(rep.Violations, rep.Deliveries.Violations...)
	rep.Known = append(rep.Known, rep.Deliveries.Known...)
	rep.Fencing = CheckFencing(run.Writes, run.Seen)
	rep.Violations = append(rep.Violations, rep.Fencing.Violations...)
	rep.Took = time.Since(start)
	return rep
}

// linearizable checks ops against model; when they are not, it names
// the illegal partitions' operations and writes the visualization to
// dir/name.html.
func linearizable(name string, model porcupine.Model, ops []porcupine.Operation, dir string) []string {
	if len(ops) == 0 {
		return nil
	}
	res, info := porcupine.CheckOperationsVerbose(model, ops, linearizabilityTimeout)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return []string{fmt.Sprintf("%s: porcupine gave up after %v (history of %d operations)", name, linearizabilityTimeout, len(ops))}
	}
	var out []string
	for _, part := range model.Partition(ops) {
		if porcupine.CheckOperations(model, part) {
			continue
		}
		var descr string
		for i, op := range part {
			if i == 8 {
				descr += fmt.Sprintf("\n\t… and %d more", len(part)-i)
				break
			}
			descr += fmt.Sprintf("\n\t[%s–%s] %s", stamp(op.Call), stamp(op.Return), model.DescribeOperation(op.Input, op.Output))
		}
		out = append(out, fmt.Sprintf("%s: not linearizable under the model:%s", name, descr))
	}
	path := filepath.Join(dir, name+".html")
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		out = append(out, fmt.Sprintf("%s: write the visualization: %v", name, err))
	} else {
		out = append(out, fmt.Sprintf("%s: porcupine's visualization of the illegal history: %s", name, path))
	}
	return out
}

// TermStarts returns when each term that wrote began: the call of its
// first write (a new leader writes its takeover event before it loads
// the state and dispatches anything).
func TermStarts(writes []Write) []int64 {
	first := map[int64]int64{}
	for _, w := range writes {
		if w.Election == 0 {
			continue
		}
		if t, ok := first[w.Election]; !ok || w.Call < t {
			first[w.Election] = w.Call
		}
	}
	out := make([]int64, 0, len(first))
	for _, t := range first {
		out = append(out, t)
	}
	return out
}
