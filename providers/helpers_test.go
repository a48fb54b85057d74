package providers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/convergehq/converge"
	convergev1 "github.com/convergehq/converge/proto/converge/v1"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/providers/sdk"
	"github.com/convergehq/converge/scheduler"
)

var _ scheduler.Dispatcher = (*providers.Server)(nil)

const testToken = "s3cret-token"

// TestMain doubles as a worker process for the supervisor tests: with
// CONVERGE_TEST_HELPER_WORKER=1 the test binary serves the "helper" kind
// through sdk.Serve instead of running tests.
func TestMain(m *testing.M) {
	if os.Getenv("CONVERGE_TEST_HELPER_WORKER") == "1" {
		os.Exit(helperWorker())
	}
	os.Exit(m.Run())
}

// helperWorker reports what it was started with as the status of every
// reconcile: argv, pid, worker name and two test variables.
func helperWorker() int {
	if os.Getenv("HELPER_IGNORE_TERM") == "1" {
		signal.Ignore(syscall.SIGTERM)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if os.Getenv("HELPER_IGNORE_TERM") == "1" {
		ctx = context.Background()
	}
	err := sdk.Serve(ctx, sdk.Provider{Kind: "helper", Version: 1,
		Reconcile: func(ctx context.Context, r *sdk.Request) (any, error) {
			return helperStatus{
				Argv: os.Args, Pid: os.Getpid(), Name: os.Getenv(sdk.EnvWorkerName),
				Extra: os.Getenv("EXTRA"), SpecEnv: os.Getenv("SPEC_ENV"), Env: os.Environ(),
			}, nil
		}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper worker:", err)
		return 1
	}
	return 0
}

type helperStatus struct {
	Argv    []string `json:"argv"`
	Pid     int      `json:"pid"`
	Name    string   `json:"name"`
	Extra   string   `json:"extra"`
	SpecEnv string   `json:"spec_env"`
	Env     []string `json:"env"` // the whole environment
}

// startServer serves s on a unix socket or on loopback TCP and returns the
// address workers dial. The server is closed when t ends.
func startServer(t testing.TB, network string, opts providers.ServerOptions) (*providers.Server, string) {
	t.Helper()
	var l net.Listener
	var addr string
	switch network {
	case "unix":
		dir, err := os.MkdirTemp("", "cvp")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		path := filepath.Join(dir, "run", "w.sock")
		if l, err = providers.ListenUnix(path); err != nil {
			t.Fatal(err)
		}
		addr = "unix://" + path
	case "tcp":
		var err error
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		addr = l.Addr().String()
	default:
		t.Fatalf("network %q", network)
	}
	if opts.Token == "" {
		opts.Token = testToken
	}
	s := providers.NewServer(opts)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return s, addr
}

// startWorker connects an sdk worker and waits until s lists it. The
// returned stop disconnects it (also called when t ends).
func startWorker(t testing.TB, s *providers.Server, addr, name string, concurrency int, ps ...sdk.Provider) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sdk.Connect(ctx, sdk.Options{Addr: addr, Token: testToken, Name: name, Concurrency: concurrency,
			Logger: slog.New(slog.DiscardHandler)}, ps...)
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker %s: %v", name, err)
		}
	}
	t.Cleanup(stop)
	waitFor(t, 10*time.Second, "worker "+name+" registered", func() bool { return hasWorker(s, name) })
	return stop
}

func hasWorker(s *providers.Server, name string) bool {
	for _, w := range s.Workers() {
		if w.Name == name {
			return true
		}
	}
	return false
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// result waits up to d for the next result.
func result(t testing.TB, s *providers.Server, d time.Duration) *converge.Result {
	t.Helper()
	select {
	case r := <-s.Results():
		return r
	case <-time.After(d):
		t.Fatalf("no result within %v", d)
		return nil
	}
}

// noResult fails t if a result arrives within d.
func noResult(t testing.TB, s *providers.Server, d time.Duration) {
	t.Helper()
	select {
	case r := <-s.Results():
		t.Fatalf("unexpected result %+v", r)
	case <-time.After(d):
	}
}

// drain empties the Changed channel.
func drain(s *providers.Server) {
	select {
	case <-s.Changed():
	default:
	}
}

var taskSeq int

func task(kind string, version int, reaction string) *converge.Task {
	taskSeq++
	n := fmt.Sprint(taskSeq)
	return &converge.Task{
		ID: "t" + n, Key: "u" + n + "/1/" + reaction, Reaction: reaction, UID: "u" + n,
		Kind: kind, KindVersion: version, Name: "n" + n, Generation: 1,
		Spec: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Minute),
	}
}

// rawStream opens a Control.Connect stream by hand (token "" sends none).
func rawStream(t testing.TB, addr, token string) convergev1.Control_ConnectClient {
	t.Helper()
	target := addr
	if addr[:5] != "unix:" {
		target = "passthrough:///" + addr
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); conn.Close() })
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	stream, err := convergev1.NewControlClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

func register(name string, concurrency int32, caps ...*convergev1.Capability) *convergev1.WorkerMessage {
	return &convergev1.WorkerMessage{Msg: &convergev1.WorkerMessage_Register{Register: &convergev1.Register{
		Name: name, Concurrency: concurrency, Capabilities: caps,
	}}}
}

func noop(kind string, version int) sdk.Provider {
	return sdk.Provider{Kind: kind, Version: version,
		Reconcile: func(ctx context.Context, r *sdk.Request) (any, error) { return nil, nil }}
}
