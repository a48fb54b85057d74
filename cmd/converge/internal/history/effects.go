package history

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// Reactions an Effect can record: an apply (reconcile or compose) or a
// teardown. React tasks are Deliveries; verbs and observes are not
// recorded.
const (
	Reconcile = "reconcile"
	Compose   = "compose"
	Teardown  = "teardown"
)

// Effect is one task a worker completed successfully for a resource, as
// the worker saw it: Call when its handler started, Return when it
// returned (Unix nanoseconds, one machine's clock).
type Effect struct {
	Worker   string `json:"worker"`
	Reaction string `json:"reaction"`
	UID      string `json:"uid"`
	ID       string `json:"id"`
	Gen      int64  `json:"gen"`
	Key      string `json:"key"`
	// Spec is a digest of the spec the task carried (its flows applied).
	Spec   string `json:"spec"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
}

// IsApply reports whether e applies a spec (reconcile or compose).
func (e Effect) IsApply() bool { return e.Reaction == Reconcile || e.Reaction == Compose }

func (e Effect) String() string {
	spec := e.Spec
	if len(spec) > 8 {
		spec = spec[:8]
	}
	return fmt.Sprintf("%s %s gen %d key %s spec %s (worker %s)", e.Reaction, e.ID, e.Gen, e.Key, spec, e.Worker)
}

// effectState is what a resource's effects so far leave: its newest
// generation with an effect, that generation's apply (key and spec; ""
// before one) and whether it was torn down.
type effectState struct {
	started   bool
	gen       int64
	applyKey  string
	applySpec string
	torn      bool
}

// stepEffect is EffectModel's Step: whether e may follow s, and the
// state after it.
func stepEffect(s effectState, e Effect) (bool, effectState) {
	switch {
	case !s.started || e.Gen > s.gen:
		n := effectState{started: true, gen: e.Gen}
		if e.IsApply() {
			n.applyKey, n.applySpec = e.Key, e.Spec
		} else {
			n.torn = true
		}
		return true, n
	case e.Gen < s.gen:
		return false, s // a stale generation after a newer one's effect
	case !e.IsApply():
		s.torn = true // a teardown, or its retry
		return true, s
	case s.torn:
		return false, s // applied after its teardown
	case s.applyKey == "":
		s.applyKey, s.applySpec = e.Key, e.Spec
		return true, s
	default:
		// The same generation again: only a retry of the same task.
		return e.Key == s.applyKey && e.Spec == s.applySpec, s
	}
}

func (s effectState) String() string {
	if !s.started {
		return "no effect yet"
	}
	spec := s.applySpec
	if len(spec) > 8 {
		spec = spec[:8]
	}
	out := fmt.Sprintf("gen %d", s.gen)
	if s.applyKey != "" {
		out += " applied (key " + s.applyKey + ", spec " + spec + ")"
	}
	if s.torn {
		out += " torn down"
	}
	return out
}

// EffectModel is the porcupine model of one resource's effects: see the
// package doc. Inputs are Effects, outputs nil; Partition cuts a history
// by UID.
var EffectModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		return partition(h, func(op porcupine.Operation) string { return op.Input.(Effect).UID })
	},
	Init: func() any { return effectState{} },
	Step: func(state, input, _ any) (bool, any) {
		return stepEffect(state.(effectState), input.(Effect))
	},
	Equal:             func(a, b any) bool { return a.(effectState) == b.(effectState) },
	DescribeOperation: func(input, _ any) string { return input.(Effect).String() },
	DescribeState:     func(state any) string { return state.(effectState).String() },
}

// EffectOperations turns effects into porcupine operations, one client
// id per worker.
func EffectOperations(effects []Effect) []porcupine.Operation {
	clients := map[string]int{}
	ops := make([]porcupine.Operation, 0, len(effects))
	for _, e := range effects {
		c, ok := clients[e.Worker]
		if !ok {
			c = len(clients)
			clients[e.Worker] = c
		}
		ops = append(ops, porcupine.Operation{ClientId: c, Input: e, Call: e.Call, Return: e.Return})
	}
	return ops
}

// partition groups h by key, keeping each group's order.
func partition(h []porcupine.Operation, key func(porcupine.Operation) string) [][]porcupine.Operation {
	idx := map[string]int{}
	var out [][]porcupine.Operation
	for _, op := range h {
		k := key(op)
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], op)
	}
	return out
}
