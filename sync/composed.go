package sync

import (
	"context"
	"encoding/json"
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
}

// Child returns the child id as the newest dry run answered it, or false.
func (c *Composed) Child(id converge.ID) (converge.Child, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.specs[id]
	return ch, ok
}

func (c *Composed) keep(res *converge.Result) {
	if res == nil || res.Outcome != converge.OutcomeOK {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.specs == nil {
		c.specs = map[converge.ID]converge.Child{}
	}
	for _, ch := range res.Children {
		ch.Spec = converge.CloneJSON(ch.Spec)
		c.specs[converge.NewID(ch.Kind, ch.Name)] = ch
	}
}

// Func returns f, keeping the children of every answer.
func (c *Composed) Func(f scheduler.ComposeFunc) scheduler.ComposeFunc {
	if f == nil {
		return nil
	}
	return func(ctx context.Context, t *converge.Task) (*converge.Result, error) {
		res, err := f(ctx, t)
		if err == nil {
			c.keep(res)
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
	k.c.keep(res)
	return res
}
