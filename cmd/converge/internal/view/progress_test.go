package view

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// A progress line shows a rate and an ETA while the counts move, and
// says "stalled" once they have stood still for a while, instead of a
// rate and an ETA that promise progress nobody makes.
func TestProgressSaysStalled(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p := &Progress{w: io.Discard, last: t0, moved: t0}
	at := func(ready int, rate float64, d time.Duration) string {
		return p.line(scheduler.Progress{Counts: converge.Counts{Total: 10, Ready: ready, Pending: 10 - ready}, Rate: rate}, t0.Add(d))
	}
	if got := at(2, 4, time.Second); !strings.Contains(got, "4/s | ETA 2s") {
		t.Errorf("moving: %q, want a rate and an ETA", got)
	}
	if got := at(2, 3, 4*time.Second); !strings.Contains(got, "3/s") {
		t.Errorf("still for 3s: %q, want the rate still", got)
	}
	if got := at(2, 2, 7*time.Second); !strings.Contains(got, "stalled for 6s") || strings.Contains(got, "ETA") {
		t.Errorf("still for 6s: %q, want \"stalled for 6s\" and no ETA", got)
	}
	if got := at(3, 1, 8*time.Second); strings.Contains(got, "stalled") {
		t.Errorf("moved again: %q, want no \"stalled\"", got)
	}
	// A task still out (a long composition) is waited on, not stalled.
	long := p.line(scheduler.Progress{Counts: converge.Counts{Total: 10, Ready: 3, Pending: 7}, Inflight: 1}, t0.Add(15*time.Second))
	if !strings.Contains(long, "waiting on 1 running task for 7s") {
		t.Errorf("a task out for 7s: %q, want \"waiting on 1 running task for 7s\"", long)
	}
}

// A stuck verdict is one line per cause: a count, the reason's pattern
// and three examples; a cause of one resource names it. Reasons that
// differ only in a backoff's length are one cause (scheduler's
// reasonPattern); so are those naming different resources.
func TestPrintProblemGroups(t *testing.T) {
	ids := func(prefix string, n int) []converge.ID {
		var out []converge.ID
		for i := range n {
			out = append(out, converge.ID(fmt.Sprintf("%s-%d", prefix, i)))
		}
		return out
	}
	groups := []scheduler.ProblemGroup{
		{Phase: converge.PhaseFailed, Reason: "permanent: quota", Pattern: "permanent: quota", Count: 1, IDs: ids("vpc/a", 1)},
		{Phase: converge.PhasePending, Reason: "waiting for vpc/a-0", Pattern: "waiting for vpc/…", Count: 500, IDs: ids("route/a", 20)},
		{Phase: converge.PhaseFailed, Reason: "retrying in 6.7s: injected fault", Pattern: "retrying in …: injected fault", Count: 2, IDs: ids("x/a", 2)},
	}
	var b strings.Builder
	WriteProblemGroups(&b, groups, 3)
	want := `  vpc/a-0 Failed: permanent: quota
  500 Pending: waiting for vpc/… (e.g. route/a-0, route/a-1, route/a-2, +497 more)
  2 Failed: retrying in …: injected fault (e.g. x/a-0, x/a-1)
`
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestProgressNotDurable: while commits of state fail, the progress line
// counts nothing as Ready (the engine's counts are not durable) and says
// why.
func TestProgressNotDurable(t *testing.T) {
	p := NewProgress(io.Discard)
	s := scheduler.Progress{Counts: converge.Counts{Total: 3652, Ready: 3652}, CommitError: "write state.db: no space left on device"}
	got := p.line(s, time.Now())
	if strings.Contains(got, "Ready") {
		t.Errorf("line = %q: counts Ready while state is not durable", got)
	}
	if want := "3652 resources | state not durable, commit failing: write state.db: no space left on device"; got != want {
		t.Errorf("line = %q, want %q", got, want)
	}
}
