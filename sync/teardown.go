package sync

import (
	"sort"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// TeardownStep is one resource of a teardown plan, in the order the
// engine tears it down: a resource goes once everything it owns and
// everything being torn down that consumes it is gone (reverse
// dependency order, the scheduler's considerTeardown). Step is the
// length of the longest chain of such waits below it plus one: a step-1
// resource waits for nothing, a step-n one for After, of which at least
// one is of step n-1. It starts as soon as those are gone, not when the
// whole step before is.
type TeardownStep struct {
	Step int         `json:"step"`
	ID   converge.ID `json:"id"`
	// KindVersion is the resource's kind version ("vpc/v1").
	KindVersion converge.KindRef `json:"-"`
	// Finalizer names the teardown reaction a worker runs before the
	// row goes ("vpc/v1 teardown"); "" when the row is just removed.
	Finalizer string `json:"finalizer,omitempty"`
	// Because says why it goes: "removed from git", "pruned by X",
	// "owned by X", "consumes X".
	Because string `json:"because"`
	// After are the resources whose teardown it waits for: its children
	// and its consumers being torn down.
	After []converge.ID `json:"after"`
}

// TeardownOrder returns the teardown trees of roots (a plan's Delete and
// Prune items) in v, in the order the engine runs them: each root,
// everything it owns and everything that consumes any of that,
// transitively, each once, by step. kinds (by kind version) name the
// finalizers. A resource v does not hold is left out.
func TeardownOrder(v scheduler.GraphView, roots []scheduler.PlanItem, kinds map[converge.KindRef]*converge.Kind) []TeardownStep {
	if len(roots) == 0 {
		return nil
	}
	because := map[converge.ID]string{}
	var order []converge.ID
	mark := func(id converge.ID, why string) {
		if _, ok := because[id]; ok || v.Get(id) == nil {
			return
		}
		because[id] = why
		order = append(order, id)
	}
	for _, it := range roots {
		why := "removed from git"
		if it.Reason != "" {
			why = it.Reason
		}
		mark(it.ID, why)
	}
	for i := 0; i < len(order); i++ {
		id := order[i]
		v.ChildIDs(id, func(c converge.ID) { mark(c, "owned by "+string(id)) })
		v.Consumers(id, func(c converge.ID) { mark(c, "consumes "+string(id)) })
	}
	// waits[id] counts the marked resources id's teardown waits for: its
	// children and its marked consumers.
	waits := make(map[converge.ID]int, len(order))
	blocks := make(map[converge.ID][]converge.ID, len(order))
	after := make(map[converge.ID][]converge.ID, len(order))
	for _, id := range order {
		seen := map[converge.ID]bool{}
		wait := func(b converge.ID) {
			if _, ok := because[b]; ok && !seen[b] && b != id {
				seen[b] = true
				waits[id]++
				blocks[b] = append(blocks[b], id)
				after[id] = append(after[id], b)
			}
		}
		v.ChildIDs(id, wait)
		v.Consumers(id, wait)
	}
	var out []TeardownStep
	var ready []converge.ID
	for _, id := range order {
		if waits[id] == 0 {
			ready = append(ready, id)
		}
	}
	done := 0
	for step := 1; len(ready) > 0; step++ {
		sort.Slice(ready, func(i, j int) bool { return ready[i] < ready[j] })
		var next []converge.ID
		for _, id := range ready {
			done++
			r := v.Get(id)
			ts := TeardownStep{Step: step, ID: id, KindVersion: r.Ref(), Because: because[id], After: after[id]}
			sort.Slice(ts.After, func(i, j int) bool { return ts.After[i] < ts.After[j] })
			if ts.After == nil {
				ts.After = []converge.ID{}
			}
			if k := kinds[r.Ref()]; k != nil && k.Finalizer && k.Has(converge.ReactionTeardown) {
				ts.Finalizer = r.Ref().String() + " teardown"
			}
			out = append(out, ts)
			for _, b := range blocks[id] {
				if waits[b]--; waits[b] == 0 {
					next = append(next, b)
				}
			}
		}
		ready = next
	}
	if done < len(order) {
		// A cycle of consumers (which lint refuses in git, but a
		// composer may make): the engine waits on it for ever; say so.
		step := 0
		if len(out) > 0 {
			step = out[len(out)-1].Step
		}
		for _, id := range order {
			if waits[id] > 0 {
				r := v.Get(id)
				out = append(out, TeardownStep{Step: step + 1, ID: id, KindVersion: r.Ref(), Because: because[id] + "; waits on a cycle of consumers"})
			}
		}
	}
	return out
}
