package scheduler_test

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

func statusField(t *testing.T, raw json.RawMessage, path string) any {
	t.Helper()
	var m any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("status %s: %v", raw, err)
	}
	for _, seg := range strings.Split(path, ".") {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil
		}
		m = mm[seg]
	}
	return m
}

func rollupOf(t *testing.T, r *converge.Resource) converge.Counts {
	t.Helper()
	var st struct {
		Rollup converge.Counts `json:"rollup"`
	}
	if err := json.Unmarshal(r.Status, &st); err != nil {
		t.Fatalf("status of %s: %v", r.ID(), err)
	}
	return st.Rollup
}

// In a synctest bubble, so "a re-apply dispatches nothing" is checked with
// every goroutine idle rather than after a sleep.
func TestClassicConverges(t *testing.T) { synctest.Test(t, classicConverges) }

func classicConverges(t *testing.T) {
	const fds, teams = 3, 4
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	plan := h.apply(classicDesired(makeBOM(fds, teams), "c1"), classicValidator)
	if got, want := len(plan.Create), 1; got != want {
		t.Fatalf("plan creates %d, want %d", got, want)
	}
	p := h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()

	n := bomSize(fds, teams)
	if got, want := p.Counts.Total, n+1; got != want {
		t.Errorf("total %d, want %d", got, want)
	}
	root := store.get("classicbom/org")
	if root == nil || root.Phase != converge.PhaseReady {
		t.Fatalf("root: %+v", root)
	}
	roll := rollupOf(t, root)
	if got, want := roll, (converge.Counts{Total: n, Ready: n}); got != want {
		t.Errorf("rollup %+v, want %+v", got, want)
	}
	if got, want := statusField(t, root.Status, "children"), float64(n); got != want {
		t.Errorf("root status children %v, want %v (composer status kept)", got, want)
	}
	route := store.get("route/fd-02-team-003")
	if got, want := statusField(t, route.Spec, "vpc_id"), "vpc-fd-02-team-003"; got != want {
		t.Errorf("route spec vpc_id %v, want %v", got, want)
	}
	if got, want := statusField(t, route.Spec, "net.tgw_id"), "tgw-fd-02-tgw"; got != want {
		t.Errorf("route spec net.tgw_id %v, want %v", got, want)
	}
	if got, want := statusField(t, route.Spec, "dest"), "0.0.0.0/0"; got != want {
		t.Errorf("route spec dest %v, want %v (declared kept)", got, want)
	}
	vpc := store.get("vpc/fd-01-team-001")
	if got, want := statusField(t, vpc.Spec, "account_id"), "acct-fd-01-team-001"; got != want {
		t.Errorf("vpc spec account_id %v, want %v", got, want)
	}
	if got, want := vpc.Owner, converge.ID("classicbom/org"); got != want {
		t.Errorf("vpc owner %v, want %v", got, want)
	}
	all := store.all()
	if got, want := len(all), n+1; got != want {
		t.Errorf("stored %d resources, want %d", got, want)
	}
	uids := map[string]bool{}
	for _, r := range all {
		if uids[r.UID] || len(r.UID) != 32 {
			t.Errorf("bad or duplicate uid %q on %s", r.UID, r.ID())
		}
		uids[r.UID] = true
		if r.Phase != converge.PhaseReady || r.ObservedGeneration != r.Generation || r.Lease != nil {
			t.Errorf("%s: phase %s gen %d/%d lease %v", r.ID(), r.Phase, r.ObservedGeneration, r.Generation, r.Lease)
		}
	}
	store.mu.Lock()
	puts, commits := store.puts, store.commits
	maxPuts := 0
	for id, c := range store.putsByID {
		if c > maxPuts && id != "classicbom/org" {
			maxPuts = c
		}
	}
	store.mu.Unlock()
	if maxPuts > 4 {
		t.Errorf("a leaf was put %d times, want <= 4", maxPuts)
	}
	if commits >= n {
		t.Errorf("%d commits for %d resources: want far fewer", commits, n)
	}
	t.Logf("%d resources: %d puts (%.2f/resource), %d commits", n+1, puts, float64(puts)/float64(n+1), commits)

	// The reactor fired once for the root's synced transition.
	dl := store.deliveryList()
	if got, want := len(dl), 1; got != want {
		t.Fatalf("%d deliveries, want %d", got, want)
	}
	if !dl[0].Done || dl[0].Subject.Transition != "synced" || dl[0].Subject.Resource != "classicbom/org" {
		t.Errorf("delivery %+v", dl[0])
	}
	if got, want := rollupOf(t, &converge.Resource{Status: dl[0].Subject.Status}).Ready, n; got != want {
		t.Errorf("delivered rollup ready %d, want %d", got, want)
	}
	var reacts int
	for _, tk := range disp.tasks() {
		if tk.Reaction == "react" {
			reacts++
			if string(tk.Config) != `{"dir":"/tmp/x"}` {
				t.Errorf("react config %s", tk.Config)
			}
		}
	}
	if reacts != 1 {
		t.Errorf("%d react tasks, want 1", reacts)
	}
	// Events: created and Ready for each resource, in seq order.
	if evs := store.eventsOf("route/fd-01-team-001"); len(evs) < 2 || evs[0].Type != "Created" || evs[len(evs)-1].Type != "Ready" {
		t.Errorf("route events %+v", evs)
	}

	// A re-apply of the same desired state changes and dispatches nothing.
	disp.resetLog()
	plan = h.apply(classicDesired(makeBOM(fds, teams), "c2"), classicValidator)
	if !plan.Empty() {
		t.Errorf("re-apply plan %+v, want empty", plan)
	}
	time.Sleep(time.Minute) // past every flush, backoff and lease of the test config
	synctest.Wait()
	if got := disp.tasks(); len(got) != 0 {
		t.Errorf("re-apply dispatched %d tasks", len(got))
	}
	if a := store.applied; a == nil || a.Hash != "c2" {
		t.Errorf("applied %+v, want c2", a)
	}
}
