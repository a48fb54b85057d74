package providers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/sdk"
)

// TransportRates are round trips per second over loopback TCP, measured
// back to back by MeasureTransport.
type TransportRates struct {
	// InFlight is how many round trips were kept in flight.
	InFlight int
	// RawUnary: plain unary grpc-go calls to a no-op handler (the health
	// service's Check), the baseline.
	RawUnary float64
	// Dispatch: Server.Dispatch → an in-process sdk worker's no-op
	// reconcile → Server.Results, the path the scheduler uses.
	Dispatch float64
}

// Ratio returns Dispatch / RawUnary.
func (r TransportRates) Ratio() float64 {
	if r.RawUnary == 0 {
		return 0
	}
	return r.Dispatch / r.RawUnary
}

// MeasureTransport measures the raw gRPC and the worker-protocol round-trip
// rates for d each, with inflight round trips in flight, so a benchmark can
// report its own rate against the transport's in the same run.
func MeasureTransport(ctx context.Context, inflight int, d time.Duration) (TransportRates, error) {
	if inflight <= 0 {
		inflight = 1
	}
	out := TransportRates{InFlight: inflight}
	var err error
	if out.RawUnary, err = measureRaw(ctx, inflight, d); err != nil {
		return out, fmt.Errorf("measure raw grpc: %w", err)
	}
	if out.Dispatch, err = measureDispatch(ctx, inflight, d); err != nil {
		return out, fmt.Errorf("measure dispatch: %w", err)
	}
	return out, nil
}

func measureRaw(ctx context.Context, inflight int, d time.Duration) (float64, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(l)
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///"+l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	req := &healthpb.HealthCheckRequest{}
	if _, err := client.Check(ctx, req); err != nil {
		return 0, err
	}
	var n atomic.Int64
	var g errgroup.Group
	start := time.Now()
	end := start.Add(d)
	for range inflight {
		g.Go(func() error {
			for time.Now().Before(end) {
				if _, err := client.Check(ctx, req); err != nil {
					return err
				}
				n.Add(1)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}

func measureDispatch(ctx context.Context, inflight int, d time.Duration) (float64, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	s := NewServer(ServerOptions{Token: token})
	go s.Serve(l)
	defer s.Close()

	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- sdk.Connect(wctx, sdk.Options{Addr: l.Addr().String(), Token: token, Name: "measure",
			Concurrency: max(2*inflight, 64), Logger: slog.New(slog.DiscardHandler)},
			sdk.Provider{Kind: "measure", Version: 1,
				Reconcile: func(context.Context, *sdk.Request) (any, error) { return nil, nil }})
	}()
	defer func() { cancel(); <-done }()
	ref := converge.KindRef{Kind: "measure", Version: 1}
	for !s.Serves(ref, converge.ReactionReconcile) {
		select {
		case err := <-done:
			return 0, fmt.Errorf("worker: %w", err)
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}

	tasks := make(map[string]*converge.Task, inflight)
	deadline := time.Now().Add(time.Hour)
	dispatch := func(t *converge.Task) error {
		for {
			err := s.Dispatch(ctx, t)
			if !errors.Is(err, converge.ErrNoWorker) {
				return err
			}
			select {
			case <-s.Changed():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	start := time.Now()
	for i := range inflight {
		id := "m" + strconv.Itoa(i)
		t := &converge.Task{ID: id, Key: id, Reaction: converge.ReactionReconcile, UID: id, Kind: "measure",
			KindVersion: 1, Name: id, Generation: 1, Spec: json.RawMessage(`{}`), Deadline: deadline}
		tasks[id] = t
		if err := dispatch(t); err != nil {
			return 0, err
		}
	}
	n, end := 0, start.Add(d)
	for outstanding := inflight; outstanding > 0; outstanding-- {
		var r *converge.Result
		select {
		case r = <-s.Results():
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if r.Outcome != converge.OutcomeOK {
			return 0, fmt.Errorf("task %s: %s %s", r.TaskID, r.Outcome, r.Message)
		}
		n++
		if time.Now().Before(end) {
			if err := dispatch(tasks[r.TaskID]); err != nil {
				return 0, err
			}
			outstanding++
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
