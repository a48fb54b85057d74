package sdk

// The streaming composer's side of a worker: stream runs a
// ComposeStream, and the Emitter it is given sends the composition in parts
// as they fill (worker.go holds the connection and the other reactions).

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"

	"github.com/convergehq/converge"
	convergev1 "github.com/convergehq/converge/proto/converge/v1"
)

// stream runs p's ComposeStream for task taskID, its parts going out as
// they fill; answered is the task's once-only answer flag, which the
// final part claims (a deadline may claim it first: the rest is then
// dropped). A control plane that takes no parts gets the composition in
// one result.
func (c *client) stream(ctx context.Context, p *Provider, req *Request, taskID string, out *outbox, answered *atomic.Bool) {
	e := &Emitter{ctx: ctx, taskID: taskID, out: out, answered: answered}
	if !out.parts {
		e.all = &Composition{}
	}
	err := func() (err error) {
		defer func() {
			if v := recover(); v != nil {
				c.log.Error("handler panicked", "reaction", req.Reaction, "kind", req.Kind, "name", req.Name,
					"panic", v, "stack", string(debug.Stack()))
				err = fmt.Errorf("panic: %v", v)
			}
		}()
		return p.composeStream(ctx, req, e)
	}()
	if err == nil {
		err = e.err
	}
	if !answered.CompareAndSwap(false, true) {
		return // the deadline answered
	}
	if err != nil {
		r := errResult(err)
		r.TaskId = taskID
		out.add(r)
		return
	}
	if e.all != nil {
		out.addComposition(taskID, e.all)
		return
	}
	r := e.take()
	r.Outcome = convergev1.Outcome_OUTCOME_OK
	r.More = false
	r.Delta = e.delta
	if p.ComposePart != nil {
		r.Revision = revision()
	}
	out.add(r)
}

// Emitter takes a streamed composition's children and edges
// (Provider.ComposeStream) and sends them to the control plane in parts.
// It is used by one goroutine, the handler's.
type Emitter struct {
	ctx      context.Context
	taskID   string
	out      *outbox
	answered *atomic.Bool
	part     *convergev1.Result
	items    int
	size     int
	// sent is closed once the part in flight is on the stream.
	sent chan struct{}
	// all collects everything for a control plane that takes no parts.
	all *Composition
	err error
	// delta: the composition is a delta against the task's base spec
	// (Provider.Parts); removed collects a delta's removed children when
	// all collects the rest (tests).
	delta   bool
	removed []converge.ID
}

// Child adds a child to the composition. It returns an error once the
// task is over (its deadline passed, or the worker is shutting down); the
// handler should then return it.
func (e *Emitter) Child(ch converge.Child) error {
	if e.all != nil {
		e.all.Children = append(e.all.Children, ch)
		return nil
	}
	if err := e.room(); err != nil {
		return err
	}
	e.part.Children = append(e.part.Children, &convergev1.Child{Kind: ch.Kind, KindVersion: int32(ch.KindVersion), Name: ch.Name,
		Spec: ch.Spec, ProviderConfigRef: ch.ProviderConfigRef, Added: ch.Added})
	e.items++
	e.size += len(ch.Kind) + len(ch.Name) + len(ch.Spec) + len(ch.ProviderConfigRef) + 16
	return nil
}

// Edge adds an edge to the composition; errors as Child.
func (e *Emitter) Edge(ed converge.Edge) error {
	if e.all != nil {
		e.all.Edges = append(e.all.Edges, ed)
		return nil
	}
	if err := e.room(); err != nil {
		return err
	}
	pe := &convergev1.Edge{Consumer: string(ed.Consumer), Producer: string(ed.Producer)}
	for _, f := range ed.Flows {
		pe.Flows = append(pe.Flows, &convergev1.ValueFlow{From: f.From, To: f.To})
		e.size += len(f.From) + len(f.To) + 8
	}
	e.part.Edges = append(e.part.Edges, pe)
	e.items++
	e.size += len(ed.Consumer) + len(ed.Producer) + 16
	return nil
}

// remove adds a removed child to a delta (Provider.Parts).
func (e *Emitter) remove(id converge.ID) error {
	if e.all != nil {
		e.removed = append(e.removed, id)
		return nil
	}
	if err := e.room(); err != nil {
		return err
	}
	e.part.Removed = append(e.part.Removed, string(id))
	e.items++
	e.size += len(id) + 8
	return nil
}

// room sends the current part when it is full, after the previous one
// left, and starts the next.
func (e *Emitter) room() error {
	if e.err != nil {
		return e.err
	}
	if e.part == nil {
		e.part = &convergev1.Result{TaskId: e.taskID, More: true}
	}
	if e.items < partItems && e.size < partBytes {
		return nil
	}
	if e.answered.Load() {
		e.err = errors.New("compose: the task was already answered (its deadline passed)")
		return e.err
	}
	if err := e.wait(); err != nil {
		return err
	}
	e.sent = make(chan struct{})
	e.out.push(outItem{res: e.take(), sent: e.sent})
	e.part = &convergev1.Result{TaskId: e.taskID, More: true}
	return nil
}

// wait waits until the part in flight is on the stream.
func (e *Emitter) wait() error {
	if e.sent == nil {
		return nil
	}
	select {
	case <-e.sent:
		e.sent = nil
		return nil
	case <-e.ctx.Done():
		e.err = fmt.Errorf("compose: %w", e.ctx.Err())
		return e.err
	}
}

// take returns the part being filled and starts counting afresh.
func (e *Emitter) take() *convergev1.Result {
	p := e.part
	if p == nil {
		p = &convergev1.Result{TaskId: e.taskID}
	}
	e.part, e.items, e.size = nil, 0, 0
	return p
}
