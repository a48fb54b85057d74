package providers_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/convergehq/converge"
	convergev1 "github.com/convergehq/converge/proto/converge/v1"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/providers/sdk"
)

func TestAuth(t *testing.T) {
	tests := []struct {
		name     string
		network  string
		token    string
		wantCode codes.Code
	}{
		{name: "unix no token", network: "unix", token: "", wantCode: codes.Unauthenticated},
		{name: "unix wrong token", network: "unix", token: "s3cret-tokem", wantCode: codes.Unauthenticated},
		{name: "unix token prefix", network: "unix", token: "s3cret", wantCode: codes.Unauthenticated},
		{name: "unix right token", network: "unix", token: testToken, wantCode: codes.OK},
		{name: "tcp no token", network: "tcp", token: "", wantCode: codes.Unauthenticated},
		{name: "tcp wrong token", network: "tcp", token: "nope", wantCode: codes.Unauthenticated},
		{name: "tcp right token", network: "tcp", token: testToken, wantCode: codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, addr := startServer(t, tt.network, providers.ServerOptions{})
			stream := rawStream(t, addr, tt.token)
			_ = stream.Send(register("raw", 1, &convergev1.Capability{Kind: "vpc", KindVersion: 1, Reactions: []string{"reconcile"}}))
			m, err := stream.Recv()
			if got, want := status.Code(err), tt.wantCode; got != want {
				t.Fatalf("code = %v (%v), want %v", got, err, want)
			}
			if tt.wantCode == codes.OK {
				if m.GetRegistered().GetWorkerId() == "" {
					t.Fatalf("first message = %v, want registered", m)
				}
				waitFor(t, 2*time.Second, "raw worker listed", func() bool { return hasWorker(s, "raw") })
			} else if got := len(s.Workers()); got != 0 {
				t.Fatalf("workers = %d after a refused connection, want 0", got)
			}
		})
	}
}

func TestAuthEmptyServerTokenRefusesAll(t *testing.T) {
	// A server whose token is empty would accept "Bearer " if it compared
	// naively; NewServer with Token "" must refuse everyone.
	s2 := providers.NewServer(providers.ServerOptions{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s2.Serve(l)
	defer s2.Close()
	stream := rawStream(t, l.Addr().String(), "")
	_ = stream.Send(register("raw", 1))
	if _, err := stream.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("empty server token: err = %v, want Unauthenticated", err)
	}
}

func TestSDKWrongTokenReturns(t *testing.T) {
	_, addr := startServer(t, "unix", providers.ServerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := sdk.Connect(ctx, sdk.Options{Addr: addr, Token: "wrong", Name: "w"}, noop("vpc", 1))
	if got, want := status.Code(err), codes.Unauthenticated; got != want || ctx.Err() != nil {
		t.Fatalf("connect with a wrong token: %v (code %v), want %v before the timeout", err, got, want)
	}
}

func TestRouting(t *testing.T) {
	s, addr := startServer(t, "unix", providers.ServerOptions{})
	startWorker(t, s, addr, "v1", 8, noop("vpc", 1))
	v2 := noop("vpc", 2)
	v2.Teardown = func(ctx context.Context, r *sdk.Request) error { return nil }
	startWorker(t, s, addr, "v2", 8, v2)

	tests := []struct {
		name       string
		kind       string
		version    int
		reaction   string
		wantWorker string // "" means ErrNoWorker
	}{
		{name: "v1 reconcile", kind: "vpc", version: 1, reaction: "reconcile", wantWorker: "v1"},
		{name: "v2 reconcile", kind: "vpc", version: 2, reaction: "reconcile", wantWorker: "v2"},
		{name: "v2 teardown", kind: "vpc", version: 2, reaction: "teardown", wantWorker: "v2"},
		{name: "v1 has no teardown", kind: "vpc", version: 1, reaction: "teardown"},
		{name: "no v3 worker", kind: "vpc", version: 3, reaction: "reconcile"},
		{name: "v0 is not v1", kind: "vpc", version: 0, reaction: "reconcile"},
		{name: "unknown kind", kind: "subnet", version: 1, reaction: "reconcile"},
		{name: "kind is case sensitive", kind: "VPC", version: 1, reaction: "reconcile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref := converge.KindRef{Kind: tt.kind, Version: tt.version}
			if got, want := s.Serves(ref, tt.reaction), tt.wantWorker != ""; got != want {
				t.Errorf("Serves(%s, %s) = %v, want %v", ref, tt.reaction, got, want)
			}
			for range 5 {
				tk := task(tt.kind, tt.version, tt.reaction)
				err := s.Dispatch(context.Background(), tk)
				if tt.wantWorker == "" {
					if !errors.Is(err, converge.ErrNoWorker) {
						t.Fatalf("dispatch: err = %v, want ErrNoWorker", err)
					}
					if !strings.Contains(err.Error(), ref.String()) {
						t.Errorf("error %q does not name %s", err, ref)
					}
					continue
				}
				if err != nil {
					t.Fatalf("dispatch: %v", err)
				}
				r := result(t, s, 5*time.Second)
				if got, want := r.Worker, tt.wantWorker; got != want {
					t.Errorf("worker = %q, want %q", got, want)
				}
				if got, want := r.TaskID, tk.ID; got != want {
					t.Errorf("task id = %q, want %q", got, want)
				}
			}
		})
	}
}

func TestNoWorker(t *testing.T) {
	s, _ := startServer(t, "tcp", providers.ServerOptions{})
	if s.Serves(converge.KindRef{Kind: "vpc", Version: 1}, "reconcile") {
		t.Error("Serves = true with no worker")
	}
	if err := s.Dispatch(context.Background(), task("vpc", 1, "reconcile")); !errors.Is(err, converge.ErrNoWorker) {
		t.Fatalf("err = %v, want ErrNoWorker", err)
	}
}

// blocking returns a vpc/v1 provider whose reconcile waits for release
// (or its context) and reports each start on started.
func blocking(started chan<- string, release <-chan struct{}) sdk.Provider {
	return sdk.Provider{Kind: "vpc", Version: 1, Reconcile: func(ctx context.Context, r *sdk.Request) (any, error) {
		started <- r.TaskID
		select {
		case <-release:
			return json.RawMessage(`{"done":true}`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
}

func TestCapacity(t *testing.T) {
	s, addr := startServer(t, "unix", providers.ServerOptions{})
	started, release := make(chan string, 16), make(chan struct{})
	startWorker(t, s, addr, "w", 2, blocking(started, release))
	for range 2 {
		if err := s.Dispatch(context.Background(), task("vpc", 1, "reconcile")); err != nil {
			t.Fatal(err)
		}
	}
	<-started
	<-started
	err := s.Dispatch(context.Background(), task("vpc", 1, "reconcile"))
	if !errors.Is(err, converge.ErrNoWorker) || !strings.Contains(err.Error(), "capacity") {
		t.Fatalf("dispatch beyond capacity: err = %v, want ErrNoWorker at capacity", err)
	}
	if ws := s.Workers(); len(ws) != 1 || ws[0].InFlight != 2 || ws[0].Capacity != 2 {
		t.Fatalf("workers = %+v, want one with 2/2 in flight", ws)
	}
	drain(s)
	release <- struct{}{}
	r := result(t, s, 5*time.Second)
	if r.Outcome != converge.OutcomeOK || string(r.Status) != `{"done":true}` {
		t.Fatalf("result = %+v", r)
	}
	select {
	case <-s.Changed():
	case <-time.After(2 * time.Second):
		t.Fatal("Changed not signalled when capacity freed")
	}
	if err := s.Dispatch(context.Background(), task("vpc", 1, "reconcile")); err != nil {
		t.Fatalf("dispatch after a slot freed: %v", err)
	}
	close(release)
}

func TestLeastLoaded(t *testing.T) {
	s, addr := startServer(t, "unix", providers.ServerOptions{})
	started, release := make(chan string, 16), make(chan struct{})
	defer close(release)
	startWorker(t, s, addr, "a", 4, blocking(started, release))
	startWorker(t, s, addr, "b", 4, blocking(started, release))
	for range 6 {
		if err := s.Dispatch(context.Background(), task("vpc", 1, "reconcile")); err != nil {
			t.Fatal(err)
		}
	}
	ws := s.Workers()
	if len(ws) != 2 || ws[0].InFlight != 3 || ws[1].InFlight != 3 {
		t.Fatalf("in flight = %+v, want 3 and 3", ws)
	}
}

// TestDisconnectFailsTasksAtOnce: a worker whose stream ends loses its
// tasks at once, each answered with a transient result naming the worker,
// so the scheduler runs them elsewhere now rather than at lease expiry.
func TestDisconnectFailsTasksAtOnce(t *testing.T) {
	s, addr := startServer(t, "unix", providers.ServerOptions{})
	started, release := make(chan string, 16), make(chan struct{})
	defer close(release)
	stop := startWorker(t, s, addr, "w", 4, blocking(started, release))
	tk := task("vpc", 1, "reconcile")
	if err := s.Dispatch(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	<-started
	drain(s)
	stop()
	select {
	case r := <-s.Results():
		if r.TaskID != tk.ID || r.Outcome != converge.OutcomeTransient || !strings.HasPrefix(r.Message, "worker w disconnected") {
			t.Errorf("result of a lost task = %+v, want transient \"worker w disconnected…\" for %s", r, tk.ID)
		}
		// A reason a person reads: no Go jargon.
		if got, want := r.Message, "worker w disconnected: the worker went away (its connection closed)"; got != want {
			t.Errorf("message = %q, want %q", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no result for the task of a disconnected worker")
	}
	select {
	case <-s.Changed():
	case <-time.After(5 * time.Second):
		t.Fatal("Changed not signalled on disconnect")
	}
	waitFor(t, 5*time.Second, "worker removed", func() bool { return len(s.Workers()) == 0 })
	if s.Serves(converge.KindRef{Kind: "vpc", Version: 1}, "reconcile") {
		t.Error("Serves = true after the only worker left")
	}
	noResult(t, s, 300*time.Millisecond)
}

func TestHeartbeatTimeout(t *testing.T) {
	s, addr := startServer(t, "unix", providers.ServerOptions{HeartbeatInterval: 50 * time.Millisecond, WorkerTimeout: 200 * time.Millisecond})
	// A live SDK worker heartbeats and stays.
	startWorker(t, s, addr, "alive", 4, noop("vpc", 1))
	// A raw worker that never heartbeats is dropped.
	stream := rawStream(t, addr, testToken)
	if err := stream.Send(register("silent", 4, &convergev1.Capability{Kind: "vpc", KindVersion: 2, Reactions: []string{"reconcile"}})); err != nil {
		t.Fatal(err)
	}
	m, err := stream.Recv()
	if err != nil || m.GetRegistered().GetHeartbeatIntervalMs() != 50 {
		t.Fatalf("registered = %v, %v; want a 50ms heartbeat interval", m, err)
	}
	drain(s)
	start := time.Now()
	for {
		if _, err = stream.Recv(); err != nil {
			break // pings until the server gives up
		}
	}
	if got, want := status.Code(err), codes.DeadlineExceeded; got != want {
		t.Errorf("stream ended with %v, want %v", err, want)
	}
	if el := time.Since(start); el < 150*time.Millisecond || el > 2*time.Second {
		t.Errorf("dropped after %v, want about the 200ms worker timeout", el)
	}
	select {
	case <-s.Changed():
	case <-time.After(2 * time.Second):
		t.Error("Changed not signalled on timeout")
	}
	waitFor(t, 2*time.Second, "silent worker removed", func() bool { return !hasWorker(s, "silent") })
	time.Sleep(300 * time.Millisecond)
	if !hasWorker(s, "alive") {
		t.Error("heartbeating worker was dropped")
	}
}

// TestStalledWorkerLosesTasks: a worker that stops reading and sending
// (a stopped process, a dead host) while the control plane sends it more
// than its stream's flow-control window holds is dropped after the worker
// timeout all the same, and each of its tasks is answered at once with a
// transient "worker … disconnected", though the sender is stuck in Send
// to it. (Before, only the sender looked at the timeout: it never did, and
// the tasks waited for their leases.) A result the worker sends when it
// wakes is not taken: the tasks were answered.
func TestStalledWorkerLosesTasks(t *testing.T) {
	s, addr := startServer(t, "tcp", providers.ServerOptions{HeartbeatInterval: 50 * time.Millisecond, WorkerTimeout: 300 * time.Millisecond})
	stream := rawStream(t, addr, testToken)
	if err := stream.Send(register("stalled", 64, &convergev1.Capability{Kind: "vpc", KindVersion: 1, Reactions: []string{"reconcile"}})); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	drain(s)
	// 48 tasks of 1 MiB specs: far more than a stream's window, which
	// only grows while the worker reads.
	big := json.RawMessage(`{"pad":"` + strings.Repeat("x", 1<<20) + `"}`)
	ids := map[string]bool{}
	for range 48 {
		tk := task("vpc", 1, "reconcile")
		tk.Spec = big
		if err := s.Dispatch(context.Background(), tk); err != nil {
			t.Fatal(err)
		}
		ids[tk.ID] = true
	}
	deadline := time.After(30 * time.Second) // liveness, not speed: before the fix, never
	for len(ids) > 0 {
		select {
		case r := <-s.Results():
			if !ids[r.TaskID] || r.Outcome != converge.OutcomeTransient || !strings.HasPrefix(r.Message, "worker stalled disconnected: no heartbeat") {
				t.Fatalf("result %+v, want a transient \"worker stalled disconnected: no heartbeat…\" for one of its tasks", r)
			}
			delete(ids, r.TaskID)
		case <-deadline:
			t.Fatalf("%d tasks of the stalled worker never answered", len(ids))
		}
	}
	waitFor(t, 5*time.Second, "stalled worker removed", func() bool { return !hasWorker(s, "stalled") })
	// The worker wakes and answers a task it was sent: ignored.
	var first string
	for {
		m, err := stream.Recv()
		if err != nil {
			break
		}
		if ts := m.GetTasks().GetTasks(); len(ts) > 0 {
			first = ts[0].GetId()
			stream.Send(&convergev1.WorkerMessage{Msg: &convergev1.WorkerMessage_Results{Results: &convergev1.ResultBatch{
				Results: []*convergev1.Result{{TaskId: first, Outcome: convergev1.Outcome_OUTCOME_OK}}}}})
			break
		}
	}
	noResult(t, s, 300*time.Millisecond)
}

func TestBatchingAndAtMostOnce(t *testing.T) {
	const n = 2000
	s, addr := startServer(t, "tcp", providers.ServerOptions{})
	stream := rawStream(t, addr, testToken)
	if err := stream.Send(register("raw", n, &convergev1.Capability{Kind: "vpc", KindVersion: 1, Reactions: []string{"reconcile"}})); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "raw registered", func() bool { return hasWorker(s, "raw") })
	for range n {
		if err := s.Dispatch(context.Background(), task("vpc", 1, "reconcile")); err != nil {
			t.Fatal(err)
		}
	}
	var got []*convergev1.Task
	messages, biggest := 0, 0
	for len(got) < n {
		m, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if b := m.GetTasks(); b != nil {
			messages++
			biggest = max(biggest, len(b.Tasks))
			got = append(got, b.Tasks...)
		}
	}
	t.Logf("%d tasks in %d messages, biggest batch %d", n, messages, biggest)
	if messages > n/2 || biggest < 2 {
		t.Errorf("%d tasks came in %d messages (biggest %d): not batched", n, messages, biggest)
	}
	// Answer all in one batch, plus a duplicate and an unknown task.
	rb := &convergev1.ResultBatch{}
	for _, tk := range got {
		rb.Results = append(rb.Results, &convergev1.Result{TaskId: tk.Id, Outcome: convergev1.Outcome_OUTCOME_OK})
	}
	rb.Results = append(rb.Results,
		&convergev1.Result{TaskId: got[0].Id, Outcome: convergev1.Outcome_OUTCOME_PERMANENT},
		&convergev1.Result{TaskId: "never-dispatched", Outcome: convergev1.Outcome_OUTCOME_OK},
		&convergev1.Result{TaskId: got[1].Id}, // a second answer, unspecified outcome
	)
	if err := stream.Send(&convergev1.WorkerMessage{Msg: &convergev1.WorkerMessage_Results{Results: rb}}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range n {
		r := result(t, s, 5*time.Second)
		if seen[r.TaskID] || r.Outcome != converge.OutcomeOK {
			t.Fatalf("result %+v: duplicate or wrong outcome", r)
		}
		seen[r.TaskID] = true
	}
	noResult(t, s, 200*time.Millisecond)
}

func TestUnspecifiedOutcomeIsTransient(t *testing.T) {
	s, addr := startServer(t, "unix", providers.ServerOptions{})
	stream := rawStream(t, addr, testToken)
	if err := stream.Send(register("raw", 1, &convergev1.Capability{Kind: "vpc", KindVersion: 1, Reactions: []string{"reconcile"}})); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "raw registered", func() bool { return hasWorker(s, "raw") })
	if err := s.Dispatch(context.Background(), task("vpc", 1, "reconcile")); err != nil {
		t.Fatal(err)
	}
	m, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	id := m.GetTasks().GetTasks()[0].GetId()
	if err := stream.Send(&convergev1.WorkerMessage{Msg: &convergev1.WorkerMessage_Results{Results: &convergev1.ResultBatch{
		Results: []*convergev1.Result{{TaskId: id, Message: "old worker"}},
	}}}); err != nil {
		t.Fatal(err)
	}
	if r := result(t, s, 5*time.Second); r.Outcome != converge.OutcomeTransient {
		t.Fatalf("outcome = %s, want transient", r.Outcome)
	}
}

func TestRegisterValidation(t *testing.T) {
	tests := []struct {
		name string
		msg  *convergev1.WorkerMessage
	}{
		{name: "heartbeat first", msg: &convergev1.WorkerMessage{Msg: &convergev1.WorkerMessage_Heartbeat{Heartbeat: &convergev1.Heartbeat{}}}},
		{name: "zero concurrency", msg: register("w", 0, &convergev1.Capability{Kind: "vpc", KindVersion: 1, Reactions: []string{"reconcile"}})},
		{name: "version zero", msg: register("w", 1, &convergev1.Capability{Kind: "vpc", KindVersion: 0, Reactions: []string{"reconcile"}})},
		{name: "no reactions", msg: register("w", 1, &convergev1.Capability{Kind: "vpc", KindVersion: 1})},
	}
	s, addr := startServer(t, "unix", providers.ServerOptions{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream := rawStream(t, addr, testToken)
			_ = stream.Send(tt.msg)
			if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("err = %v, want InvalidArgument", err)
			}
			if n := len(s.Workers()); n != 0 {
				t.Fatalf("%d workers registered, want 0", n)
			}
		})
	}
}

func TestListenUnix(t *testing.T) {
	dir, err := os.MkdirTemp("", "cvl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)

	t.Run("creates owner-only", func(t *testing.T) {
		path := filepath.Join(dir, "new", "a.sock")
		l, err := providers.ListenUnix(path)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := fi.Mode().Perm(), os.FileMode(0o600); got != want {
			t.Errorf("socket mode = %v, want %v", got, want)
		}
		di, err := os.Stat(filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := di.Mode().Perm(), os.FileMode(0o700); got != want {
			t.Errorf("dir mode = %v, want %v", got, want)
		}
	})
	t.Run("replaces a stale socket", func(t *testing.T) {
		path := filepath.Join(dir, "stale.sock")
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		l.Close()
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("stale socket not left behind: %v", err)
		}
		l2, err := providers.ListenUnix(path)
		if err != nil {
			t.Fatalf("listen over a stale socket: %v", err)
		}
		l2.Close()
	})
	t.Run("refuses a live socket", func(t *testing.T) {
		path := filepath.Join(dir, "live.sock")
		l, err := providers.ListenUnix(path)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		if l2, err := providers.ListenUnix(path); err == nil {
			l2.Close()
			t.Fatal("second listener on a live socket succeeded")
		}
	})
	t.Run("refuses a path too long for a socket", func(t *testing.T) {
		path := filepath.Join(dir, strings.Repeat("d", 100), "w.sock")
		_, err := providers.ListenUnix(path)
		if err == nil || !strings.Contains(err.Error(), "bytes") {
			t.Fatalf("err = %v, want the path length named", err)
		}
	})
	t.Run("refuses a regular file", func(t *testing.T) {
		path := filepath.Join(dir, "file")
		if err := os.WriteFile(path, []byte("keep me"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := providers.ListenUnix(path); err == nil {
			t.Fatal("listening over a regular file succeeded")
		}
		if b, _ := os.ReadFile(path); string(b) != "keep me" {
			t.Fatal("regular file was clobbered")
		}
	})
}

func TestReconnectAfterServerRestart(t *testing.T) {
	dir, err := os.MkdirTemp("", "cvr")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "w.sock")
	serve := func() *providers.Server {
		l, err := providers.ListenUnix(path)
		if err != nil {
			t.Fatal(err)
		}
		s := providers.NewServer(providers.ServerOptions{Token: testToken})
		go s.Serve(l)
		return s
	}
	s1 := serve()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sdk.Connect(ctx, sdk.Options{Addr: "unix://" + path, Token: testToken, Name: "w", Logger: slog.New(slog.DiscardHandler)}, noop("vpc", 1))
	}()
	waitFor(t, 5*time.Second, "first registration", func() bool { return hasWorker(s1, "w") })
	s1.Close()
	s2 := serve()
	defer s2.Close()
	waitFor(t, 10*time.Second, "registration with the restarted server", func() bool { return hasWorker(s2, "w") })
	if err := s2.Dispatch(context.Background(), task("vpc", 1, "reconcile")); err != nil {
		t.Fatal(err)
	}
	result(t, s2, 5*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("connect returned %v after ctx done, want nil", err)
	}
}

// A scheduler that stops reading Results makes the receiver wait; the
// worker is not silent then and must not be dropped as timed out.
func TestSlowSchedulerKeepsWorker(t *testing.T) {
	const n = 9000 // more than the Results buffer
	s, addr := startServer(t, "unix", providers.ServerOptions{HeartbeatInterval: 200 * time.Millisecond, WorkerTimeout: time.Second})
	stream := rawStream(t, addr, testToken)
	if err := stream.Send(register("raw", n, &convergev1.Capability{Kind: "vpc", KindVersion: 1, Reactions: []string{"reconcile"}})); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "raw registered", func() bool { return hasWorker(s, "raw") })
	// The worker heartbeats on its own until it has sent its results, as
	// the SDK does: on a slow machine dispatching and receiving the tasks
	// takes longer than the worker timeout, and a worker silent that long
	// is dropped, whatever the control plane is doing.
	var sendMu sync.Mutex
	send := func(m *convergev1.WorkerMessage) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}
	stopBeats, beatsDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(beatsDone)
		for {
			select {
			case <-stopBeats:
				return
			case <-time.After(20 * time.Millisecond):
				send(&convergev1.WorkerMessage{Msg: &convergev1.WorkerMessage_Heartbeat{Heartbeat: &convergev1.Heartbeat{}}})
			}
		}
	}()
	for range n {
		if err := s.Dispatch(context.Background(), task("vpc", 1, "reconcile")); err != nil {
			t.Fatal(err)
		}
	}
	rb := &convergev1.ResultBatch{}
	for len(rb.Results) < n {
		m, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range m.GetTasks().GetTasks() {
			rb.Results = append(rb.Results, &convergev1.Result{TaskId: tk.Id, Outcome: convergev1.Outcome_OUTCOME_OK})
		}
	}
	err := send(&convergev1.WorkerMessage{Msg: &convergev1.WorkerMessage_Results{Results: rb}})
	close(stopBeats)
	<-beatsDone
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // over two worker timeouts without reading Results
	if !hasWorker(s, "raw") {
		t.Fatal("worker dropped while the scheduler was slow")
	}
	for range n {
		result(t, s, 5*time.Second)
	}
}

// The dry-run mark of a compose travels the stream to the provider, which
// answers with the children it would emit (and no side effects).
func TestDryRunReachesProvider(t *testing.T) {
	s, addr := startServer(t, "unix", providers.ServerOptions{})
	var mu sync.Mutex
	sideEffects := 0
	startWorker(t, s, addr, "bom", 4, sdk.Provider{Kind: "bom", Version: 1,
		Compose: func(ctx context.Context, r *sdk.Request) (*sdk.Composition, error) {
			if !r.DryRun {
				mu.Lock()
				sideEffects++
				mu.Unlock()
			}
			name := "real"
			if r.DryRun {
				name = "dry"
			}
			return &sdk.Composition{Children: []converge.Child{{Kind: "account", KindVersion: 1, Name: name, Spec: []byte(`{}`)}}}, nil
		}})
	tests := []struct {
		name     string
		dryRun   bool
		wantName string
		wantSide int
	}{
		{name: "dry run", dryRun: true, wantName: "dry", wantSide: 0},
		{name: "real compose", dryRun: false, wantName: "real", wantSide: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk := task("bom", 1, converge.ReactionCompose)
			tk.DryRun = tt.dryRun
			if err := s.Dispatch(context.Background(), tk); err != nil {
				t.Fatal(err)
			}
			r := result(t, s, 5*time.Second)
			if len(r.Children) != 1 || r.Children[0].Name != tt.wantName {
				t.Fatalf("children %+v, want one named %q", r.Children, tt.wantName)
			}
			mu.Lock()
			defer mu.Unlock()
			if sideEffects != tt.wantSide {
				t.Errorf("%d side effects, want %d", sideEffects, tt.wantSide)
			}
		})
	}
}
