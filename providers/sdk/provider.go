package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/convergehq/converge"
)

// Request is one task as a handler sees it.
type Request struct {
	TaskID, Key, Reaction string
	UID, Kind             string
	KindVersion           int
	Name                  string
	Generation            int64
	// Spec is the resource's spec with every value flow applied; Status
	// its current status; Config the resolved provider config (nil if none).
	Spec, Status, Config json.RawMessage
	// Args are an operator verb's arguments.
	Args map[string]string
	// Subject is set for react: the resource whose transition fired.
	Subject *converge.Subject
	// DryRun is set on a compose whose answer is only looked at (converge
	// plan, the prune guard) and never applied: a composer with side
	// effects (creating something to name a child after, say) must skip
	// them and still return the children it would emit.
	DryRun bool
	// BaseSpec, for a compose, is the spec of the composition the
	// control plane holds now, composed by a worker of BaseRevision. The
	// SDK uses it for a composer with Parts (an incremental answer);
	// other handlers can ignore it.
	BaseSpec     json.RawMessage
	BaseRevision string
}

// DecodeSpec unmarshals the spec into v.
func (r *Request) DecodeSpec(v any) error { return decode("spec", r.Spec, v) }

// DecodeStatus unmarshals the current status into v; an absent status
// leaves v unchanged.
func (r *Request) DecodeStatus(v any) error { return decode("status", r.Status, v) }

// DecodeConfig unmarshals the provider config into v; an absent config
// leaves v unchanged.
func (r *Request) DecodeConfig(v any) error { return decode("config", r.Config, v) }

func decode(what string, b json.RawMessage, v any) error {
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return Permanent(fmt.Errorf("decode %s: %w", what, err))
	}
	return nil
}

// Observation is an observe reaction's output: Exists, Actual (any
// value that encodes as a JSON object; nil for none) and Managed.
type Observation struct {
	Exists  bool
	Actual  any
	Managed bool
}

// Composition is a compose reaction's output: the children the resource
// owns and the dependency edges between them (and to other resources).
type Composition struct {
	Children []converge.Child
	Edges    []converge.Edge
}

// Provider implements one (kind, kind_version). Set the handlers the kind
// declares; the worker advertises exactly the non-nil ones (and the verb
// names), so the control plane never routes anything else to it.
//
// Every handler must be safe to run twice for the same Request.Key: the
// control plane delivers at least once.
type Provider struct {
	Kind    string
	Version int
	// Reconcile drives the real resource to the spec and returns its new
	// status (JSON-encoded; nil means no change).
	Reconcile func(ctx context.Context, r *Request) (status any, err error)
	// Compose returns the children and edges the resource fans out into.
	Compose func(ctx context.Context, r *Request) (*Composition, error)
	// ComposeStream is Compose for a composition too big to hold: it
	// hands each child and edge to out as it makes them, and they travel
	// to the control plane in parts while it goes on (out.Child blocks
	// while a part is on its way, so the worker holds about one part).
	// Set Compose or ComposeStream, not both. An error returned after
	// some parts were sent fails the whole compose: the control plane
	// applies a composition only once its last part arrives.
	ComposeStream func(ctx context.Context, r *Request, out *Emitter) error
	// Parts and ComposePart make ComposeStream incremental. Parts cuts
	// a spec into independent parts, in order; ComposePart composes one
	// part, and composing every part in order must yield exactly what
	// ComposeStream yields. A part's children and edges depend only on
	// that part's JSON (and the request's kind, name and config: never
	// on another part, the status or the clock), and an edge's consumer
	// is a child of the part that emits the edge. Given the spec of the
	// composition the control plane holds (Request.BaseSpec, composed by
	// this same executable), the SDK composes only the parts whose JSON
	// changed, before and after, and answers with the difference: a
	// one-team change of a million-child BOM moves a few children, not
	// all. Every other compose runs ComposeStream.
	Parts       func(spec json.RawMessage) ([]Part, error)
	ComposePart func(ctx context.Context, r *Request, p Part, out *Emitter) error
	// Teardown removes the real resource (a finalizer).
	Teardown func(ctx context.Context, r *Request) error
	// Observe reads the real object without changing anything: whether
	// it exists, its actual fields in the shape of the spec (what
	// converge.Drift compares with the spec) and whether it carries
	// converge's mark. An object that is not there is an Observation
	// with Exists false, not an error; an error means it could not be
	// looked at (the server is down: Transient).
	Observe func(ctx context.Context, r *Request) (*Observation, error)
	// React handles a bound transition of r.Subject.
	React func(ctx context.Context, r *Request) error
	// Verbs are operator verbs by name (`converge do KIND/NAME VERB`).
	Verbs map[string]func(ctx context.Context, r *Request) (status any, err error)
}

// Reactions returns the reactions p serves, sorted.
func (p *Provider) Reactions() []string {
	var out []string
	if p.Reconcile != nil {
		out = append(out, converge.ReactionReconcile)
	}
	if p.Compose != nil || p.ComposeStream != nil {
		out = append(out, converge.ReactionCompose)
	}
	if p.Teardown != nil {
		out = append(out, converge.ReactionTeardown)
	}
	if p.React != nil {
		out = append(out, converge.ReactionReact)
	}
	if p.Observe != nil {
		out = append(out, converge.ReactionObserve)
	}
	for v, h := range p.Verbs {
		if h != nil && converge.IsVerb(v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// outcomeError carries a typed outcome through an error chain.
type outcomeError struct {
	outcome converge.Outcome
	err     error
}

func (e *outcomeError) Error() string { return e.err.Error() }
func (e *outcomeError) Unwrap() error { return e.err }

// Transient marks err as worth retrying with backoff. Transient(nil) is nil.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &outcomeError{converge.OutcomeTransient, err}
}

// Permanent marks err as final until the resource's spec changes.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &outcomeError{converge.OutcomePermanent, err}
}

// OutcomeOf classifies a handler's error: nil is OK; the outermost
// Transient or Permanent mark in err's chain decides; any other error is
// transient.
func OutcomeOf(err error) converge.Outcome {
	if err == nil {
		return converge.OutcomeOK
	}
	var oe *outcomeError
	if errors.As(err, &oe) {
		return oe.outcome
	}
	return converge.OutcomeTransient
}

// composeStream runs p's ComposeStream into out, or, for a compose
// that can be answered as a delta, its parts (composeDelta).
func (p *Provider) composeStream(ctx context.Context, r *Request, out *Emitter) error {
	if p.Parts != nil && out.all == nil && len(r.BaseSpec) > 0 && r.BaseRevision != "" && r.BaseRevision == revision() {
		delta, err := p.composeParts(ctx, r, out)
		if delta || err != nil {
			out.delta = delta
			return err
		}
	}
	return p.ComposeStream(ctx, r, out)
}

// Compose runs p's compose handler, Compose or ComposeStream, on r and
// returns the whole composition: for tests and tools that want it in
// memory rather than on a stream.
func Compose(ctx context.Context, p *Provider, r *Request) (*Composition, error) {
	switch {
	case p.Compose != nil:
		return p.Compose(ctx, r)
	case p.ComposeStream != nil:
		e := &Emitter{ctx: ctx, all: &Composition{}}
		if err := p.composeStream(ctx, r, e); err != nil {
			return nil, err
		}
		return e.all, nil
	}
	return nil, Permanent(fmt.Errorf("%s/v%d: no compose handler", p.Kind, p.Version))
}
