package sync

import (
	"context"
	"encoding/json"
	"slices"
	gosync "sync"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// Composed keeps the children that dry-run composes answered with, so a
// plan can show the spec a composed child would get (scheduler.Fanout
// lists only its id). Wrap the ComposeFunc and the Validator given to
// Fanout with Func and Validator; a CUE composer answers through the
// Validator. The zero Composed is ready to use and safe for concurrent
// use.
type Composed struct {
	mu gosync.Mutex // guards specs
	// specs maps a child to the spec and config reference the newest
	// answer gave it.
	specs map[converge.ID]converge.Child
	// owners maps a child to the composer whose answer named it.
	owners map[converge.ID]converge.ID
	// edges are the dependencies (value flows) the answers declared.
	edges []converge.Edge
}

// Child returns the child id as the newest dry run answered it, or false.
func (c *Composed) Child(id converge.ID) (converge.Child, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.specs[id]
	return ch, ok
}

func (c *Composed) keep(t *converge.Task, res *converge.Result) {
	if res == nil || res.Outcome != converge.OutcomeOK {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.specs == nil {
		c.specs, c.owners = map[converge.ID]converge.Child{}, map[converge.ID]converge.ID{}
	}
	c.edges = append(c.edges, res.Edges...)
	for _, ch := range res.Children {
		ch.Spec = converge.CloneJSON(ch.Spec)
		id := converge.NewID(ch.Kind, ch.Name)
		c.specs[id] = ch
		if t != nil {
			c.owners[id] = converge.NewID(t.Kind, t.Name)
		}
	}
}

// Snapshot returns the graph applying d to an empty store would hold once
// its composers composed as the dry runs answered: d's resources and the
// children the answers named, owned by their composers, all Ready. In CI
// there is no store: a pull request's base revision is priced this way
// (Fanout of d against an empty graph, through this Composed), and its
// head diffed against the result (converge plan --base).
func (c *Composed) Snapshot(d *converge.Desired) *converge.Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	snap := &converge.Snapshot{Kinds: d.Kinds, Configs: d.Configs, Bindings: d.Bindings, Edges: d.Edges}
	have := map[converge.ID]bool{}
	for _, r := range d.Resources {
		cp := *r
		cp.UID = "base-" + string(r.ID())
		if cp.Spec == nil {
			cp.Spec = cp.Declared
		}
		cp.Phase, cp.Generation, cp.ObservedGeneration = converge.PhaseReady, 1, 1
		snap.Resources = append(snap.Resources, &cp)
		have[r.ID()] = true
	}
	ids := make([]converge.ID, 0, len(c.specs))
	for id := range c.specs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if have[id] {
			continue
		}
		ch := c.specs[id]
		snap.Resources = append(snap.Resources, &converge.Resource{UID: "base-" + string(id), Kind: ch.Kind, KindVersion: ch.KindVersion,
			Name: ch.Name, Declared: ch.Spec, Spec: ch.Spec, Owner: c.owners[id], Origin: converge.OriginComposed, ProviderConfigRef: ch.ProviderConfigRef,
			Phase: converge.PhaseReady, Generation: 1, ObservedGeneration: 1})
		have[id] = true
	}
	snap.Edges = slices.Clone(snap.Edges)
	for _, e := range c.edges {
		if have[e.Consumer] && have[e.Producer] {
			snap.Edges = append(snap.Edges, e)
		}
	}
	return snap
}

// Func returns f, keeping the children of every answer.
func (c *Composed) Func(f scheduler.ComposeFunc) scheduler.ComposeFunc {
	if f == nil {
		return nil
	}
	return func(ctx context.Context, t *converge.Task) (*converge.Result, error) {
		res, err := f(ctx, t)
		if err == nil {
			c.keep(t, res)
		}
		return res, err
	}
}

// Validator returns v, keeping the children of every compose it answers
// in the control plane (a kind composing in CUE: scheduler.LocalComposer).
// It is a scheduler.PendingValidator and a LocalComposer whatever v is
// (a v that is not a PendingValidator checks pending specs whole, and
// one that is no LocalComposer composes nothing), as cue.Schemas is both.
func (c *Composed) Validator(v scheduler.Validator) scheduler.Validator {
	return keepingValidator{v: v, c: c}
}

type keepingValidator struct {
	v scheduler.Validator
	c *Composed
}

func (k keepingValidator) ValidateSpec(ref converge.KindRef, spec json.RawMessage) error {
	return k.v.ValidateSpec(ref, spec)
}

func (k keepingValidator) ValidateStatus(ref converge.KindRef, status json.RawMessage) error {
	return k.v.ValidateStatus(ref, status)
}

func (k keepingValidator) ValidateSpecPending(ref converge.KindRef, spec json.RawMessage, pending []string) error {
	if pv, ok := k.v.(scheduler.PendingValidator); ok {
		return pv.ValidateSpecPending(ref, spec, pending)
	}
	return k.v.ValidateSpec(ref, spec)
}

func (k keepingValidator) Composes(ref converge.KindRef) bool {
	lc, ok := k.v.(scheduler.LocalComposer)
	return ok && lc.Composes(ref)
}

func (k keepingValidator) Compose(t *converge.Task) *converge.Result {
	res := k.v.(scheduler.LocalComposer).Compose(t) // only asked when Composes
	k.c.keep(t, res)
	return res
}
