package providers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/providers/classic"
)

// BenchmarkRoundTrip measures the transport over loopback TCP:
//
//   - raw: a plain unary grpc-go call to a no-op handler (the health
//     service's Check), the baseline;
//   - dispatch: a task through Server.Dispatch, the stream, an sdk worker
//     running a no-op reconcile, and back out of Server.Results;
//   - dispatch-unix: the same over a unix socket, as local workers connect;
//
// each with 1 and with 256 round trips in flight. Each reports rt/s, and
// the parent logs dispatch/raw ratios for the same in-flight counts.
func BenchmarkRoundTrip(b *testing.B) {
	rates := map[string]float64{}
	for _, inflight := range []int{1, 256} {
		name := "inflight=" + strconv.Itoa(inflight)
		b.Run("raw/"+name, func(b *testing.B) {
			rates["raw/"+name] = benchRaw(b, inflight)
		})
		b.Run("dispatch/"+name, func(b *testing.B) {
			rates["dispatch/"+name] = benchDispatch(b, "tcp", inflight)
		})
		b.Run("dispatch-unix/"+name, func(b *testing.B) {
			benchDispatch(b, "unix", inflight)
		})
	}
	for _, inflight := range []int{1, 256} {
		name := "inflight=" + strconv.Itoa(inflight)
		raw, disp := rates["raw/"+name], rates["dispatch/"+name]
		if raw > 0 && disp > 0 {
			b.Logf("%s: raw %.0f rt/s, dispatch %.0f rt/s, ratio dispatch/raw %.2f", name, raw, disp, disp/raw)
		}
	}
}

func report(b *testing.B, start time.Time) float64 {
	rate := float64(b.N) / time.Since(start).Seconds()
	b.ReportMetric(rate, "rt/s")
	return rate
}

func benchRaw(b *testing.B, inflight int) float64 {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(l)
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///"+l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	req := &healthpb.HealthCheckRequest{}
	if _, err := client.Check(ctx, req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per, extra := b.N/inflight, b.N%inflight
	for i := range inflight {
		n := per
		if i < extra {
			n++
		}
		wg.Go(func() {
			for range n {
				if _, err := client.Check(ctx, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return report(b, start)
}

func benchDispatch(b *testing.B, network string, inflight int) float64 {
	s, addr := startServer(b, network, providers.ServerOptions{})
	startWorker(b, s, addr, "bench", 512, noop("vpc", 1))
	ctx := context.Background()
	// One task per in-flight slot, re-dispatched under the same id once
	// its result is back.
	slots := make([]*converge.Task, inflight)
	byID := make(map[string]*converge.Task, inflight)
	for i := range slots {
		t := task("vpc", 1, "reconcile")
		t.Deadline = time.Now().Add(time.Hour)
		slots[i] = t
		byID[t.ID] = t
	}
	dispatch := func(t *converge.Task) {
		for {
			err := s.Dispatch(ctx, t)
			if err == nil {
				return
			}
			if !errors.Is(err, converge.ErrNoWorker) {
				b.Fatal(err)
			}
			<-s.Changed()
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	sent := 0
	for _, t := range slots[:min(inflight, b.N)] {
		dispatch(t)
		sent++
	}
	for done := 0; done < b.N; done++ {
		r := <-s.Results()
		if r.Outcome != converge.OutcomeOK {
			b.Fatalf("result %+v", r)
		}
		if sent < b.N {
			dispatch(byID[r.TaskID])
			sent++
		}
	}
	return report(b, start)
}

// BenchmarkComposeStream measures a streamed compose end to end over a
// unix socket: the classic example's BOM (58 domains, 1,176 teams,
// 3,644 children and their edges) composed by the classic provider in an
// sdk worker, sent in parts, and assembled by Server.Results.
func BenchmarkComposeStream(b *testing.B) {
	var spec classic.BOMSpec
	for i := range 58 {
		fd := classic.FunctionalDomain{Name: fmt.Sprintf("fd-%02d", i), Networking: true}
		for j := range 1176/58 + min(1, max(0, 1176%58-i)) {
			fd.ServiceTeams = append(fd.ServiceTeams, classic.ServiceTeam{Name: fmt.Sprintf("team-%03d", j)})
		}
		spec.FunctionalDomains = append(spec.FunctionalDomains, fd)
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	s, addr := startServer(b, "unix", providers.ServerOptions{})
	startWorker(b, s, addr, "bench", 256, classic.Providers(classic.Options{})...)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		t := task("classicbom", 1, converge.ReactionCompose)
		t.Spec = raw
		if err := s.Dispatch(ctx, t); err != nil {
			b.Fatal(err)
		}
		r := <-s.Results()
		if r.Outcome != converge.OutcomeOK || len(r.Children) != 3644 {
			b.Fatalf("result: %s %s, %d children", r.Outcome, r.Message, len(r.Children))
		}
	}
}
