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

func (s *nopStore) Load() (*converge.Snapshot, error) { return &converge.Snapshot{}, nil }
func (s *nopStore) Commit(b *converge.Batch) error {
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
		s, err := scheduler.New(store, disp, scheduler.Config{})
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
// the composition is computed once, and leaf statuses are built without
// decoding the spec.
func benchHandler() handler {
	var once sync.Once
	var composed *converge.Result
	return func(t *converge.Task) *converge.Result {
		switch t.Reaction {
		case converge.ReactionCompose:
			once.Do(func() { composed = classicHandler(t) })
			r := *composed
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
