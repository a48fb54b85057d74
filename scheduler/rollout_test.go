package scheduler_test

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// rolloutDesired is classicDesired with the root's rollout declared.
func rolloutDesired(b bomSpec, rev string, ro *converge.Rollout) *converge.Desired {
	d := classicDesired(b, rev)
	d.Resources[0].Rollout = ro
	return d
}

// bumpTeams returns b with every team's account at rev.
func bumpTeams(b bomSpec, rev string) bomSpec {
	var out bomSpec
	for _, fd := range b.FDs {
		nfd := fd
		nfd.Teams = nil
		for _, t := range fd.Teams {
			nfd.Teams = append(nfd.Teams, bomTeam{Name: t.Name, Rev: rev})
		}
		out.FDs = append(out.FDs, nfd)
	}
	return out
}

func rolloutOfRow(t *testing.T, r *converge.Resource) *converge.RolloutStatus {
	t.Helper()
	var v struct {
		Rollout *converge.RolloutStatus `json:"rollout"`
	}
	if len(r.Status) == 0 {
		return nil
	}
	if err := json.Unmarshal(r.Status, &v); err != nil {
		t.Fatalf("status %s: %v", r.Status, err)
	}
	return v.Rollout
}

func accountRev(m *memStore, name string) string {
	r := m.get(converge.NewID("account", name))
	if r == nil {
		return "(absent)"
	}
	var spec map[string]string
	_ = json.Unmarshal(r.Declared, &spec)
	return spec["rev"]
}

// The rollout tests run in synctest bubbles: soaks and timeouts take
// their time on the bubble's clock, whatever the machine's load.

// TestRolloutWaves: a change of every team reaches fd-01 first; the other
// domains keep their previous spec until fd-01's wave has soaked, then get
// it; the rollout ends complete and the root Ready at its generation.
func TestRolloutWaves(t *testing.T) { synctest.Test(t, rolloutWaves) }

func rolloutWaves(t *testing.T) {
	ro := &converge.Rollout{Soak: 300 * time.Millisecond,
		Waves: []converge.Wave{{Name: "canary", Rows: []string{"fd-01"}}, {Name: "rest"}}}
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	b := makeBOM(3, 2)
	h.apply(rolloutDesired(b, "c1", ro), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	if got := rolloutOfRow(t, store.get("classicbom/org")); got != nil {
		t.Errorf("first composition recorded a rollout %+v; it creates everything at once", got)
	}

	h.apply(rolloutDesired(bumpTeams(b, "r2"), "c2", ro), classicValidator)
	waitFor(t, 5*time.Second, "the canary wave applied", func() bool { return accountRev(store, "fd-01-team-002") == "r2" })
	h.flush()
	if got := accountRev(store, "fd-02-team-001"); got != "" {
		t.Errorf("fd-02's account has rev %q during the canary wave, want its previous spec", got)
	}
	root := store.get("classicbom/org")
	if root.Phase == converge.PhaseReady {
		t.Errorf("root Ready while a wave holds children back")
	}
	st := rolloutOfRow(t, root)
	if st == nil || st.Wave != 0 || st.Name != "canary" || st.Held != 4 || st.Waves != 2 {
		t.Errorf("rollout status %+v, want wave 0 (canary) of 2 holding fd-02's and fd-03's 4 accounts", st)
	}
	if p := h.s.Progress(); p.Settled == scheduler.Stuck {
		t.Errorf("stuck while a wave soaks")
	}
	h.waitSettled(scheduler.Converged, 10*time.Second)
	h.flush()
	for _, n := range []string{"fd-01-team-001", "fd-02-team-001", "fd-03-team-002"} {
		if got := accountRev(store, n); got != "r2" {
			t.Errorf("account %s at rev %q after the rollout, want r2", n, got)
		}
	}
	root = store.get("classicbom/org")
	if st := rolloutOfRow(t, root); st == nil || st.Phase != converge.RolloutComplete || st.Held != 0 {
		t.Errorf("rollout status %+v after converging, want complete", st)
	}
	if root.Phase != converge.PhaseReady || root.ObservedGeneration != root.Generation {
		t.Errorf("root %s at %d/%d, want Ready at its generation", root.Phase, root.ObservedGeneration, root.Generation)
	}
	var types []string
	for _, e := range store.eventsOf("classicbom/org") {
		if strings.HasPrefix(e.Type, "Rollout") {
			types = append(types, e.Type)
		}
	}
	if got := strings.Join(types, " "); got != "RolloutWave RolloutSoaking RolloutWave RolloutComplete" {
		t.Errorf("rollout events %q", got)
	}
}

// convergedWithFaultyR2 converges b under ro with a worker whose account
// reconciles at rev r2 end in outcome (with msg) once the returned switch
// is on.
func convergedWithFaultyR2(t *testing.T, ro *converge.Rollout, b bomSpec, outcome converge.Outcome, msg string) (*memStore, *harness, *atomic.Bool) {
	t.Helper()
	store := newMemStore()
	faulty := new(atomic.Bool)
	handler := func(tk *converge.Task) *converge.Result {
		if faulty.Load() && tk.Kind == "account" && strings.Contains(string(tk.Spec), `"rev":"r2"`) {
			return &converge.Result{Outcome: outcome, Message: msg}
		}
		return classicHandler(tk)
	}
	h := start(t, store, newFakeDisp(handler, &fakeWorker{name: "w1"}), testConfig())
	h.apply(rolloutDesired(b, "c1", ro), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	return store, h, faulty
}

// TestRolloutHaltsOnFailure: a permanent failure in the first wave halts
// the rollout; the later waves keep their previous spec, the root fails
// naming the wave, and the graph is stuck (a new revision must come).
func TestRolloutHaltsOnFailure(t *testing.T) { synctest.Test(t, rolloutHaltsOnFailure) }

func rolloutHaltsOnFailure(t *testing.T) {
	ro := &converge.Rollout{Soak: time.Millisecond,
		Waves: []converge.Wave{{Name: "canary", Rows: []string{"fd-01"}}, {Name: "half", Percent: 50}}}
	b := makeBOM(3, 2)
	store, h, bad := convergedWithFaultyR2(t, ro, b, converge.OutcomePermanent, "quota exceeded")
	bad.Store(true)
	h.apply(rolloutDesired(bumpTeams(b, "r2"), "c2", ro), classicValidator)
	h.waitSettled(scheduler.Stuck, 5*time.Second)
	h.flush()
	root := store.get("classicbom/org")
	if root.Phase != converge.PhaseFailed || !strings.Contains(root.Reason, "rollout halted at wave 1/3 (canary): account/fd-01-team-00") ||
		!strings.Contains(root.Reason, "quota exceeded") {
		t.Errorf("root %s %q, want Failed naming the canary wave and the failure", root.Phase, root.Reason)
	}
	st := rolloutOfRow(t, root)
	if st == nil || st.Phase != converge.RolloutHalted || st.Held != 4 {
		t.Errorf("rollout status %+v, want halted with 4 held", st)
	}
	for _, n := range []string{"fd-02-team-001", "fd-03-team-002"} {
		if got := accountRev(store, n); got != "" {
			t.Errorf("account %s at rev %q after the halt, want its previous spec", n, got)
		}
	}
	views, err := h.s.Rollouts(t.Context())
	if err != nil || len(views) != 1 || views[0].Status.Phase != converge.RolloutHalted {
		t.Errorf("Rollouts = %+v, %v; want the halted one", views, err)
	}

	// A fix (a new revision) starts over and completes.
	bad.Store(false)
	h.apply(rolloutDesired(bumpTeams(b, "r3"), "c3", ro), classicValidator)
	h.waitSettled(scheduler.Converged, 10*time.Second)
	h.flush()
	if got := accountRev(store, "fd-03-team-002"); got != "r3" {
		t.Errorf("after the fix fd-03's account is at %q, want r3", got)
	}
}

// TestRolloutTimeout: a wave that does not become Ready in time halts.
func TestRolloutTimeout(t *testing.T) { synctest.Test(t, rolloutTimeout) }

func rolloutTimeout(t *testing.T) {
	ro := &converge.Rollout{Timeout: 200 * time.Millisecond,
		Waves: []converge.Wave{{Name: "canary", Rows: []string{"fd-01"}}, {}}}
	b := makeBOM(2, 1)
	store, h, slow := convergedWithFaultyR2(t, ro, b, converge.OutcomeTransient, "throttled")
	slow.Store(true)
	h.apply(rolloutDesired(bumpTeams(b, "r2"), "c2", ro), classicValidator)
	waitFor(t, 5*time.Second, "the rollout halted", func() bool {
		r := store.get("classicbom/org")
		return r != nil && r.Phase == converge.PhaseFailed
	})
	h.flush()
	root := store.get("classicbom/org")
	if !strings.Contains(root.Reason, "rollout halted at wave 1/2 (canary): not Ready within 200ms") {
		t.Errorf("root reason %q, want the timeout named", root.Reason)
	}
	if got := accountRev(store, "fd-02-team-001"); got != "" {
		t.Errorf("fd-02's account at %q, want its previous spec", got)
	}
}

// TestRolloutSurvivesRestart: a rollout stopped while it soaks resumes
// from its stored status in the next process: the held domains get the
// change once the soak ends, without starting the waves over.
func TestRolloutSurvivesRestart(t *testing.T) { synctest.Test(t, rolloutSurvivesRestart) }

func rolloutSurvivesRestart(t *testing.T) {
	ro := &converge.Rollout{Soak: 500 * time.Millisecond,
		Waves: []converge.Wave{{Name: "canary", Rows: []string{"fd-01"}}, {Name: "rest"}}}
	store := newMemStore()
	h := start(t, store, newFakeDisp(classicHandler, &fakeWorker{name: "w1"}), testConfig())
	b := makeBOM(3, 2)
	h.apply(rolloutDesired(b, "c1", ro), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.apply(rolloutDesired(bumpTeams(b, "r2"), "c2", ro), classicValidator)
	waitFor(t, 5*time.Second, "the canary wave soaking", func() bool {
		h.flush()
		st := rolloutOfRow(t, store.get("classicbom/org"))
		return st != nil && st.Phase == converge.RolloutSoaking
	})
	h.stop()
	if got := accountRev(store, "fd-03-team-001"); got != "" {
		t.Fatalf("fd-03 at %q before the restart, want its previous spec", got)
	}

	h2 := start(t, store, newFakeDisp(classicHandler, &fakeWorker{name: "w1"}), testConfig())
	h2.apply(rolloutDesired(bumpTeams(b, "r2"), "c2", ro), classicValidator)
	h2.waitSettled(scheduler.Converged, 10*time.Second)
	h2.flush()
	if got := accountRev(store, "fd-03-team-001"); got != "r2" {
		t.Errorf("fd-03 at %q after the restart's rollout, want r2", got)
	}
	waves := 0
	for _, e := range store.eventsOf("classicbom/org") {
		if e.Type == "RolloutWave" {
			waves++
		}
	}
	if waves != 2 {
		t.Errorf("%d RolloutWave events, want 2 (the canary, then the rest once)", waves)
	}
}
