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
