package sync

import (
	"fmt"
	"slices"
	"strings"
	gosync "sync"
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
	// Undurable: every commit of state has failed for CommitGrace (a
	// full disk, a replaced state file, a lost etcd lock): what the
	// engine does is not kept, so waiting longer shows nothing. A
	// command stops with the commit's error (exit 2); a daemon goes on
	// retrying and reports itself unhealthy.
	Undurable
	// Suspended: nothing has progressed for the grace period but what a
	// suspension holds back (converge suspend). Only a Settle with
	// StopWhenHeld says it (a command: it tells its user to resume); a
	// daemon waits for the resume.
	Suspended
)

func (o Outcome) String() string {
	switch o {
	case Waiting:
		return "waiting"
	case Converged:
		return "converged"
	case Stuck:
		return "stuck"
	case Undurable:
		return "undurable"
	case Suspended:
		return "suspended"
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
	// CommitGrace is how long commits of state may fail without a
	// success before Observe says Undurable.
	CommitGrace time.Duration
	// StopWhenHeld: a graph that waits for nothing but a resume ends the
	// wait (Suspended) after Grace, instead of waiting on.
	StopWhenHeld bool
	since        time.Time // when the current stuck stretch began; zero if none
	failing      time.Time // when the current stretch of failing commits began; zero if none
}

// Observe takes one look at the engine at now: p is its progress,
// workersDue the number of declared worker processes that have neither
// connected nor failed.
func (s *Settle) Observe(now time.Time, p scheduler.Progress, workersDue int) Outcome {
	if p.CommitError == "" {
		s.failing = time.Time{}
	} else {
		if s.failing.IsZero() {
			s.failing = now
		}
		if now.Sub(s.failing) >= s.CommitGrace {
			return Undurable
		}
	}
	switch {
	case p.Settled == scheduler.Converged:
		s.since = time.Time{}
		return Converged
	case p.Settled == scheduler.Stuck && workersDue <= 0 && (p.Held == 0 || s.StopWhenHeld):
		// Held resources wait for a resume (converge resume), not for
		// a fix: a suspension is never stuck, though a command stops.
		if s.since.IsZero() {
			s.since = now
		}
		if now.Sub(s.since) >= s.Grace {
			if p.Held > 0 {
				return Suspended
			}
			return Stuck
		}
	default:
		s.since = time.Time{}
	}
	return Waiting
}

// Reset forgets a stuck stretch: a new revision was applied.
func (s *Settle) Reset() { s.since = time.Time{} }

// NotDurable reports whether p's counts are not durable: the newest
// commit of state failed, so what the engine holds in memory may be
// lost. Progress lines and verdicts then count nothing as Ready.
func NotDurable(p scheduler.Progress) bool { return p.CommitError != "" }

// Summary is the progress as a verdict states it: "R/T Ready".
func Summary(p scheduler.Progress) string {
	if NotDurable(p) {
		return fmt.Sprintf("%d/%d Ready in memory, not durable", p.Counts.Ready, p.Counts.Total)
	}
	return fmt.Sprintf("%d/%d Ready", p.Counts.Ready, p.Counts.Total)
}

// CommitProblem names p's failing commit of state as a verdict states it,
// "commit state: …", or returns "" when the newest commit succeeded. While
// commits fail, what the engine did is not durable and the graph is never
// Converged, even with every resource Ready: the verdict must say why.
func CommitProblem(p scheduler.Progress) string {
	if p.CommitError == "" {
		return ""
	}
	if strings.HasPrefix(p.CommitError, "commit state: ") {
		return p.CommitError
	}
	return "commit state: " + p.CommitError
}

// Verdict is the description of a wait that did not converge, as sync,
// serve and the git note state it: why it ended ("stuck", "timed out")
// with the Summary, then the failing commit of state (CommitProblem), then
// hint (e.g. UnservedHint) unless it is "".
func Verdict(why string, p scheduler.Progress, hint string) string {
	s := why + ": " + Summary(p)
	if c := CommitProblem(p); c != "" {
		s += "; " + c
	}
	if hint != "" {
		s += "; " + hint
	}
	return s
}

// Health answers a daemon's health check. The daemon's loop reports each
// look at the engine (Observe) and each stuck verdict (Stuck); Check, safe
// from any goroutine, says why the daemon is unhealthy. The zero value is
// healthy and never reports a stalled loop.
type Health struct {
	// Stall is how long the loop may go without a look at the engine
	// before Check reports it (a fetch that hangs); 0 for never.
	Stall time.Duration

	mu       gosync.Mutex // guards the fields below
	seen     time.Time    // the newest look; zero before the first
	progress scheduler.Progress
	stuck    string // the applied revision's stuck verdict; "" if none
}

// Observe records a look at the engine at now. A graph that converged
// clears a stuck verdict: whatever held it came right.
func (h *Health) Observe(now time.Time, p scheduler.Progress) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen, h.progress = now, p
	if p.Settled == scheduler.Converged {
		h.stuck = ""
	}
}

// Stuck records the applied revision's stuck verdict (e.g. "main@sha1:…
// stuck: …"); "" clears it, as a newly applied revision does.
func (h *Health) Stuck(verdict string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stuck = verdict
}

// Check returns why the daemon is unhealthy at now, or "" if it is
// healthy: commits of state failing (CommitProblem), no look at the
// engine for longer than Stall, or the applied revision stuck.
func (h *Health) Check(now time.Time) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var why []string
	if c := CommitProblem(h.progress); c != "" {
		why = append(why, c)
	}
	if h.Stall > 0 && !h.seen.IsZero() && now.Sub(h.seen) > h.Stall {
		why = append(why, fmt.Sprintf("sync loop: no look at the engine for %s", now.Sub(h.seen).Round(time.Second)))
	}
	if h.stuck != "" {
		why = append(why, h.stuck)
	}
	return strings.Join(why, "; ")
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

// FinalVerdict returns rec's converge/sync status once a daemon has
// judged it (any state but pending), or false while it is still
// pending or absent: what `converge reconcile` and a sync handed to a
// daemon wait for. A nil rec (the daemon has not seen the commit yet)
// is not final. A final verdict never changes: an apply that failed is
// pending (Syncer.Apply), since the next pass applies it again.
func FinalVerdict(rec *converge.RevisionRecord) (converge.CommitStatus, bool) {
	if rec == nil {
		return converge.CommitStatus{}, false
	}
	s, ok := rec.Status(converge.ContextSync)
	if !ok || s.State == converge.StatePending {
		return converge.CommitStatus{}, false
	}
	return s, true
}

// UnservedVerbs returns a warning for each operator verb a kind declares
// that no connected worker serves, while some worker serves the kind
// (a kind no worker serves parks, and its hint says so already): the
// verb passes validate and sync and would fail only when used.
func UnservedVerbs(kinds []*converge.Kind, serves func(converge.KindRef, string) bool) []string {
	var out []string
	for _, k := range kinds {
		ref := k.Ref()
		if !serves(ref, converge.ReactionReconcile) && !serves(ref, converge.ReactionCompose) {
			continue
		}
		for _, r := range k.Reactions {
			if converge.IsVerb(r) && !serves(ref, r) {
				out = append(out, fmt.Sprintf("kind %s declares the verb %s, which no connected worker serves: converge do KIND/NAME %s would fail", ref, r, r))
			}
		}
	}
	return out
}
