package providers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	convergev1 "github.com/convergehq/converge/proto/converge/v1"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/providers/sdk"
)

// bigComposer composes n children with specs of about specBytes each, and
// an edge for every child but the first.
func bigComposer(n, specBytes int) sdk.Provider {
	return sdk.Provider{Kind: "bom", Version: 1,
		Compose: func(ctx context.Context, r *sdk.Request) (*sdk.Composition, error) {
			pad := strings.Repeat("x", specBytes)
			c := &sdk.Composition{}
			for i := range n {
				name := fmt.Sprintf("c%07d", i)
				c.Children = append(c.Children, converge.Child{Kind: "leaf", KindVersion: 1, Name: name,
					Spec: []byte(`{"i":` + fmt.Sprint(i) + `,"pad":"` + pad + `"}`)})
				if i > 0 {
					c.Edges = append(c.Edges, converge.Edge{Consumer: converge.NewID("leaf", name),
						Producer: converge.NewID("leaf", fmt.Sprintf("c%07d", i-1)),
						Flows:    []converge.ValueFlow{{From: "id", To: "prev"}}})
				}
			}
			return c, nil
		}}
}

// streamComposer is bigComposer as a ComposeStream: it never holds the
// composition.
func streamComposer(n, specBytes int) sdk.Provider {
	return sdk.Provider{Kind: "bom", Version: 1,
		ComposeStream: func(ctx context.Context, r *sdk.Request, out *sdk.Emitter) error {
			pad := strings.Repeat("x", specBytes)
			for i := range n {
				name := fmt.Sprintf("c%07d", i)
				if err := out.Child(converge.Child{Kind: "leaf", KindVersion: 1, Name: name,
					Spec: []byte(`{"i":` + fmt.Sprint(i) + `,"pad":"` + pad + `"}`)}); err != nil {
					return err
				}
				if i > 0 {
					if err := out.Edge(converge.Edge{Consumer: converge.NewID("leaf", name),
						Producer: converge.NewID("leaf", fmt.Sprintf("c%07d", i-1)),
						Flows:    []converge.ValueFlow{{From: "id", To: "prev"}}}); err != nil {
						return err
					}
				}
			}
			return nil
		}}
}

// TestComposeStreamFails: an error after parts were sent fails the task
// permanently with the handler's message; nothing of it is applied.
func TestComposeStreamFails(t *testing.T) {
	s, addr := startServer(t, "unix", providers.ServerOptions{})
	p := sdk.Provider{Kind: "bom", Version: 1,
		ComposeStream: func(ctx context.Context, r *sdk.Request, out *sdk.Emitter) error {
			for i := range 10_000 {
				if err := out.Child(converge.Child{Kind: "leaf", KindVersion: 1, Name: fmt.Sprint("c", i), Spec: []byte(`{}`)}); err != nil {
					return err
				}
			}
			return sdk.Permanent(fmt.Errorf("team 10000: no name"))
		}}
	startWorker(t, s, addr, "big", 4, p)
	tk := task("bom", 1, converge.ReactionCompose)
	if err := s.Dispatch(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	r := result(t, s, 30*time.Second)
	if r.Outcome != converge.OutcomePermanent || !strings.Contains(r.Message, "team 10000: no name") {
		t.Errorf("result %v %q, want the handler's permanent error", r.Outcome, r.Message)
	}
	noResult(t, s, 100*time.Millisecond)
}

// TestComposeResultInParts: a composition far over the message limit
// (here ~100 MiB of children) reaches the control plane whole and in
// order, streamed in parts: returned whole by Compose, or handed over
// child by child to ComposeStream's Emitter.
func TestComposeResultInParts(t *testing.T) {
	if testing.Short() {
		t.Skip("moves ~100 MiB through gRPC")
	}
	const n = 50_000
	for name, p := range map[string]sdk.Provider{"Compose": bigComposer(n, 2000), "ComposeStream": streamComposer(n, 2000)} {
		t.Run(name, func(t *testing.T) { composeInParts(t, p, n) })
	}
}

func composeInParts(t *testing.T, p sdk.Provider, n int) {
	s, addr := startServer(t, "unix", providers.ServerOptions{})
	startWorker(t, s, addr, "big", 4, p)
	tk := task("bom", 1, converge.ReactionCompose)
	if err := s.Dispatch(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	r := result(t, s, 60*time.Second)
	if r.Outcome != converge.OutcomeOK {
		t.Fatalf("outcome %v: %s", r.Outcome, r.Message)
	}
	if got, want := len(r.Children), n; got != want {
		t.Fatalf("%d children arrived, want %d", got, want)
	}
	if got, want := len(r.Edges), n-1; got != want {
		t.Fatalf("%d edges arrived, want %d", got, want)
	}
	size := 0
	for i, c := range r.Children {
		if want := fmt.Sprintf("c%07d", i); c.Name != want {
			t.Fatalf("child %d is %s, want %s: parts out of order", i, c.Name, want)
		}
		size += len(c.Spec)
	}
	if size < 64<<20 {
		t.Errorf("children carry %d bytes, want more than one 64 MiB message", size)
	}
	if e := r.Edges[n-2]; e.Consumer != converge.NewID("leaf", fmt.Sprintf("c%07d", n-1)) || len(e.Flows) != 1 {
		t.Errorf("last edge %+v", e)
	}
	noResult(t, s, 100*time.Millisecond)
}

// TestComposeOverMaxChildren: the control plane stops taking parts of a
// composition over its kind's max_children and fails the task, naming it.
func TestComposeOverMaxChildren(t *testing.T) {
	s, addr := startServer(t, "unix", providers.ServerOptions{})
	startWorker(t, s, addr, "big", 4, bigComposer(20_000, 10))
	tk := task("bom", 1, converge.ReactionCompose)
	tk.MaxChildren = 5000
	if err := s.Dispatch(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	r := result(t, s, 30*time.Second)
	if r.Outcome != converge.OutcomePermanent || r.Message != "more than max_children 5000 children" {
		t.Errorf("result %v %q, want permanent naming max_children", r.Outcome, r.Message)
	}
	if len(r.Children) != 0 {
		t.Errorf("%d children kept", len(r.Children))
	}
	noResult(t, s, 300*time.Millisecond)
}

// TestOldProtocolOversizedMessage: a worker on protocol 1 (no parts) that
// sends a result over the limit breaks its stream; its tasks are answered
// at once with a reason that names the limit and the protocol, never left
// to expire.
func TestOldProtocolOversizedMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("sends a 65 MiB message")
	}
	s, addr := startServer(t, "unix", providers.ServerOptions{})
	st := rawStream(t, addr, testToken)
	if err := st.Send(register("old", 4, &convergev1.Capability{Kind: "bom", KindVersion: 1, Reactions: []string{"compose"}})); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "worker listed", func() bool { return hasWorker(s, "old") })
	tk := task("bom", 1, converge.ReactionCompose)
	if err := s.Dispatch(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	big := &convergev1.Result{TaskId: tk.ID, Outcome: convergev1.Outcome_OUTCOME_OK}
	for i := range 65 {
		big.Children = append(big.Children, &convergev1.Child{Kind: "leaf", KindVersion: 1, Name: fmt.Sprint(i),
			Spec: []byte(`"` + strings.Repeat("x", 1<<20) + `"`)})
	}
	_ = st.Send(&convergev1.WorkerMessage{Msg: &convergev1.WorkerMessage_Results{Results: &convergev1.ResultBatch{Results: []*convergev1.Result{big}}}})
	r := result(t, s, 10*time.Second)
	if r.TaskID != tk.ID || r.Outcome != converge.OutcomeTransient {
		t.Fatalf("result %+v, want a transient one for %s", r, tk.ID)
	}
	for _, want := range []string{"worker old sent a message over the control plane's limit", "older worker protocol", "rebuild it with the current SDK"} {
		if !strings.Contains(r.Message, want) {
			t.Errorf("message %q does not say %q", r.Message, want)
		}
	}
}

// TestOversizedPartRefusedByWorker: one child too big for any message
// fails the compose permanently, naming the size and the limit, instead
// of breaking the worker's stream.
func TestOversizedPartRefusedByWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 65 MiB spec")
	}
	s, addr := startServer(t, "unix", providers.ServerOptions{})
	startWorker(t, s, addr, "huge", 4, bigComposer(1, 65<<20))
	tk := task("bom", 1, converge.ReactionCompose)
	if err := s.Dispatch(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	r := result(t, s, 30*time.Second)
	if r.Outcome != converge.OutcomePermanent || !strings.Contains(r.Message, "result too large: the result is") ||
		!strings.Contains(r.Message, "over the control plane's message limit of 67108864 bytes") {
		t.Errorf("result %v %q, want a permanent 'result too large'", r.Outcome, r.Message)
	}
	if !hasWorker(s, "huge") {
		t.Error("the worker's stream broke")
	}
}
