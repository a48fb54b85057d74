package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// TestMetricsCountConverge converges the classic graph with one account
// failing transiently once and one route permanently, and checks every
// counter Metrics reports against what happened.
func TestMetricsCountConverge(t *testing.T) {
	const fds, teams = 2, 3
	store := newMemStore()
	var once sync.Once
	h := func(tk *converge.Task) *converge.Result {
		if tk.Kind == "account" && tk.Name == "fd-01-team-002" && tk.Reaction == converge.ReactionReconcile {
			fail := false
			once.Do(func() { fail = true })
			if fail {
				return &converge.Result{Outcome: converge.OutcomeTransient, Message: "throttled"}
			}
		}
		if tk.Kind == "route" && tk.Name == "fd-02-team-001" {
			return &converge.Result{Outcome: converge.OutcomePermanent, Message: "no route for you"}
		}
		return classicHandler(tk)
	}
	disp := newFakeDisp(h, &fakeWorker{name: "w1"})
	hs := start(t, store, disp, testConfig())
	hs.apply(classicDesired(makeBOM(fds, teams), "c1"), classicValidator)
	hs.waitSettled(scheduler.Stuck, 5*time.Second)
	hs.flush()

	m, err := hs.s.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byRef := map[converge.KindRef]scheduler.KindMetrics{}
	for _, k := range m.Kinds {
		byRef[k.Ref] = k
	}
	reconcile, compose := 0, 1
	acct := byRef[converge.KindRef{Kind: "account", Version: 1}]
	accounts := fds * (teams + 1) // a domain's and each team's
	if got, want := acct.Phases, (converge.Counts{Total: accounts, Ready: accounts}); got != want {
		t.Errorf("account phases %+v, want %+v", got, want)
	}
	at := acct.Tasks[reconcile]
	if at.Dispatched != uint64(accounts+1) || at.Results != uint64(accounts+1) || at.Retries != 1 || at.Failures != 0 {
		t.Errorf("account reconcile tasks %+v, want %d dispatched and answered, 1 retry", at, accounts+1)
	}
	if at.Latency.Count != at.Results {
		t.Errorf("account latency observed %d times, want %d", at.Latency.Count, at.Results)
	}
	route := byRef[converge.KindRef{Kind: "route", Version: 1}]
	if got, want := route.Phases, (converge.Counts{Total: fds * teams, Ready: fds*teams - 1, Failed: 1}); got != want {
		t.Errorf("route phases %+v, want %+v", got, want)
	}
	if rt := route.Tasks[reconcile]; rt.Failures != 1 || rt.Retries != 0 {
		t.Errorf("route reconcile tasks %+v, want 1 failure", rt)
	}
	bom := byRef[converge.KindRef{Kind: "classicbom", Version: 1}]
	if bt := bom.Tasks[compose]; bt.Dispatched < 1 || bt.Dispatched != bt.Results {
		t.Errorf("classicbom compose tasks %+v, want at least one, all answered", bt)
	}
	if got, want := bom.Phases.Total, 1; got != want {
		t.Errorf("classicbom resources %d, want %d", got, want)
	}
	if v2 := byRef[converge.KindRef{Kind: "vpc", Version: 2}]; v2.Phases.Total != 0 {
		t.Errorf("vpc v2 counts %+v, want none", v2.Phases)
	}
	if m.Commits == 0 || m.CommitLatency.Count != m.Commits || m.CommitRows.Count != m.Commits {
		t.Errorf("commits %d, latency observations %d, batch sizes %d", m.Commits, m.CommitLatency.Count, m.CommitRows.Count)
	}
	if got, want := m.CommitRows.Sum, float64(bomSize(fds, teams)+1); got < want {
		t.Errorf("committed %v resource rows in all, want at least %v", got, want)
	}
	if m.Ready != 0 || m.Inflight != 0 || m.Backoff != 0 {
		t.Errorf("queue %d, inflight %d, backoff %d after settling, want 0", m.Ready, m.Inflight, m.Backoff)
	}
	if err := scheduler.CheckInvariants(hs.s); err != nil {
		t.Error(err)
	}
}
