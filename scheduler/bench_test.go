package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// nopStore keeps nothing; it counts what it is asked to write.
type nopStore struct {
	// mu guards the counters.
	mu            sync.Mutex
	commits, puts int
}

func (s *nopStore) Load(ctx context.Context) (*converge.Snapshot, error) {
	return &converge.Snapshot{}, nil
}
func (s *nopStore) Commit(ctx context.Context, b *converge.Batch) error {
	s.mu.Lock()
	s.commits++
	s.puts += len(b.Resources)
	s.mu.Unlock()
	return nil
}

// BenchmarkClassicBOM drives a classic-shaped graph (58 functional
// domains × 30 teams: 5,337 resources) from empty to root Ready with an
// instant fake dispatcher and a no-op store: it measures the scheduler's
// own overhead.
func BenchmarkClassicBOM(b *testing.B) {
	const fds, teams = 58, 30
	n := bomSize(fds, teams) + 1
	desired := classicDesired(makeBOM(fds, teams), "bench")
	var puts, commits int
	h := benchHandler()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		store := &nopStore{}
		disp := newFakeDisp(h, &fakeWorker{name: "w"})
		disp.instant = true
		disp.results = make(chan *converge.Result, 1<<14)
		s, err := scheduler.New(context.Background(), store, disp, scheduler.Config{})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		if _, err := s.Apply(ctx, desired, nil); err != nil {
			b.Fatal(err)
		}
		for s.Progress().Settled != scheduler.Converged {
			time.Sleep(20 * time.Microsecond)
		}
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		if got := s.Progress().Counts.Ready; got != n {
			b.Fatalf("ready %d, want %d", got, n)
		}
		puts += store.puts
		commits += store.commits
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	el := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(n)/el, "resources/s")
	b.ReportMetric(float64(puts)/float64(b.N*n), "puts/resource")
	b.ReportMetric(float64(commits)/float64(b.N), "commits/op")
}

// benchHandler is classicHandler with the worker's own costs taken out:
// each composition is computed once, and leaf statuses are built without
// decoding the spec.
func benchHandler() handler {
	var mu sync.Mutex
	composed := map[string]*converge.Result{}
	return func(t *converge.Task) *converge.Result {
		switch t.Reaction {
		case converge.ReactionCompose:
			mu.Lock()
			c := composed[string(t.Spec)]
			if c == nil {
				c = classicHandler(t)
				composed[string(t.Spec)] = c
			}
			mu.Unlock()
			r := *c
			return &r
		case converge.ReactionReconcile:
			var st string
			switch t.Kind {
			case "account":
				st = `{"account_id":"acct-` + t.Name + `"}`
			case "vpc":
				st = `{"vpc_id":"vpc-` + t.Name + `"}`
			case "tgw":
				st = `{"tgw_id":"tgw-` + t.Name + `"}`
			default:
				st = `{"route_id":"rt-` + t.Name + `"}`
			}
			return &converge.Result{Outcome: converge.OutcomeOK, Status: []byte(st)}
		}
		return &converge.Result{Outcome: converge.OutcomeOK}
	}
}

// benchEngine is one scheduler over a nop store and an instant
// dispatcher, converged on the classic BOM.
type benchEngine struct {
	s      *scheduler.Scheduler
	disp   *fakeDisp
	cancel context.CancelFunc
	done   chan error
}

func newBenchEngine(b *testing.B, h handler, d *converge.Desired) *benchEngine {
	disp := newFakeDisp(h, &fakeWorker{name: "w"})
	disp.instant = true
	disp.results = make(chan *converge.Result, 1<<14)
	s, err := scheduler.New(context.Background(), &nopStore{}, disp, scheduler.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &benchEngine{s: s, disp: disp, cancel: cancel, done: make(chan error, 1)}
	go func() { e.done <- s.Run(ctx) }()
	e.apply(b, d)
	return e
}

func (e *benchEngine) apply(b *testing.B, d *converge.Desired) {
	if _, err := e.s.Apply(context.Background(), d, nil); err != nil {
		b.Fatal(err)
	}
	e.wait()
}

func (e *benchEngine) wait() {
	for e.s.Progress().Settled != scheduler.Converged {
		time.Sleep(20 * time.Microsecond)
	}
}

func (e *benchEngine) dispatched() uint64 { return e.s.Progress().Dispatched }

func (e *benchEngine) stop(b *testing.B) {
	e.cancel()
	if err := <-e.done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkClassicRecompose applies the updated BOM (one team removed,
// one added) to a converged classic graph: dispatches and time until the
// root is Ready again.
func BenchmarkClassicRecompose(b *testing.B) {
	const fds, teams = 58, 30
	h := benchHandler()
	bom := makeBOM(fds, teams)
	first := classicDesired(bom, "c1")
	bom.FDs[3].Teams = append(bom.FDs[3].Teams[1:], bomTeam{Name: "team-new"})
	updated := classicDesired(bom, "c2")
	var disp uint64
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := newBenchEngine(b, h, first)
		before := e.dispatched()
		b.StartTimer()
		e.apply(b, updated)
		b.StopTimer()
		disp += e.dispatched() - before
		e.stop(b)
		b.StartTimer()
	}
	b.ReportMetric(float64(disp)/float64(b.N), "dispatches/op")
}

// BenchmarkClassicTeardown deletes the root of a converged classic graph:
// time until every resource is gone.
func BenchmarkClassicTeardown(b *testing.B) {
	const fds, teams = 58, 30
	h := benchHandler()
	d := classicDesired(makeBOM(fds, teams), "c1")
	var disp uint64
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := newBenchEngine(b, h, d)
		before := e.dispatched()
		b.StartTimer()
		if err := e.s.Delete(context.Background(), "classicbom/org"); err != nil {
			b.Fatal(err)
		}
		e.wait()
		b.StopTimer()
		if n := e.s.Progress().Counts.Total; n != 0 {
			b.Fatalf("%d resources left", n)
		}
		disp += e.dispatched() - before
		e.stop(b)
		b.StartTimer()
	}
	b.ReportMetric(float64(disp)/float64(b.N), "dispatches/op")
}
