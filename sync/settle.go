package sync

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// Outcome is where the wait for an applied revision stands.
type Outcome int

const (
	// Waiting: the engine is working, or a declared worker may still
	// connect and bring what is missing.
	Waiting Outcome = iota
	// Converged: every resource is Ready.
	Converged
	// Stuck: nothing has progressed for the grace period, and no declared
	// worker is still on its way.
	Stuck
)

func (o Outcome) String() string {
	switch o {
	case Waiting:
		return "waiting"
	case Converged:
		return "converged"
	case Stuck:
		return "stuck"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Settle decides when the wait for an applied revision is over: the one
// rule `converge sync` and `converge serve` share. The engine must be
// stuck (scheduler.Stuck) for Grace without a break, and every declared
// worker process must have connected or failed: a worker that is still
// starting may serve the kinds that are parked now. A worker that failed
// to start or exited does not hold the verdict back, so a missing worker
// binary fails the run within seconds instead of at the timeout.
//
// A Settle is used by one goroutine; the zero value has no grace.
type Settle struct {
	Grace time.Duration
	since time.Time // when the current stuck stretch began; zero if none
}

// Observe takes one look at the engine at now: p is its progress,
// workersDue the number of declared worker processes that have neither
// connected nor failed.
func (s *Settle) Observe(now time.Time, p scheduler.Progress, workersDue int) Outcome {
	switch {
	case p.Settled == scheduler.Converged:
		s.since = time.Time{}
		return Converged
	case p.Settled == scheduler.Stuck && workersDue <= 0:
		if s.since.IsZero() {
			s.since = now
		}
		if now.Sub(s.since) >= s.Grace {
			return Stuck
		}
	default:
		s.since = time.Time{}
	}
	return Waiting
}

// Reset forgets a stuck stretch: a new revision was applied.
func (s *Settle) Reset() { s.since = time.Time{} }

// Summary is the progress as a verdict states it: "R/T Ready".
func Summary(p scheduler.Progress) string {
	return fmt.Sprintf("%d/%d Ready", p.Counts.Ready, p.Counts.Total)
}

// UnservedHint explains problems that wait for a worker no one runs:
// which kind versions, and why no worker serves them — the declared
// workers that failed (failed, each "worker NAME failed to start: …") or,
// when none did, howToStart (what the command offers, e.g. "declare a
// worker in converge.cue or start one with --workers-listen"). It returns
// "" when no problem waits for a worker.
func UnservedHint(problems []scheduler.Problem, failed []string, howToStart string) string {
	var refs []string
	for _, p := range problems {
		if p.Unserved == (converge.KindRef{}) {
			continue
		}
		if r := p.Unserved.String(); !slices.Contains(refs, r) {
			refs = append(refs, r)
		}
	}
	if len(refs) == 0 {
		return ""
	}
	slices.Sort(refs)
	why := howToStart
	if len(failed) > 0 {
		why = strings.Join(failed, "; ")
	}
	return "no worker serves " + strings.Join(refs, ", ") + ": " + why
}
