package sdktest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/providers/sdk"
)

// Case is one task a provider author expects a specific answer to.
type Case struct {
	Name string
	// Task is dispatched as given, after Harness.Fill: set at least
	// Reaction, Kind, KindVersion and Spec (and Subject for react).
	Task converge.Task
	// WantOutcome is the expected outcome (the zero value is OK).
	WantOutcome converge.Outcome
	// WantStatus, if non-nil, must equal the result's status as JSON
	// (compared as values, not bytes).
	WantStatus json.RawMessage
	// Check, if set, inspects the result further.
	Check func(t *testing.T, r *converge.Result)
}

// ProbeKind is the kind of the suite's own probe provider; an author's
// provider must not use it.
const ProbeKind = "sdktest-probe"

const (
	authorWorker       = "sdktest-author"
	authorConcurrency  = 8
	probeWorker        = "sdktest-probe"
	probeConcurrency   = 4
	unansweredInterval = 200 * time.Millisecond
)

// Run is the conformance suite. It starts a real control plane on a unix
// socket, connects providers as one worker through sdk.Connect, and checks
// the behaviour every worker must have:
//
//   - it registers exactly the capabilities its handlers imply;
//   - every reaction of every provider answers each task exactly once, by
//     the task's deadline (run with the Spec of the first Case for that
//     reaction, or `{}`; any outcome is accepted there);
//   - each Case gets its WantOutcome and WantStatus, twice with the same
//     idempotency key (at-least-once delivery must be safe);
//
// and, with a probe provider served by the same SDK, the protocol itself:
// task fields reach the handler; Transient, Permanent, plain errors and
// panics map to the right outcomes; nil status means no change; compose
// returns children and edges; react and teardown return; a handler that
// outlives its deadline is answered transient at the deadline and only
// once; the concurrency limit is respected.
func Run(t *testing.T, ps []sdk.Provider, cases ...Case) {
	t.Helper()
	for _, p := range ps {
		if p.Kind == ProbeKind {
			t.Fatalf("provider kind %q is reserved for the suite's probe", ProbeKind)
		}
	}
	h := Start(t)
	h.Connect(t, authorWorker, authorConcurrency, ps...)
	pr := &probe{}
	h.Connect(t, probeWorker, probeConcurrency, pr.provider())

	t.Run("registers", func(t *testing.T) { testRegisters(t, h, ps) })
	t.Run("answers_every_reaction_once", func(t *testing.T) { testAnswersOnce(t, h, ps, cases) })
	t.Run("cases", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.Name, func(t *testing.T) { testCase(t, h, c) })
		}
	})
	t.Run("probe", func(t *testing.T) { testProbe(t, h, pr) })
}

func testRegisters(t *testing.T, h *Harness, ps []sdk.Provider) {
	var got []providers.Capability
	for _, w := range h.Server.Workers() {
		if w.Name == authorWorker {
			got = w.Capabilities
			if w.Capacity != authorConcurrency {
				t.Errorf("capacity = %d, want %d", w.Capacity, authorConcurrency)
			}
		}
	}
	var want []providers.Capability
	for _, p := range ps {
		want = append(want, providers.Capability{Kind: p.Kind, Version: p.Version, Reactions: p.Reactions()})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("registered capabilities\n got %+v\nwant %+v", got, want)
	}
	for _, p := range ps {
		for _, r := range p.Reactions() {
			if !h.Server.Serves(converge.KindRef{Kind: p.Kind, Version: p.Version}, r) {
				t.Errorf("server does not route %s/v%d %s", p.Kind, p.Version, r)
			}
		}
	}
}

// template returns the task a generic check sends for reaction of p.
func template(p sdk.Provider, reaction string, cases []Case) converge.Task {
	for _, c := range cases {
		if c.Task.Kind == p.Kind && c.Task.KindVersion == p.Version && c.Task.Reaction == reaction {
			task := c.Task
			task.ID, task.Key = "", ""
			task.Deadline = time.Time{}
			return task
		}
	}
	task := converge.Task{Kind: p.Kind, KindVersion: p.Version, Reaction: reaction, Spec: json.RawMessage(`{}`)}
	if reaction == converge.ReactionReact {
		task.Subject = &converge.Subject{Resource: converge.NewID(p.Kind, "subject"), UID: "subject-uid",
			Generation: 1, Transition: converge.TransitionSynced}
	}
	return task
}

func testAnswersOnce(t *testing.T, h *Harness, ps []sdk.Provider, cases []Case) {
	type pending struct {
		task converge.Task
		ch   <-chan *converge.Result
	}
	var all []pending
	for _, p := range ps {
		for _, r := range p.Reactions() {
			for range 3 {
				task := template(p, r, cases)
				task.Deadline = time.Now().Add(5 * time.Second)
				ch := h.Dispatch(t, &task)
				all = append(all, pending{task, ch})
			}
		}
	}
	for _, p := range all {
		select {
		case r := <-p.ch:
			t.Logf("%s %s: %s %s", p.task.Reaction, p.task.Ref(), r.Outcome, r.Message)
		case <-time.After(time.Until(p.task.Deadline) + 2*time.Second):
			t.Errorf("%s %s: no answer by the deadline", p.task.Reaction, p.task.Ref())
		}
	}
	time.Sleep(unansweredInterval)
	for _, p := range all {
		select {
		case r := <-p.ch:
			t.Errorf("%s %s: answered twice (second: %s %s)", p.task.Reaction, p.task.Ref(), r.Outcome, r.Message)
		default:
		}
	}
}

func testCase(t *testing.T, h *Harness, c Case) {
	task := c.Task
	h.Fill(&task)
	for i := range 2 {
		again := task
		again.ID = fmt.Sprintf("%s-run%d", task.ID, i)
		again.Deadline = time.Now().Add(10 * time.Second)
		r := h.Do(t, again)
		if got, want := r.Outcome, c.WantOutcome; got != want {
			t.Errorf("run %d: outcome = %s (%s), want %s", i+1, got, r.Message, want)
		}
		if c.WantStatus != nil {
			if ok, err := jsonEqual(r.Status, c.WantStatus); err != nil || !ok {
				t.Errorf("run %d: status = %s, want %s (%v)", i+1, r.Status, c.WantStatus, err)
			}
		}
		if c.Check != nil {
			c.Check(t, r)
		}
	}
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(a, b json.RawMessage) (bool, error) {
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		return false, fmt.Errorf("decode %q: %w", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		return false, fmt.Errorf("decode %q: %w", b, err)
	}
	return reflect.DeepEqual(va, vb), nil
}

// probe is the suite's own provider, exercising the SDK's semantics.
type probe struct {
	running, peak atomic.Int64
	expiredRan    atomic.Bool // the "expired" verb ran
}

func (p *probe) provider() sdk.Provider {
	return sdk.Provider{
		Kind: ProbeKind, Version: 1,
		Reconcile: func(ctx context.Context, r *sdk.Request) (any, error) {
			dl, _ := ctx.Deadline()
			return map[string]any{
				"task_id": r.TaskID, "key": r.Key, "reaction": r.Reaction, "uid": r.UID,
				"kind": r.Kind, "kind_version": r.KindVersion, "name": r.Name, "generation": r.Generation,
				"spec": r.Spec, "status": r.Status, "config": r.Config, "deadline": dl.UnixMilli(),
			}, nil
		},
		Compose: func(ctx context.Context, r *sdk.Request) (*sdk.Composition, error) {
			return &sdk.Composition{
				Children: []converge.Child{
					{Kind: "a", KindVersion: 1, Name: r.Name + "-a", Spec: json.RawMessage(`{"x":1}`)},
					{Kind: "b", KindVersion: 2, Name: r.Name + "-b", Spec: json.RawMessage(`{}`), ProviderConfigRef: "cfg"},
				},
				Edges: []converge.Edge{{
					Consumer: converge.NewID("b", r.Name+"-b"), Producer: converge.NewID("a", r.Name+"-a"),
					Flows: []converge.ValueFlow{{From: "id", To: "a_id"}},
				}},
			}, nil
		},
		Teardown: func(ctx context.Context, r *sdk.Request) error { return nil },
		React: func(ctx context.Context, r *sdk.Request) error {
			if r.Subject == nil || r.Subject.Transition != converge.TransitionSynced || r.Subject.Resource != "vpc/x" ||
				r.Subject.UID != "u1" || r.Subject.Generation != 7 || string(r.Subject.Status) != `{"ok":true}` {
				return sdk.Permanent(fmt.Errorf("react: subject %+v did not arrive intact", r.Subject))
			}
			return nil
		},
		Verbs: map[string]func(ctx context.Context, r *sdk.Request) (any, error){
			"raw_status":   func(context.Context, *sdk.Request) (any, error) { return json.RawMessage(`{"raw":true}`), nil },
			"nil_status":   func(context.Context, *sdk.Request) (any, error) { return nil, nil },
			"typed_status": func(context.Context, *sdk.Request) (any, error) { return struct{ Zone string }{"a"}, nil },
			"args":         func(_ context.Context, r *sdk.Request) (any, error) { return r.Args, nil },
			"transient": func(context.Context, *sdk.Request) (any, error) {
				return json.RawMessage(`{"ignored":true}`), sdk.Transient(errors.New("try again"))
			},
			"permanent": func(context.Context, *sdk.Request) (any, error) { return nil, sdk.Permanent(errors.New("bad spec")) },
			"wrapped_permanent": func(context.Context, *sdk.Request) (any, error) {
				return nil, fmt.Errorf("outer: %w", sdk.Permanent(errors.New("inner")))
			},
			"plain_error": func(context.Context, *sdk.Request) (any, error) { return nil, errors.New("plain") },
			"panic":       func(context.Context, *sdk.Request) (any, error) { panic("boom") },
			"block": func(ctx context.Context, _ *sdk.Request) (any, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
			"ignore_deadline": func(context.Context, *sdk.Request) (any, error) {
				time.Sleep(1500 * time.Millisecond)
				return "late", nil
			},
			"expired": func(context.Context, *sdk.Request) (any, error) {
				p.expiredRan.Store(true)
				return nil, nil
			},
			"hold": func(context.Context, *sdk.Request) (any, error) {
				n := p.running.Add(1)
				for {
					m := p.peak.Load()
					if n <= m || p.peak.CompareAndSwap(m, n) {
						break
					}
				}
				time.Sleep(20 * time.Millisecond)
				p.running.Add(-1)
				return nil, nil
			},
		},
	}
}

func probeTask(reaction string) converge.Task {
	return converge.Task{Kind: ProbeKind, KindVersion: 1, Reaction: reaction, Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)}
}

func testProbe(t *testing.T, h *Harness, pr *probe) {
	t.Run("fields", func(t *testing.T) {
		task := probeTask(converge.ReactionReconcile)
		task.Status = json.RawMessage(`{"old":1}`)
		task.Config = json.RawMessage(`{"region":"eu"}`)
		task.Generation = 4
		task.Deadline = time.Now().Add(7 * time.Second).Truncate(time.Millisecond)
		h.Fill(&task)
		r := h.Do(t, task)
		if r.Outcome != converge.OutcomeOK {
			t.Fatalf("outcome = %s (%s), want ok", r.Outcome, r.Message)
		}
		var got map[string]any
		if err := json.Unmarshal(r.Status, &got); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{
			"task_id": task.ID, "key": task.Key, "reaction": "reconcile", "uid": task.UID,
			"kind": ProbeKind, "kind_version": 1.0, "name": task.Name, "generation": 4.0,
			"spec": map[string]any{"cidr": "10.0.0.0/16"}, "status": map[string]any{"old": 1.0},
			"config": map[string]any{"region": "eu"}, "deadline": float64(task.Deadline.UnixMilli()),
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("handler saw\n %v\nwant\n %v", got, want)
		}
		if r.TaskID != task.ID {
			t.Errorf("result task id = %q, want %q", r.TaskID, task.ID)
		}
	})

	t.Run("outcomes", func(t *testing.T) {
		tests := []struct {
			name        string
			verb        string
			args        map[string]string
			wantOutcome converge.Outcome
			wantStatus  string // "" means no status
			wantMessage string // a substring
		}{
			{name: "raw status", verb: "raw_status", wantStatus: `{"raw":true}`},
			{name: "nil status is no change", verb: "nil_status"},
			{name: "typed status is JSON", verb: "typed_status", wantStatus: `{"Zone":"a"}`},
			{name: "args reach the handler", verb: "args", args: map[string]string{"a": "1"}, wantStatus: `{"a":"1"}`},
			{name: "transient drops the status", verb: "transient", wantOutcome: converge.OutcomeTransient, wantMessage: "try again"},
			{name: "permanent", verb: "permanent", wantOutcome: converge.OutcomePermanent, wantMessage: "bad spec"},
			{name: "wrapped permanent", verb: "wrapped_permanent", wantOutcome: converge.OutcomePermanent, wantMessage: "outer: inner"},
			{name: "plain error is transient", verb: "plain_error", wantOutcome: converge.OutcomeTransient, wantMessage: "plain"},
			{name: "panic is transient", verb: "panic", wantOutcome: converge.OutcomeTransient, wantMessage: "panic: boom"},
			{name: "teardown returns", verb: converge.ReactionTeardown},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				task := probeTask(tt.verb)
				task.Args = tt.args
				r := h.Do(t, task)
				if got, want := r.Outcome, tt.wantOutcome; got != want {
					t.Errorf("outcome = %s (%s), want %s", got, r.Message, want)
				}
				if got, want := string(r.Status), tt.wantStatus; got != want {
					t.Errorf("status = %q, want %q", got, want)
				}
				if !strings.Contains(r.Message, tt.wantMessage) {
					t.Errorf("message = %q, want it to contain %q", r.Message, tt.wantMessage)
				}
			})
		}
	})

	t.Run("react", func(t *testing.T) {
		task := probeTask(converge.ReactionReact)
		task.Subject = &converge.Subject{Resource: "vpc/x", UID: "u1", Generation: 7,
			Transition: converge.TransitionSynced, Status: json.RawMessage(`{"ok":true}`)}
		if r := h.Do(t, task); r.Outcome != converge.OutcomeOK {
			t.Errorf("outcome = %s (%s), want ok", r.Outcome, r.Message)
		}
	})

	t.Run("compose", func(t *testing.T) {
		task := probeTask(converge.ReactionCompose)
		task.Name = "root"
		r := h.Do(t, task)
		if r.Outcome != converge.OutcomeOK {
			t.Fatalf("outcome = %s (%s), want ok", r.Outcome, r.Message)
		}
		wantChildren := []converge.Child{
			{Kind: "a", KindVersion: 1, Name: "root-a", Spec: json.RawMessage(`{"x":1}`)},
			{Kind: "b", KindVersion: 2, Name: "root-b", Spec: json.RawMessage(`{}`), ProviderConfigRef: "cfg"},
		}
		wantEdges := []converge.Edge{{Consumer: "b/root-b", Producer: "a/root-a",
			Flows: []converge.ValueFlow{{From: "id", To: "a_id"}}}}
		if !reflect.DeepEqual(r.Children, wantChildren) {
			t.Errorf("children = %+v, want %+v", r.Children, wantChildren)
		}
		if !reflect.DeepEqual(r.Edges, wantEdges) {
			t.Errorf("edges = %+v, want %+v", r.Edges, wantEdges)
		}
	})

	t.Run("deadline", func(t *testing.T) {
		for _, verb := range []string{"block", "ignore_deadline"} {
			task := probeTask(verb)
			start := time.Now()
			task.Deadline = start.Add(300 * time.Millisecond)
			ch := h.Dispatch(t, &task)
			select {
			case r := <-ch:
				if got, want := r.Outcome, converge.OutcomeTransient; got != want {
					t.Errorf("%s: outcome = %s (%s), want %s", verb, got, r.Message, want)
				}
				if el := time.Since(start); el < 250*time.Millisecond {
					t.Errorf("%s: answered after %v, before the deadline", verb, el)
				}
			case <-time.After(1200 * time.Millisecond):
				t.Errorf("%s: no answer 900ms after the deadline", verb)
			}
			if verb == "ignore_deadline" {
				time.Sleep(1500*time.Millisecond + unansweredInterval)
				if r := h.Extra(task.ID); r != nil {
					t.Errorf("%s: answered twice (second: %s %s)", verb, r.Outcome, r.Message)
				}
			}
		}
	})

	t.Run("expired on arrival", func(t *testing.T) {
		task := probeTask("expired")
		task.Deadline = time.Now().Add(-time.Second)
		r := h.Do(t, task)
		if got, want := r.Outcome, converge.OutcomeTransient; got != want {
			t.Errorf("outcome = %s (%s), want %s", got, r.Message, want)
		}
		if pr.expiredRan.Load() {
			t.Error("the handler ran for a task whose deadline had passed")
		}
	})

	t.Run("concurrency", func(t *testing.T) {
		var chans []<-chan *converge.Result
		for range 6 * probeConcurrency {
			task := probeTask("hold")
			chans = append(chans, h.Dispatch(t, &task))
		}
		for i, ch := range chans {
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				t.Fatalf("hold task %d: no answer", i)
			}
		}
		if got, limit := pr.peak.Load(), int64(probeConcurrency); got > limit || got < 2 {
			t.Errorf("peak concurrent handlers = %d, want 2..%d", got, limit)
		}
	})

	t.Run("same key twice", func(t *testing.T) {
		task := probeTask(converge.ReactionTeardown)
		h.Fill(&task)
		var outcomes []converge.Outcome
		for i := range 2 {
			again := task
			again.ID = fmt.Sprintf("%s-%d", task.ID, i)
			outcomes = append(outcomes, h.Do(t, again).Outcome)
		}
		if !slices.Equal(outcomes, []converge.Outcome{converge.OutcomeOK, converge.OutcomeOK}) {
			t.Errorf("outcomes = %v, want ok twice", outcomes)
		}
	})
}
