package sdk

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/convergehq/converge"
)

// The composition types, so a provider needs only this package: a
// composer emits Children and Edges, each edge's Flows copying a
// producer's status field into a consumer's spec field. They are the
// root package's types (aliases): values pass unchanged.
type (
	// Child is one resource a composer emits: kind, kind version, name,
	// spec (and optionally a provider config reference).
	Child = converge.Child
	// Edge says Consumer depends on Producer: the consumer is gated
	// until the producer is Ready, then Flows are applied.
	Edge = converge.Edge
	// ValueFlow copies Producer.status.From into Consumer.spec.To
	// (dotted paths). A field a flow fills may be left out of the
	// child's spec: it is known after apply.
	ValueFlow = converge.ValueFlow
	// ID is a resource's "kind/name".
	ID = converge.ID
	// Subject is the resource whose transition a react task is about.
	Subject = converge.Subject
)

// NewID returns the ID of the resource kind/name.
func NewID(kind, name string) ID { return converge.NewID(kind, name) }

// NewChild returns a child of kind (at version) named name whose spec is
// spec encoded as JSON; a spec that does not encode is a permanent error.
func NewChild(kind string, version int, name string, spec any) (Child, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return Child{}, Permanent(fmt.Errorf("child %s/%s: encode spec: %w", kind, name, err))
	}
	return Child{Kind: kind, KindVersion: version, Name: name, Spec: b}, nil
}

// Flow returns the edge consumer ← producer carrying the flows given as
// pairs "status field", "spec field" (Flow(vpc, acct, "account_id",
// "account_id")). It panics on an odd number of fields: a programming
// error.
func Flow(consumer, producer ID, fields ...string) Edge {
	if len(fields)%2 != 0 {
		panic("sdk.Flow: want pairs of status and spec fields")
	}
	e := Edge{Consumer: consumer, Producer: producer}
	for i := 0; i < len(fields); i += 2 {
		e.Flows = append(e.Flows, ValueFlow{From: fields[i], To: fields[i+1]})
	}
	return e
}

// Spec decodes r's spec into a new S: an undecodable spec is a
// permanent error naming the resource.
func Spec[S any](r *Request) (S, error) {
	var s S
	if err := r.DecodeSpec(&s); err != nil {
		return s, Permanent(fmt.Errorf("%s/%s: %w", r.Kind, r.Name, err))
	}
	return s, nil
}

// Config decodes r's provider config into a new C.
func Config[C any](r *Request) (C, error) {
	var c C
	if err := r.DecodeConfig(&c); err != nil {
		return c, Permanent(fmt.Errorf("%s/%s: %w", r.Kind, r.Name, err))
	}
	return c, nil
}

// Reconciler adapts a typed reconcile, spec S in and status St out, to
// Provider.Reconcile: the spec is decoded for it, its status encoded.
// The status replaces the resource's whole status (it is not merged).
func Reconciler[S, St any](f func(ctx context.Context, r *Request, spec S) (St, error)) func(ctx context.Context, r *Request) (any, error) {
	return func(ctx context.Context, r *Request) (any, error) {
		spec, err := Spec[S](r)
		if err != nil {
			return nil, err
		}
		st, err := f(ctx, r, spec)
		if err != nil {
			return nil, err
		}
		return st, nil
	}
}

// Composer adapts a typed streaming composer, spec S in, to
// Provider.ComposeStream.
func Composer[S any](f func(ctx context.Context, r *Request, spec S, out *Emitter) error) func(ctx context.Context, r *Request, out *Emitter) error {
	return func(ctx context.Context, r *Request, out *Emitter) error {
		spec, err := Spec[S](r)
		if err != nil {
			return err
		}
		return f(ctx, r, spec, out)
	}
}
