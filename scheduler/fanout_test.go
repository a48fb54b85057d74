package scheduler_test

import (
	"context"
	"reflect"
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
	snap, err := store.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	events := len(store.events)
	disp.resetLog()

	bom.FDs[0].Teams = []bomTeam{{Name: "team-001"}, {Name: "team-003"}, {Name: "team-004"}}
	d := classicDesired(bom, "c2")
	p := scheduler.Diff(snap, d)
	scheduler.Fanout(context.Background(), scheduler.SnapshotGraph(snap), d, p, classicValidator, h.s.DryCompose)

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
			snap, err := store.Load(context.Background())
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
			scheduler.Fanout(ctx, scheduler.SnapshotGraph(snap), d, p, classicValidator, scheduler.DryRunner(disp))
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

// The running scheduler's graph prices a revision as the stored snapshot
// does: the same Diff, the same fan-out (dry runs on the scheduler's own
// workers while Run runs) and the same Weight, with one team dropped and
// one added.
func TestFanoutInPlace(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	bom := makeBOM(2, 3)
	h.apply(classicDesired(bom, "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	snap, err := store.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	bom.FDs[0].Teams = []bomTeam{{Name: "team-001"}, {Name: "team-003"}, {Name: "team-004"}}
	d := classicDesired(bom, "c2")
	ctx := context.Background()
	tests := []struct {
		name  string
		graph scheduler.Graph
		diff  func() (*scheduler.Plan, error)
	}{
		{"snapshot", scheduler.SnapshotGraph(snap), func() (*scheduler.Plan, error) { return scheduler.Diff(snap, d), nil }},
		{"scheduler", h.s.Graph(), func() (*scheduler.Plan, error) { return h.s.Diff(ctx, d) }},
	}
	var plans []*scheduler.Plan
	var weights []scheduler.Weight
	for _, tt := range tests {
		p, err := tt.diff()
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		scheduler.Fanout(ctx, tt.graph, d, p, classicValidator, h.s.DryCompose)
		w, err := scheduler.Weigh(ctx, tt.graph, p)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		plans, weights = append(plans, p), append(weights, w)
	}
	if got, want := ids(plans[1].Prune), "account/fd-01-team-002,route/fd-01-team-002,vpc/fd-01-team-002"; got != want {
		t.Errorf("scheduler: prune %s, want %s", got, want)
	}
	if !reflect.DeepEqual(plans[0], plans[1]) {
		t.Errorf("scheduler plan %+v,\nsnapshot plan %+v", plans[1], plans[0])
	}
	if got, want := weights[1], (scheduler.Weight{Total: len(snap.Resources), TornDown: 3}); got != want {
		t.Errorf("scheduler weight %+v, want %+v", got, want)
	}
	if weights[0] != weights[1] {
		t.Errorf("scheduler weight %+v, snapshot weight %+v", weights[1], weights[0])
	}
}
