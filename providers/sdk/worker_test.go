package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/convergehq/converge"
	convergev1 "github.com/convergehq/converge/proto/converge/v1"
	"github.com/convergehq/converge/providers/sdk"
)

// greedyControl is a control plane that ignores the worker's concurrency:
// it sends every task at once, so only the SDK's own bound limits handlers.
type greedyControl struct {
	convergev1.UnimplementedControlServer
	tasks   int
	results chan *convergev1.Result
}

func (g *greedyControl) Connect(stream convergev1.Control_ConnectServer) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	if err := stream.Send(&convergev1.ControlMessage{Msg: &convergev1.ControlMessage_Registered{
		Registered: &convergev1.Registered{WorkerId: "w1", HeartbeatIntervalMs: 1000}}}); err != nil {
		return err
	}
	batch := &convergev1.TaskBatch{}
	for i := range g.tasks {
		batch.Tasks = append(batch.Tasks, &convergev1.Task{Id: fmt.Sprint(i), Reaction: "reconcile", Kind: "vpc", KindVersion: 1})
	}
	if err := stream.Send(&convergev1.ControlMessage{Msg: &convergev1.ControlMessage_Tasks{Tasks: batch}}); err != nil {
		return err
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		for _, r := range m.GetResults().GetResults() {
			g.results <- r
		}
	}
}

func TestConcurrencyBoundEvenIfControlPlaneOversends(t *testing.T) {
	const tasks, limit = 40, 3
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &greedyControl{tasks: tasks, results: make(chan *convergev1.Result, tasks)}
	srv := grpc.NewServer()
	convergev1.RegisterControlServer(srv, g)
	go srv.Serve(l)
	defer srv.Stop()

	var running, peak atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sdk.Connect(ctx, sdk.Options{Addr: l.Addr().String(), Token: "t", Name: "w", Concurrency: limit,
			Logger: slog.New(slog.DiscardHandler)},
			sdk.Provider{Kind: "vpc", Version: 1, Reconcile: func(ctx context.Context, r *sdk.Request) (any, error) {
				n := running.Add(1)
				for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
				}
				time.Sleep(10 * time.Millisecond)
				running.Add(-1)
				return nil, nil
			}})
	}()
	for range tasks {
		select {
		case <-g.results:
		case <-time.After(10 * time.Second):
			t.Fatal("not every task answered")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("connect: %v", err)
	}
	if got := peak.Load(); got > limit || got < 2 {
		t.Errorf("peak concurrent handlers = %d, want 2..%d", got, limit)
	}
}

func TestConnectRejectsBadOptions(t *testing.T) {
	ok := sdk.Provider{Kind: "vpc", Version: 1, Teardown: func(context.Context, *sdk.Request) error { return nil }}
	tests := []struct {
		name      string
		opts      sdk.Options
		providers []sdk.Provider
		wantErr   string
	}{
		{name: "no address", opts: sdk.Options{Token: "t"}, providers: []sdk.Provider{ok}, wantErr: "CONVERGE_ADDR"},
		{name: "no token", opts: sdk.Options{Addr: "127.0.0.1:1"}, providers: []sdk.Provider{ok}, wantErr: "CONVERGE_TOKEN"},
		{name: "no providers", opts: sdk.Options{Addr: "127.0.0.1:1", Token: "t"}, wantErr: "no providers"},
		{name: "duplicate", opts: sdk.Options{Addr: "127.0.0.1:1", Token: "t"}, providers: []sdk.Provider{ok, ok}, wantErr: "vpc/v1: declared twice"},
		{name: "no handlers", opts: sdk.Options{Addr: "127.0.0.1:1", Token: "t"}, providers: []sdk.Provider{{Kind: "vpc", Version: 1}}, wantErr: "no handlers"},
		{name: "version zero", opts: sdk.Options{Addr: "127.0.0.1:1", Token: "t"}, providers: []sdk.Provider{{Kind: "vpc", Teardown: ok.Teardown}}, wantErr: "version > 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := sdk.Connect(ctx, tt.opts, tt.providers...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
			}
		})
	}
}

func TestServeReadsEnvironment(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    sdk.Options
		wantErr bool
	}{
		{name: "all set", env: map[string]string{"CONVERGE_ADDR": "unix:///s.sock", "CONVERGE_TOKEN": "tok",
			"CONVERGE_WORKER_NAME": "classic-0", "CONVERGE_CONCURRENCY": "8"},
			want: sdk.Options{Addr: "unix:///s.sock", Token: "tok", Name: "classic-0", Concurrency: 8}},
		{name: "defaults", env: map[string]string{"CONVERGE_ADDR": "127.0.0.1:9", "CONVERGE_TOKEN": "tok"},
			want: sdk.Options{Addr: "127.0.0.1:9", Token: "tok"}},
		{name: "bad concurrency", env: map[string]string{"CONVERGE_CONCURRENCY": "-1"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"CONVERGE_ADDR", "CONVERGE_TOKEN", "CONVERGE_WORKER_NAME", "CONVERGE_CONCURRENCY"} {
				t.Setenv(k, tt.env[k])
			}
			got, err := sdk.OptionsFromEnv()
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Errorf("options = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestServeReturnsNilWhenDone(t *testing.T) {
	// Nothing listens at the address: Serve keeps retrying until ctx ends.
	t.Setenv("CONVERGE_ADDR", "127.0.0.1:1")
	t.Setenv("CONVERGE_TOKEN", "t")
	t.Setenv("CONVERGE_CONCURRENCY", "")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	slog.SetDefault(slog.New(slog.DiscardHandler))
	if err := sdk.Serve(ctx, sdk.Provider{Kind: "vpc", Version: 1, Teardown: func(context.Context, *sdk.Request) error { return nil }}); err != nil {
		t.Fatalf("serve = %v, want nil once ctx is done", err)
	}
}

func TestOutcomeOf(t *testing.T) {
	base := errors.New("x")
	tests := []struct {
		name string
		err  error
		want converge.Outcome
	}{
		{name: "nil", err: nil, want: converge.OutcomeOK},
		{name: "plain", err: base, want: converge.OutcomeTransient},
		{name: "transient", err: sdk.Transient(base), want: converge.OutcomeTransient},
		{name: "permanent", err: sdk.Permanent(base), want: converge.OutcomePermanent},
		{name: "wrapped permanent", err: fmt.Errorf("a: %w", sdk.Permanent(base)), want: converge.OutcomePermanent},
		{name: "outermost wins", err: sdk.Transient(sdk.Permanent(base)), want: converge.OutcomeTransient},
		{name: "transient nil", err: sdk.Transient(nil), want: converge.OutcomeOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := sdk.OutcomeOf(tt.err), tt.want; got != want {
				t.Errorf("OutcomeOf = %s, want %s", got, want)
			}
		})
	}
	if !errors.Is(sdk.Permanent(base), base) {
		t.Error("Permanent does not unwrap to its error")
	}
}

// silentControl registers workers and then says nothing, counting
// connections.
type silentControl struct {
	convergev1.UnimplementedControlServer
	connects atomic.Int64
}

func (s *silentControl) Connect(stream convergev1.Control_ConnectServer) error {
	s.connects.Add(1)
	if _, err := stream.Recv(); err != nil {
		return err
	}
	if err := stream.Send(&convergev1.ControlMessage{Msg: &convergev1.ControlMessage_Registered{
		Registered: &convergev1.Registered{WorkerId: "w", HeartbeatIntervalMs: 50}}}); err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil { // heartbeats; never answered
			return err
		}
	}
}

func TestWorkerLeavesSilentControlPlane(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sc := &silentControl{}
	srv := grpc.NewServer()
	convergev1.RegisterControlServer(srv, sc)
	go srv.Serve(l)
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	err = sdk.Connect(ctx, sdk.Options{Addr: l.Addr().String(), Token: "t", Logger: slog.New(slog.DiscardHandler)},
		sdk.Provider{Kind: "vpc", Version: 1, Teardown: func(context.Context, *sdk.Request) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	// 3 × 50ms of silence ends a session; in 1.5s that happens several times.
	if got := sc.connects.Load(); got < 3 {
		t.Errorf("connected %d times in 1.5s, want the worker to give up on a silent control plane and reconnect", got)
	}
}
