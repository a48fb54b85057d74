package sync_test

import (
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
	gitsync "github.com/convergehq/converge/sync"
)

func TestSettle(t *testing.T) {
	type look struct {
		at      time.Duration // since the start
		settled scheduler.Settled
		due     int // declared workers neither connected nor failed
		want    gitsync.Outcome
	}
	tests := []struct {
		name  string
		grace time.Duration
		looks []look
	}{
		{name: "converged at once", grace: time.Second, looks: []look{
			{0, scheduler.Converged, 0, gitsync.Converged},
		}},
		{name: "converged even while a worker is due", grace: time.Second, looks: []look{
			{0, scheduler.Converged, 2, gitsync.Converged},
		}},
		{name: "stuck after the grace", grace: time.Second, looks: []look{
			{0, scheduler.Stuck, 0, gitsync.Waiting},
			{999 * time.Millisecond, scheduler.Stuck, 0, gitsync.Waiting},
			{time.Second, scheduler.Stuck, 0, gitsync.Stuck},
		}},
		{name: "work in between restarts the grace", grace: time.Second, looks: []look{
			{0, scheduler.Stuck, 0, gitsync.Waiting},
			{800 * time.Millisecond, scheduler.Working, 0, gitsync.Waiting},
			{900 * time.Millisecond, scheduler.Stuck, 0, gitsync.Waiting},
			{1800 * time.Millisecond, scheduler.Stuck, 0, gitsync.Waiting},
			{1900 * time.Millisecond, scheduler.Stuck, 0, gitsync.Stuck},
		}},
		{name: "a worker on its way holds the verdict", grace: time.Second, looks: []look{
			{0, scheduler.Stuck, 1, gitsync.Waiting},
			{5 * time.Second, scheduler.Stuck, 1, gitsync.Waiting},
			{6 * time.Second, scheduler.Stuck, 0, gitsync.Waiting}, // it failed: the grace starts now
			{7 * time.Second, scheduler.Stuck, 0, gitsync.Stuck},
		}},
		{name: "no grace", looks: []look{
			{0, scheduler.Stuck, 0, gitsync.Stuck},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &gitsync.Settle{Grace: tt.grace}
			t0 := time.Unix(1_700_000_000, 0)
			for i, l := range tt.looks {
				if got := s.Observe(t0.Add(l.at), scheduler.Progress{Settled: l.settled}, l.due); got != l.want {
					t.Fatalf("look %d (%v %s, %d due) = %s, want %s", i, l.at, l.settled, l.due, got, l.want)
				}
			}
		})
	}
}

// TestSettleUndurable: commits failing for CommitGrace without a break
// end the wait as Undurable, whatever the graph's state; one success in
// between restarts the grace.
func TestSettleUndurable(t *testing.T) {
	s := &gitsync.Settle{Grace: time.Hour, CommitGrace: 2 * time.Second}
	t0 := time.Unix(1_700_000_000, 0)
	failing := scheduler.Progress{Settled: scheduler.Stuck, CommitError: "write state.db: no space left on device"}
	looks := []struct {
		at   time.Duration
		p    scheduler.Progress
		want gitsync.Outcome
	}{
		{0, failing, gitsync.Waiting},
		{1500 * time.Millisecond, failing, gitsync.Waiting},
		{1600 * time.Millisecond, scheduler.Progress{Settled: scheduler.Working}, gitsync.Waiting}, // a commit went through
		{3 * time.Second, failing, gitsync.Waiting},
		{5 * time.Second, failing, gitsync.Undurable},
	}
	for i, l := range looks {
		if got := s.Observe(t0.Add(l.at), l.p, 0); got != l.want {
			t.Fatalf("look %d (%v) = %s, want %s", i, l.at, got, l.want)
		}
	}
	if !gitsync.NotDurable(failing) || gitsync.NotDurable(scheduler.Progress{}) {
		t.Error("NotDurable does not follow CommitError")
	}
}

func TestSettleReset(t *testing.T) {
	s := &gitsync.Settle{Grace: time.Second}
	t0 := time.Unix(1_700_000_000, 0)
	s.Observe(t0, scheduler.Progress{Settled: scheduler.Stuck}, 0)
	s.Reset()
	if got := s.Observe(t0.Add(time.Second), scheduler.Progress{Settled: scheduler.Stuck}, 0); got != gitsync.Waiting {
		t.Errorf("after Reset = %s, want waiting: a new revision gets its own grace", got)
	}
}

func TestUnservedHint(t *testing.T) {
	db := converge.KindRef{Kind: "database", Version: 1}
	vpc := converge.KindRef{Kind: "vpc", Version: 3}
	const how = "declare a worker in converge.cue"
	tests := []struct {
		name     string
		problems []scheduler.Problem
		failed   []string
		want     string
	}{
		{name: "none parked", problems: []scheduler.Problem{{ID: "vpc/a", Reason: "boom", Permanent: true}}, want: ""},
		{name: "nothing declared", problems: []scheduler.Problem{{ID: "database/a", Unserved: db}},
			want: "no worker serves database/v1: " + how},
		{name: "declared worker failed", problems: []scheduler.Problem{{ID: "database/a", Unserved: db}},
			failed: []string{"worker db-0 failed to start: no such file"},
			want:   "no worker serves database/v1: worker db-0 failed to start: no such file"},
		{name: "each kind version once, sorted", problems: []scheduler.Problem{
			{ID: "vpc/b", Unserved: vpc}, {ID: "database/a", Unserved: db}, {ID: "vpc/c", Unserved: vpc}, {ID: "tgw/x", Reason: "waiting"},
		}, want: "no worker serves database/v1, vpc/v3: " + how},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := gitsync.UnservedHint(tt.problems, tt.failed, how); got != tt.want {
				t.Errorf("UnservedHint = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestVerdict(t *testing.T) {
	counts := converge.Counts{Total: 5, Ready: 5}
	tests := []struct {
		name string
		why  string
		p    scheduler.Progress
		hint string
		want string
	}{
		{name: "stuck", why: "stuck", p: scheduler.Progress{Counts: converge.Counts{Total: 5, Ready: 3}},
			want: "stuck: 3/5 Ready"},
		{name: "every resource Ready but commits fail", why: "stuck", p: scheduler.Progress{Counts: counts, CommitError: "write state.db: no space left on device"},
			want: "stuck: 5/5 Ready in memory, not durable; commit state: write state.db: no space left on device"},
		{name: "already prefixed", why: "timed out", p: scheduler.Progress{Counts: counts, CommitError: "commit state: boom"},
			want: "timed out: 5/5 Ready in memory, not durable; commit state: boom"},
		{name: "commit first, then the hint", why: "stuck", p: scheduler.Progress{Counts: counts, CommitError: "boom"},
			hint: "no worker serves db/v1: declare one", want: "stuck: 5/5 Ready in memory, not durable; commit state: boom; no worker serves db/v1: declare one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := gitsync.Verdict(tt.why, tt.p, tt.hint); got != tt.want {
				t.Errorf("Verdict = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestHealth(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	failing := scheduler.Progress{Settled: scheduler.Stuck, CommitError: "boom"}
	working := scheduler.Progress{Settled: scheduler.Working}
	converged := scheduler.Progress{Settled: scheduler.Converged}
	type step struct {
		at      time.Duration
		observe *scheduler.Progress // a look at the engine, if not nil
		stuck   *string             // a stuck verdict (or "" to clear), if not nil
		want    string              // Check at this step
	}
	verdict := "main@sha1:abc stuck: 1/2 Ready"
	clear := ""
	tests := []struct {
		name  string
		stall time.Duration
		steps []step
	}{
		{name: "healthy before the first look", stall: time.Minute, steps: []step{{at: time.Hour, want: ""}}},
		{name: "commits failing, then recovered", steps: []step{
			{observe: &failing, want: "commit state: boom"},
			{at: time.Second, observe: &working, want: ""},
		}},
		{name: "stuck until converged", steps: []step{
			{observe: &working, stuck: &verdict, want: verdict},
			{at: time.Second, observe: &working, want: verdict},
			{at: 2 * time.Second, observe: &converged, want: ""},
		}},
		{name: "stuck until a new revision", steps: []step{
			{stuck: &verdict, want: verdict},
			{stuck: &clear, want: ""},
		}},
		{name: "a stalled loop", stall: time.Minute, steps: []step{
			{observe: &working, want: ""},
			{at: time.Minute, want: ""},
			{at: 2 * time.Minute, want: "sync loop: no look at the engine for 2m0s"},
			{at: 2 * time.Minute, observe: &working, want: ""},
		}},
		{name: "every reason at once", stall: time.Minute, steps: []step{
			{observe: &failing, stuck: &verdict, want: "commit state: boom; " + verdict},
			{at: 90 * time.Second, want: "commit state: boom; sync loop: no look at the engine for 1m30s; " + verdict},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &gitsync.Health{Stall: tt.stall}
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				if s.observe != nil {
					h.Observe(now, *s.observe)
				}
				if s.stuck != nil {
					h.Stuck(*s.stuck)
				}
				if got := h.Check(now); got != s.want {
					t.Fatalf("step %d: Check = %q, want %q", i, got, s.want)
				}
			}
		})
	}
}
