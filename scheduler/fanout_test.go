package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

func ids(items []scheduler.PlanItem) string {
	var out []string
	for _, it := range items {
		out = append(out, string(it.ID))
	}
	return strings.Join(out, ",")
}

// Dropping one team and adding one: the plan lists the three children the
// recompose creates and the three it prunes, through the running
// scheduler's workers, and the dry run changes nothing stored.
func TestFanoutDropOneAddOne(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	bom := makeBOM(1, 3)
	h.apply(classicDesired(bom, "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	snap, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	events := len(store.events)
	disp.resetLog()

	bom.FDs[0].Teams = []bomTeam{{Name: "team-001"}, {Name: "team-003"}, {Name: "team-004"}}
	d := classicDesired(bom, "c2")
	p := scheduler.Diff(snap, d)
	scheduler.Fanout(context.Background(), snap, d, p, classicValidator, h.s.DryCompose)

	if got, want := ids(p.Create), "account/fd-01-team-004,route/fd-01-team-004,vpc/fd-01-team-004"; got != want {
		t.Errorf("create %s, want %s", got, want)
	}
	if got, want := ids(p.Prune), "account/fd-01-team-002,route/fd-01-team-002,vpc/fd-01-team-002"; got != want {
		t.Errorf("prune %s, want %s", got, want)
	}
	if got, want := ids(p.Update), "classicbom/org"; got != want {
		t.Errorf("update %s, want %s", got, want)
	}
	for _, it := range append(p.Create, p.Prune...) {
		if !strings.HasSuffix(it.Reason, " by classicbom/org") {
			t.Errorf("%s: reason %q does not name the composer", it.ID, it.Reason)
		}
	}
	if len(p.Unanswered)+len(p.Refused) > 0 {
		t.Errorf("unanswered %+v, refused %+v", p.Unanswered, p.Refused)
	}
	ts := disp.tasks()
	if len(ts) != 1 || ts[0].Reaction != converge.ReactionCompose || !ts[0].DryRun {
		t.Fatalf("dispatched %+v, want one dry-run compose", reactionsOf(ts))
	}
	h.flush()
	if got := len(store.events); got != events {
		t.Errorf("%d events after the dry run, want %d (none)", got, events)
	}
	if store.get("account/fd-01-team-004") != nil || store.get("account/fd-01-team-002") == nil {
		t.Errorf("the dry run changed the stored children")
	}
	if err := scheduler.CheckInvariants(h.s); err != nil {
		t.Error(err)
	}
}

// What a dry-run answer means for the plan: a permanent failure or a
// composition the engine would refuse applies nothing; no answer leaves
// the fan-out unknown.
func TestFanoutOutcomes(t *testing.T) {
	tests := []struct {
		name           string
		hook           func(tk *converge.Task) *converge.Result
		noWorker       bool
		wantRefused    string
		wantUnanswered string
		wantPrune      int
	}{
		{name: "ok", wantPrune: 3},
		{name: "permanent", hook: func(*converge.Task) *converge.Result {
			return &converge.Result{Outcome: converge.OutcomePermanent, Message: "bad bom"}
		}, wantRefused: "compose fails, nothing of it is applied: bad bom"},
		{name: "transient", hook: func(*converge.Task) *converge.Result {
			return &converge.Result{Outcome: converge.OutcomeTransient, Message: "api down"}
		}, wantUnanswered: "dry-run compose: transient: api down"},
		{name: "invalid child", hook: func(tk *converge.Task) *converge.Result {
			res := classicHandler(tk)
			for i := range res.Children {
				if res.Children[i].Kind == "vpc" {
					res.Children[i].Spec = mustJSON(map[string]string{})
				}
			}
			return res
		}, wantRefused: "compose refused, nothing of it is applied: vpc/fd-01-team-001: spec.cidr: field is required but not present"},
		{name: "no worker", noWorker: true, wantUnanswered: "no worker"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newMemStore()
			disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
			h := start(t, store, disp, testConfig())
			bom := makeBOM(1, 2)
			h.apply(classicDesired(bom, "c1"), classicValidator)
			h.waitSettled(scheduler.Converged, 5*time.Second)
			h.flush()
			h.stop()
			snap, err := store.Load()
			if err != nil {
				t.Fatal(err)
			}
			if tt.hook != nil {
				disp.setHook(func(tk *converge.Task) (*converge.Result, bool) { return tt.hook(tk), false })
			}
			if tt.noWorker {
				disp.vanish("w1")
			}
			bom.FDs[0].Teams = bom.FDs[0].Teams[:1]
			d := classicDesired(bom, "c2")
			p := scheduler.Diff(snap, d)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			scheduler.Fanout(ctx, snap, d, p, classicValidator, scheduler.DryRunner(disp))
			if got := len(p.Prune); got != tt.wantPrune {
				t.Errorf("%d to prune, want %d", got, tt.wantPrune)
			}
			reason := func(items []scheduler.PlanItem) string {
				if len(items) == 0 {
					return ""
				}
				if len(items) > 1 || items[0].ID != "classicbom/org" {
					t.Errorf("items %+v, want classicbom/org only", items)
				}
				return items[0].Reason
			}
			if got := reason(p.Refused); !strings.Contains(got, tt.wantRefused) || (got == "") != (tt.wantRefused == "") {
				t.Errorf("refused %q, want %q", got, tt.wantRefused)
			}
			if got := reason(p.Unanswered); !strings.Contains(got, tt.wantUnanswered) || (got == "") != (tt.wantUnanswered == "") {
				t.Errorf("unanswered %q, want %q", got, tt.wantUnanswered)
			}
		})
	}
}
