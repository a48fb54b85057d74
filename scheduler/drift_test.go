package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// realm is a fake real system: objects a reconcile writes (its spec, as
// is) and an observe reads, which a test changes out of band.
type realm struct {
	mu   sync.Mutex
	objs map[string]json.RawMessage
	// unmarked names objects that lost converge's mark.
	unmarked map[string]bool
}

func newRealm() *realm {
	return &realm{objs: map[string]json.RawMessage{}, unmarked: map[string]bool{}}
}

func (m *realm) handle(t *converge.Task) *converge.Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch t.Reaction {
	case converge.ReactionReconcile:
		m.objs[t.Name] = append(json.RawMessage(nil), t.Spec...)
		delete(m.unmarked, t.Name)
		return &converge.Result{Outcome: converge.OutcomeOK, Status: json.RawMessage(`{"id":"` + t.Name + `"}`)}
	case converge.ReactionTeardown:
		delete(m.objs, t.Name)
		return &converge.Result{Outcome: converge.OutcomeOK}
	case converge.ReactionObserve:
		o, ok := m.objs[t.Name]
		if !ok {
			return &converge.Result{Outcome: converge.OutcomeOK, Observed: &converge.Observation{}}
		}
		return &converge.Result{Outcome: converge.OutcomeOK, Observed: &converge.Observation{Exists: true, Managed: !m.unmarked[t.Name], Actual: o}}
	}
	return &converge.Result{Outcome: converge.OutcomePermanent, Message: "no such reaction " + t.Reaction}
}

func (m *realm) set(name, obj string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if obj == "" {
		delete(m.objs, name)
		return
	}
	m.objs[name] = json.RawMessage(obj)
}

func (m *realm) get(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return string(m.objs[name])
}

// driftDesired declares two db resources, a kind with observe (policy
// kindPolicy) and one without.
func driftDesired(kindPolicy, resPolicy string) *converge.Desired {
	return &converge.Desired{
		Revision: converge.Revision{Ref: "main", Hash: "c1"},
		Kinds: []*converge.Kind{
			{Name: "db", Version: 1, Finalizer: true, Reactions: []string{"reconcile", "observe", "teardown"}, DriftPolicy: kindPolicy},
			{Name: "blob", Version: 1, Reactions: []string{"reconcile"}},
		},
		Resources: []*converge.Resource{
			{Kind: "db", KindVersion: 1, Name: "a", Origin: converge.OriginGit, Declared: json.RawMessage(`{"limit":5,"owner":"a","password":"hunter2"}`), DriftPolicy: resPolicy},
			{Kind: "db", KindVersion: 1, Name: "b", Origin: converge.OriginGit, Declared: json.RawMessage(`{"limit":7,"owner":"b"}`)},
			{Kind: "blob", KindVersion: 1, Name: "c", Origin: converge.OriginGit, Declared: json.RawMessage(`{"size":1}`)},
		},
	}
}

func startDrift(t *testing.T, kindPolicy, resPolicy string) (*harness, *memStore, *realm) {
	t.Helper()
	store := newMemStore()
	m := newRealm()
	disp := newFakeDisp(m.handle, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	h.apply(driftDesired(kindPolicy, resPolicy), nil)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	return h, store, m
}

func reactions(d *fakeDisp, name string) []string {
	var out []string
	for _, tk := range d.tasks() {
		if tk.Name == name {
			out = append(out, tk.Reaction)
		}
	}
	return out
}

func eventsOfType(store *memStore, id converge.ID, typ string) []string {
	var out []string
	for _, e := range store.eventsOf(id) {
		if e.Type == typ {
			out = append(out, e.Message)
		}
	}
	return out
}

func resync(t *testing.T, h *harness, id converge.ID) {
	t.Helper()
	if _, err := h.s.Resync(context.Background(), id); err != nil {
		t.Fatal(err)
	}
}

// TestDriftHealed: a resync of a kind with observe observes; a field
// changed out of band is reported (a Drifted event naming the field,
// never a value), reconciled back and cleared with a Healed event.
func TestDriftHealed(t *testing.T) {
	h, store, m := startDrift(t, "", "")
	const id = converge.ID("db/a")
	h.disp.resetLog()

	// No drift: an observe, nothing written, no reconcile.
	resync(t, h, id)
	// Until the observe has run, not only been dispatched: run later (a
	// loaded machine), it would see the change made below.
	waitFor(t, 5*time.Second, "the observe", func() bool { return len(reactions(h.disp, "a")) == 1 && h.disp.idle() })
	h.flush()
	if got := reactions(h.disp, "a"); got[0] != "observe" {
		t.Fatalf("resync of a kind with observe ran %v, want observe", got)
	}
	if r := store.get(id); r.Drift != nil || r.Phase != converge.PhaseReady {
		t.Fatalf("no drift: row %+v", r)
	}

	m.set("a", `{"limit":50,"owner":"a","password":"changed-by-hand"}`)
	h.disp.resetLog()
	resync(t, h, id)
	waitFor(t, 5*time.Second, "the heal", func() bool { return len(eventsOfType(store, id, "Healed")) == 1 })
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	if got := strings.Join(reactions(h.disp, "a"), " "); got != "observe reconcile" {
		t.Errorf("a drifted heal resync ran %q, want observe reconcile", got)
	}
	if got := m.get("a"); got != `{"limit":5,"owner":"a","password":"hunter2"}` {
		t.Errorf("object after heal = %s", got)
	}
	dr := eventsOfType(store, id, "Drifted")
	if len(dr) != 1 || !strings.Contains(dr[0], "limit, password differ") || !strings.Contains(dr[0], "heal") {
		t.Errorf("Drifted events = %q, want one naming limit and password and the heal", dr)
	}
	for _, e := range store.eventsOf(id) {
		if strings.Contains(e.Message, "hunter2") || strings.Contains(e.Message, "changed-by-hand") || strings.Contains(e.Message, "50") {
			t.Errorf("event %s shows a value: %q", e.Type, e.Message)
		}
	}
	if r := store.get(id); r.Drift != nil || r.Phase != converge.PhaseReady || r.Reason != "" {
		t.Errorf("healed row: drift %+v phase %s reason %q", r.Drift, r.Phase, r.Reason)
	}

	// Gone: recreated.
	m.set("a", "")
	resync(t, h, id)
	waitFor(t, 5*time.Second, "the second heal", func() bool { return len(eventsOfType(store, id, "Healed")) == 2 })
	if got := m.get("a"); got == "" {
		t.Error("a deleted object was not recreated")
	}
	if dr := eventsOfType(store, id, "Drifted"); len(dr) != 2 || !strings.Contains(dr[1], "the object is gone") {
		t.Errorf("Drifted events = %q, want the second to say gone", dr)
	}
}

// TestDriftReported: under drift_policy report a drift is recorded and
// reported once, the object is left as found, the resource stays Ready
// saying it is not healed, later resyncs only observe, the metrics count
// it; when the object matches again the drift is cleared.
func TestDriftReported(t *testing.T) {
	h, store, m := startDrift(t, converge.DriftPolicyReport, "")
	const id = converge.ID("db/b")
	m.set("b", `{"limit":99,"owner":"b"}`)
	h.disp.resetLog()
	resync(t, h, id)
	waitFor(t, 5*time.Second, "the drift", func() bool { r := store.get(id); return r != nil && r.Drift != nil })
	resync(t, h, id)
	waitFor(t, 5*time.Second, "the second observe", func() bool { return len(reactions(h.disp, "b")) == 2 })
	h.flush()
	if got := strings.Join(reactions(h.disp, "b"), " "); got != "observe observe" {
		t.Errorf("report-only resyncs ran %q, want observe observe", got)
	}
	if got := m.get("b"); got != `{"limit":99,"owner":"b"}` {
		t.Errorf("report-only policy changed the object: %s", got)
	}
	r := store.get(id)
	if r.Phase != converge.PhaseReady || r.Drift == nil || strings.Join(r.Drift.Fields, ",") != "limit" || r.Drift.Policy != "report" ||
		!strings.Contains(r.Reason, "not healed (drift_policy report)") {
		t.Errorf("reported row: phase %s drift %+v reason %q", r.Phase, r.Drift, r.Reason)
	}
	if dr := eventsOfType(store, id, "Drifted"); len(dr) != 1 || !strings.Contains(dr[0], "not healed") {
		t.Errorf("Drifted events = %q, want one saying not healed", dr)
	}
	mt, err := h.s.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range mt.Kinds {
		if want := map[string]int{"db": 1}[k.Ref.Kind]; k.Drifted != want {
			t.Errorf("metrics: %s drifted %d, want %d", k.Ref, k.Drifted, want)
		}
	}

	// A restart keeps it (and the gauge).
	h.stop()
	h2 := start(t, store, newFakeDisp(m.handle, &fakeWorker{name: "w1"}), testConfig())
	mt, _ = h2.s.Metrics(context.Background())
	if got := kindDrifted(mt, "db"); got != 1 {
		t.Errorf("after a restart the gauge says %d drifted, want 1", got)
	}

	// Someone puts it back by hand: the drift is resolved.
	m.set("b", `{"limit":7,"owner":"b"}`)
	resync(t, h2, id)
	waitFor(t, 5*time.Second, "the drift to clear", func() bool { r := store.get(id); return r != nil && r.Drift == nil && r.Reason == "" })
	if len(eventsOfType(store, id, "DriftResolved")) != 1 {
		t.Errorf("no DriftResolved event: %+v", store.eventsOf(id))
	}
	mt, _ = h2.s.Metrics(context.Background())
	if got := kindDrifted(mt, "db"); got != 0 {
		t.Errorf("gauge after resolution = %d", got)
	}
}

func kindDrifted(m scheduler.Metrics, kind string) int {
	n := 0
	for _, k := range m.Kinds {
		if k.Ref.Kind == kind {
			n += k.Drifted
		}
	}
	return n
}

// TestDriftPolicyPerResource: a resource's own drift_policy wins over its
// kind's; turning a reported drift's policy to heal heals it at once, and
// a new declaration's reconcile clears a reported drift.
func TestDriftPolicyPerResource(t *testing.T) {
	h, store, m := startDrift(t, "", converge.DriftPolicyReport)
	m.set("a", `{"limit":1,"owner":"a","password":"hunter2"}`)
	m.set("b", `{"limit":1,"owner":"b"}`)
	resync(t, h, "db/a")
	resync(t, h, "db/b")
	waitFor(t, 5*time.Second, "b healed", func() bool { return len(eventsOfType(store, "db/b", "Healed")) == 1 })
	waitFor(t, 5*time.Second, "a reported", func() bool { r := store.get("db/a"); return r != nil && r.Drift != nil })
	if got := m.get("a"); !strings.Contains(got, `"limit":1`) {
		t.Errorf("a (report) was changed: %s", got)
	}
	// The policy becomes heal (the kind's): healed at once.
	h.apply(driftDesired("", ""), nil)
	waitFor(t, 5*time.Second, "a healed", func() bool { return len(eventsOfType(store, "db/a", "Healed")) == 1 })
	if got := m.get("a"); !strings.Contains(got, `"limit":5`) {
		t.Errorf("a not healed: %s", got)
	}

	// Reported again, then declared anew: the reconcile clears it.
	h.apply(driftDesired("", converge.DriftPolicyReport), nil)
	m.set("a", `{"limit":2,"owner":"a","password":"hunter2"}`)
	resync(t, h, "db/a")
	waitFor(t, 5*time.Second, "a reported again", func() bool { r := store.get("db/a"); return r != nil && r.Drift != nil })
	d := driftDesired("", converge.DriftPolicyReport)
	d.Resources[0].Declared = json.RawMessage(`{"limit":2,"owner":"a","password":"hunter2"}`)
	h.apply(d, nil)
	waitFor(t, 5*time.Second, "a's drift resolved by the new generation", func() bool {
		r := store.get("db/a")
		return r != nil && r.Drift == nil && r.Generation == 2 && r.Phase == converge.PhaseReady
	})
}

// TestResyncWithoutObserveReconciles: a kind without observe resyncs by
// reconciling, as before; a worker that does not serve observe too.
func TestResyncWithoutObserveReconciles(t *testing.T) {
	store := newMemStore()
	m := newRealm()
	disp := newFakeDisp(m.handle, &fakeWorker{name: "w1", serves: map[converge.KindRef][]string{
		{Kind: "db", Version: 1}:   {"reconcile", "teardown"},
		{Kind: "blob", Version: 1}: {"reconcile"},
	}})
	h := start(t, store, disp, testConfig())
	h.apply(driftDesired("", ""), nil)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	disp.resetLog()
	resync(t, h, "blob/c")
	resync(t, h, "db/a")
	waitFor(t, 5*time.Second, "the resyncs", func() bool { return len(disp.tasks()) == 2 })
	for _, tk := range disp.tasks() {
		if tk.Reaction != "reconcile" {
			t.Errorf("%s/%s resynced with %s, want reconcile", tk.Kind, tk.Name, tk.Reaction)
		}
	}
}

// TestObserveTransientFailureRetries: an observe that fails (the server
// down) retries with backoff, naming the error, and reconciles once it
// answers.
func TestObserveTransientFailureRetries(t *testing.T) {
	h, store, _ := startDrift(t, "", "")
	const id = converge.ID("db/b")
	var mu sync.Mutex
	down := 3
	h.disp.setHook(func(tk *converge.Task) (*converge.Result, bool) {
		mu.Lock()
		defer mu.Unlock()
		if tk.Name == "b" && down > 0 {
			down--
			return &converge.Result{Outcome: converge.OutcomeTransient, Message: "postgres 127.0.0.1:5432 unreachable: connection refused"}, false
		}
		return nil, false
	})
	resync(t, h, id)
	waitFor(t, 5*time.Second, "a retry", func() bool {
		r := store.get(id)
		return r != nil && strings.Contains(r.Reason, "retrying in") && strings.Contains(r.Reason, "127.0.0.1:5432")
	})
	h.waitSettled(scheduler.Converged, 5*time.Second)
}

// TestRefreshAndObserve: Scheduler.Observe answers a resource's observe
// without applying it (no drift recorded, no event), and Refresh lists
// the drifted resources of a snapshot with the policy a sync applies.
func TestRefreshAndObserve(t *testing.T) {
	h, store, m := startDrift(t, "", converge.DriftPolicyReport)
	m.set("a", `{"limit":9,"owner":"a","password":"hunter2"}`)
	m.set("b", "")
	res, err := h.s.Observe(context.Background(), &converge.Task{Kind: "db", Name: "a"})
	if err != nil || res.Observed == nil || !res.Observed.Exists {
		t.Fatalf("Observe = %+v, %v", res, err)
	}
	snap, err := store.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := scheduler.Refresh(context.Background(), snap, h.s.Observe, 4)
	if r.Observed != 2 || len(r.Failed) != 0 || len(r.Drift) != 2 {
		t.Fatalf("Refresh = %+v", r)
	}
	if d := r.Drift[0]; d.ID != "db/a" || strings.Join(d.Fields, ",") != "limit" || d.Policy != "report" {
		t.Errorf("drift of db/a = %+v", d)
	}
	if d := r.Drift[1]; d.ID != "db/b" || !d.Gone || d.Policy != "heal" {
		t.Errorf("drift of db/b = %+v", d)
	}
	h.flush()
	for _, id := range []converge.ID{"db/a", "db/b"} {
		if r := store.get(id); r.Drift != nil || len(eventsOfType(store, id, "Drifted")) != 0 {
			t.Errorf("%s: a refresh recorded drift: %+v", id, r.Drift)
		}
	}
	if got := m.get("b"); got != "" {
		t.Errorf("a refresh changed the real system: b = %s", got)
	}
	if _, err := h.s.Observe(context.Background(), &converge.Task{Kind: "db", Name: "nope"}); !errors.Is(err, converge.ErrNotFound) {
		t.Errorf("Observe of an unknown resource: %v", err)
	}
}
