// The engine's end-to-end behaviours through the public API, one test each
// (dependency order, value flows, retries, rollup, reactors, cascade
// delete, versioning): over 1,000 lines because they are read together,
// as the list of what the scheduler promises; fakes_test.go holds their
// world.

package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// reactionsAfter lists "reaction kind/name" of the dispatched tasks.
func reactionsOf(ts []converge.Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Reaction+" "+string(converge.NewID(t.Kind, t.Name)))
	}
	return out
}

func TestProducerChangeRetriggersConsumer(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	bom := makeBOM(1, 2)
	h.apply(classicDesired(bom, "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	routeBefore := store.get("route/fd-01-team-001")

	disp.resetLog()
	bom.FDs[0].Teams[0].Rev = "2"
	plan := h.apply(classicDesired(bom, "c2"), classicValidator)
	if got, want := len(plan.Update), 1; got != want {
		t.Fatalf("plan updates %d, want %d: %+v", got, want, plan)
	}
	if got, want := strings.Join(plan.Update[0].Fields, ","), "fds"; got != want {
		t.Errorf("changed fields %q, want %q", got, want)
	}
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	vpc := store.get("vpc/fd-01-team-001")
	if got, want := statusField(t, vpc.Spec, "account_id"), "acct-fd-01-team-001-2"; got != want {
		t.Errorf("vpc spec account_id %v, want %v", got, want)
	}
	if got, want := vpc.Generation, int64(2); got != want {
		t.Errorf("vpc generation %d, want %d", got, want)
	}
	route := store.get("route/fd-01-team-001")
	if got, want := route.Generation, routeBefore.Generation; got != want {
		t.Errorf("route generation %d, want %d (its flowed values did not change)", got, want)
	}
	// The root's "synced" delivery goes once, after the compose that
	// fires it, as soon as its outbox row is committed (ahead of the
	// ready queue from then on); where that commit falls among the
	// reconciles is the committer's timing.
	all := reactionsOf(disp.tasks())
	var rest []string
	reacted := -1
	for i, r := range all {
		if r == "react statussink/bom-synced" && reacted < 0 {
			reacted = i
			continue
		}
		rest = append(rest, r)
	}
	want := "compose classicbom/org; reconcile account/fd-01-team-001; reconcile vpc/fd-01-team-001"
	if got := strings.Join(rest, "; "); reacted < 1 || got != want {
		t.Errorf("dispatched %q, want %q with react statussink/bom-synced once after the compose", strings.Join(all, "; "), want)
	}
}

func TestTransientFaultsConverge(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(7, 7))
	disp.setHook(func(tk *converge.Task) (*converge.Result, bool) {
		if tk.Reaction != converge.ReactionReconcile {
			return nil, false
		}
		mu.Lock()
		defer mu.Unlock()
		if rng.Float64() < 0.3 {
			return &converge.Result{Outcome: converge.OutcomeTransient, Message: "throttled"}, false
		}
		return nil, false
	})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(3, 5), "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 10*time.Second)
	h.flush()
	tries := map[string]int{}
	for _, tk := range disp.tasks() {
		tries[tk.Key]++
	}
	retried := 0
	for _, n := range tries {
		if n > 1 {
			retried++
		}
	}
	if retried == 0 {
		t.Errorf("no task ran more than once")
	}
	var sawReason bool
	for _, e := range store.eventsOf("") {
		if e.Type == "Failed" && strings.HasPrefix(e.Message, "retrying in ") && strings.HasSuffix(e.Message, ": throttled") {
			sawReason = true
		}
	}
	if !sawReason {
		t.Errorf("no Failed event with reason \"retrying in …: throttled\"")
	}
	for _, r := range store.all() {
		if r.Phase != converge.PhaseReady || r.Attempts != 0 || r.LastError != "" {
			t.Errorf("%s: phase %s attempts %d last error %q", r.ID(), r.Phase, r.Attempts, r.LastError)
		}
	}
}

func TestPermanentErrorStops(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	disp.setHook(func(tk *converge.Task) (*converge.Result, bool) {
		if tk.Kind == "vpc" && tk.Name == "fd-01-team-002" {
			return &converge.Result{Outcome: converge.OutcomePermanent, Message: "quota exceeded"}, false
		}
		return nil, false
	})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(1, 3), "c1"), classicValidator)
	p := h.waitSettled(scheduler.Stuck, 5*time.Second)
	if got, want := p.Counts.Failed, 1; got != want {
		t.Errorf("failed %d, want %d", got, want)
	}
	probs := h.s.Problems()
	if len(probs) == 0 {
		t.Fatalf("no problems")
	}
	want := scheduler.Problem{ID: "vpc/fd-01-team-002", Phase: converge.PhaseFailed, Reason: "permanent: quota exceeded", Permanent: true}
	if got := probs[0]; got != want {
		t.Errorf("first problem %+v, want %+v", got, want)
	}
	h.flush()
	route := store.get("route/fd-01-team-002")
	if got, want := route.Reason, "waiting for vpc/fd-01-team-002"; got != want || route.Phase != converge.PhasePending {
		t.Errorf("route %s reason %q, want Pending %q", route.Phase, got, want)
	}
	root := store.get("classicbom/org")
	n := bomSize(1, 3)
	if got, want := root.Reason, itoaT(n-2)+"/"+itoaT(n)+" children ready"; got != want {
		t.Errorf("root reason %q, want %q", got, want)
	}
	if got, want := rollupOf(t, root), (converge.Counts{Total: n, Ready: n - 2, Failed: 1, Pending: 1}); got != want {
		t.Errorf("rollup %+v, want %+v", got, want)
	}
	// The permanent failure is not retried.
	var vpcTasks int
	for _, tk := range disp.tasks() {
		if tk.Kind == "vpc" && tk.Name == "fd-01-team-002" {
			vpcTasks++
		}
	}
	if vpcTasks != 1 {
		t.Errorf("failed vpc dispatched %d times, want 1", vpcTasks)
	}
}

func itoaT(n int) string { b, _ := json.Marshal(n); return string(b) }

// v1Only serves every classic kind at version 1 (and classicbom).
func v1Only(name string) *fakeWorker {
	all := []string{"reconcile", "teardown", "compose", "react", "enable_flow_logs"}
	return &fakeWorker{name: name, serves: map[converge.KindRef][]string{
		{Kind: "classicbom", Version: 1}: all, {Kind: "account", Version: 1}: all, {Kind: "vpc", Version: 1}: all,
		{Kind: "tgw", Version: 1}: all, {Kind: "route", Version: 1}: all, {Kind: "statussink", Version: 1}: all,
	}}
}

func sampleVPC(name string, version int, spec string) *converge.Resource {
	return &converge.Resource{Kind: "vpc", KindVersion: version, Name: name, Origin: converge.OriginGit,
		Declared: json.RawMessage(spec), Source: "resources/" + name + ".json:1"}
}

func TestParkedVersionUnparks(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, v1Only("w1"))
	h := start(t, store, disp, testConfig())
	d := classicDesired(makeBOM(1, 1), "c1")
	d.Kinds = append(d.Kinds, leafKind("vpc", 3))
	d.Resources = append(d.Resources, sampleVPC("sample-v3", 3, `{"cidr":"10.1.0.0/16","account_id":"123456789012"}`))
	h.apply(d, nil)
	h.waitSettled(scheduler.Stuck, 5*time.Second)
	h.flush()
	r := store.get("vpc/sample-v3")
	if got, want := r.Reason, "no worker serves vpc/v3"; got != want || r.Phase != converge.PhasePending {
		t.Errorf("parked: %s %q, want Pending %q", r.Phase, got, want)
	}
	probs := h.s.Problems()
	if len(probs) == 0 || probs[0].ID != "vpc/sample-v3" || !probs[0].Permanent ||
		probs[0].Unserved != (converge.KindRef{Kind: "vpc", Version: 3}) {
		t.Errorf("problems %+v, want vpc/sample-v3 first, permanent, unserved vpc/v3", probs)
	}
	for _, tk := range disp.tasks() {
		if tk.Kind == "vpc" && tk.Name == "sample-v3" {
			t.Errorf("a vpc/v3 task ran on a worker that does not serve v3: %+v", tk)
		}
	}
	disp.addWorker(&fakeWorker{name: "w3", serves: map[converge.KindRef][]string{{Kind: "vpc", Version: 3}: {"reconcile"}}})
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	if r := store.get("vpc/sample-v3"); r.Phase != converge.PhaseReady {
		t.Errorf("after a v3 worker came: %s %q", r.Phase, r.Reason)
	}
}

func TestMaxInflightRespected(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1", delay: 5 * time.Millisecond})
	h := start(t, store, disp, testConfig())
	kinds := classicKinds()
	for _, k := range kinds {
		if k.Name == "vpc" && k.Version == 1 {
			k.MaxInflight = 2
		}
	}
	d := &converge.Desired{Kinds: kinds}
	for i := 0; i < 8; i++ {
		name := "s" + itoaT(i)
		d.Resources = append(d.Resources,
			sampleVPC(name, 1, `{"cidr":"10.0.0.0/16","account_id":"123456789012"}`),
			&converge.Resource{Kind: "account", KindVersion: 1, Name: name, Origin: converge.OriginGit, Declared: json.RawMessage(`{}`)})
	}
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Converged, 10*time.Second)
	disp.mu.Lock()
	vpc, acct := disp.maxInfl[converge.KindRef{Kind: "vpc", Version: 1}], disp.maxInfl[converge.KindRef{Kind: "account", Version: 1}]
	disp.mu.Unlock()
	if vpc != 2 {
		t.Errorf("vpc max concurrent %d, want 2 (max_inflight 2)", vpc)
	}
	if acct <= 2 {
		t.Errorf("account max concurrent %d: the limit must be per kind version", acct)
	}
}

func TestLeaseExpiryRedispatches(t *testing.T) {
	store := newMemStore()
	w1 := &fakeWorker{name: "w1", delay: 30 * time.Millisecond}
	disp := newFakeDisp(classicHandler, w1)
	cfg := testConfig()
	cfg.LeaseTTL = 60 * time.Millisecond
	h := start(t, store, disp, cfg)
	h.apply(classicDesired(makeBOM(1, 3), "c1"), classicValidator)
	waitFor(t, 5*time.Second, "account tasks on w1", func() bool {
		for _, tk := range disp.tasks() {
			if tk.Kind == "account" {
				return true
			}
		}
		return false
	})
	disp.vanish("w1")
	disp.addWorker(&fakeWorker{name: "w2"})
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	var expired int
	for _, e := range store.eventsOf("") {
		if strings.Contains(e.Message, "lease expired") {
			expired++
		}
	}
	if expired == 0 {
		t.Errorf("no lease expiry recorded")
	}
	seen := map[string]int{}
	for _, tk := range disp.tasks() {
		if tk.Kind == "account" {
			seen[tk.Key]++
		}
	}
	var redispatched bool
	for _, c := range seen {
		if c > 1 {
			redispatched = true
		}
	}
	if !redispatched {
		t.Errorf("no account task was dispatched twice with the same key: %v", seen)
	}
}

func TestCrashRecoveryNoDuplicates(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1", delay: time.Millisecond})
	h := start(t, store, disp, testConfig())
	bom := makeBOM(3, 6)
	h.apply(classicDesired(bom, "c1"), classicValidator)
	// Some progress must be durable (group commits are asynchronous), and
	// not all of it.
	waitFor(t, 10*time.Second, "some progress stored", func() bool { return len(store.all()) >= 15 })
	store.crash() // nothing more reaches the store: the process "dies" here
	h.stop()
	before := map[converge.ID]string{}
	for _, r := range store.all() {
		before[r.ID()] = r.UID
	}
	if len(before) < 2 {
		t.Fatalf("only %d resources stored before the crash", len(before))
	}
	store.restart()

	h2 := start(t, store, disp, testConfig())
	h2.apply(classicDesired(bom, "c1"), classicValidator)
	h2.waitSettled(scheduler.Converged, 10*time.Second)
	h2.flush()
	all := store.all()
	want := map[converge.ID]bool{"classicbom/org": true}
	ch, _ := compose(mustJSON(bom))
	for _, c := range ch {
		want[converge.NewID(c.Kind, c.Name)] = true
	}
	if got, w := len(all), len(want); got != w {
		t.Errorf("%d resources after restart, want %d", got, w)
	}
	uids := map[string]bool{}
	for _, r := range all {
		if !want[r.ID()] {
			t.Errorf("unexpected resource %s", r.ID())
		}
		if uids[r.UID] {
			t.Errorf("duplicate uid %s", r.UID)
		}
		uids[r.UID] = true
		if u, ok := before[r.ID()]; ok && u != r.UID {
			t.Errorf("%s changed uid across the crash: %s -> %s", r.ID(), u, r.UID)
		}
		if r.Phase != converge.PhaseReady {
			t.Errorf("%s: %s %q", r.ID(), r.Phase, r.Reason)
		}
	}
	if dl := store.deliveryList(); len(dl) != 1 || !dl[0].Done {
		t.Errorf("deliveries %+v, want one done", dl)
	}
}

func TestRecomposeAddUpdatePrune(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	bom := makeBOM(1, 3)
	h.apply(classicDesired(bom, "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	uid1 := store.get("account/fd-01-team-001").UID

	disp.resetLog()
	bom.FDs[0].Teams = []bomTeam{{Name: "team-001"}, {Name: "team-003"}, {Name: "team-004"}}
	h.apply(classicDesired(bom, "c2"), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	for _, id := range []converge.ID{"account/fd-01-team-002", "vpc/fd-01-team-002", "route/fd-01-team-002"} {
		if store.get(id) != nil {
			t.Errorf("%s not pruned", id)
		}
	}
	for _, id := range []converge.ID{"account/fd-01-team-004", "vpc/fd-01-team-004", "route/fd-01-team-004"} {
		if r := store.get(id); r == nil || r.Phase != converge.PhaseReady {
			t.Errorf("%s not created and Ready: %+v", id, r)
		}
	}
	if got := store.get("account/fd-01-team-001").UID; got != uid1 {
		t.Errorf("kept child changed uid")
	}
	ts := reactionsOf(disp.tasks())
	if len(ts) > 10 {
		t.Errorf("%d dispatches for a one-team change, want <= 10: %v", len(ts), ts)
	}
	if got := strings.Count(strings.Join(ts, ","), "compose classicbom/org"); got != 1 {
		t.Errorf("%d composes, want 1 (a pruned child brings no recompose)", got)
	}
	var teardown []string
	for _, x := range ts {
		if strings.HasPrefix(x, "teardown ") {
			teardown = append(teardown, strings.TrimPrefix(x, "teardown "))
		}
		if strings.Contains(x, "team-001") || strings.Contains(x, "team-003") {
			t.Errorf("unchanged team dispatched: %s", x)
		}
	}
	if got, want := strings.Join(teardown, ","), "route/fd-01-team-002,vpc/fd-01-team-002,account/fd-01-team-002"; got != want {
		t.Errorf("teardown order %s, want %s", got, want)
	}
	root := store.get("classicbom/org")
	if got, want := rollupOf(t, root), (converge.Counts{Total: bomSize(1, 3), Ready: bomSize(1, 3)}); got != want {
		t.Errorf("rollup %+v, want %+v", got, want)
	}
	if edges := len(store.edges); edges != 1+3*3 {
		t.Errorf("%d edges stored, want %d", edges, 1+3*3)
	}
}

func TestCascadeDeleteRootOrder(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(2, 3), "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	disp.resetLog()
	if err := h.s.Delete(context.Background(), "classicbom/org"); err != nil {
		t.Fatal(err)
	}
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	pos := map[string]int{}
	var order []string
	for _, tk := range disp.tasks() {
		if tk.Reaction != converge.ReactionTeardown {
			t.Errorf("dispatched %s during teardown", tk.Reaction)
			continue
		}
		id := string(converge.NewID(tk.Kind, tk.Name))
		pos[id] = len(order)
		order = append(order, id)
	}
	if got, want := len(order), bomSize(2, 3)+1; got != want {
		t.Fatalf("%d teardowns, want %d", got, want)
	}
	before := func(a, b string) {
		t.Helper()
		pa, oka := pos[a]
		pb, okb := pos[b]
		if !oka || !okb || pa >= pb {
			t.Errorf("teardown of %s (at %d) must come before %s (at %d)", a, pa, b, pb)
		}
	}
	for _, fd := range []string{"fd-01", "fd-02"} {
		for _, tm := range []string{"team-001", "team-002", "team-003"} {
			n := fd + "-" + tm
			before("route/"+n, "vpc/"+n)
			before("vpc/"+n, "account/"+n)
			before("route/"+n, "tgw/"+fd+"-tgw")
		}
		before("tgw/"+fd+"-tgw", "account/"+fd+"-tgw-host")
	}
	if got, want := order[len(order)-1], "classicbom/org"; got != want {
		t.Errorf("last teardown %s, want %s", got, want)
	}
	if n := len(store.all()); n != 0 {
		t.Errorf("%d resources left", n)
	}
	if n := len(store.edges); n != 0 {
		t.Errorf("%d edges left", n)
	}
	if err := h.s.Delete(context.Background(), "classicbom/org"); !errors.Is(err, converge.ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
}

// A cascade starts its teardowns in key order: the routes (nothing
// consumes them, so they go first) are dispatched sorted, and the rows
// deleted in each batch are neighbours, not keys spread over the whole
// owner index.
func TestCascadeDeleteInKeyOrder(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(5, 40), "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	disp.resetLog()
	if err := h.s.Delete(context.Background(), "classicbom/org"); err != nil {
		t.Fatal(err)
	}
	h.waitSettled(scheduler.Converged, 5*time.Second)
	var routes []string
	for _, tk := range disp.tasks() {
		if tk.Reaction == converge.ReactionTeardown && tk.Kind == "route" {
			routes = append(routes, tk.Name)
		}
	}
	if len(routes) != 200 {
		t.Fatalf("%d route teardowns, want 200", len(routes))
	}
	if !slices.IsSorted(routes) {
		t.Errorf("route teardowns dispatched out of key order: %v", routes[:20])
	}
}

// TestCascadeResumedAfterCrash: a cascade cut by a crash goes on from
// the store, its waiting teardowns loaded packed (TestLoadPacksTeardowns):
// the rest of the tree is deleted in order (cascadeOrder).
func TestCascadeResumedAfterCrash(t *testing.T) {
	store := newMemStore()
	store.check = cascadeOrder
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1", delay: time.Millisecond})
	cfg := testConfig()
	cfg.MaxCommit = 8
	h := start(t, store, disp, cfg)
	h.apply(classicDesired(makeBOM(3, 20), "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 10*time.Second)
	h.flush()
	if err := h.s.Delete(context.Background(), "classicbom/org"); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	store.crashAt = store.commits + 3 // the first deletions go, the rest are cut off
	store.mu.Unlock()
	crashThenRestart(t, store, h)
	if n := len(store.all()); n < 10 {
		t.Fatalf("only %d rows left at the crash: the cascade was not cut mid-way", n)
	}
	h2 := start(t, store, disp, cfg)
	h2.waitSettled(scheduler.Converged, 10*time.Second)
	h2.flush()
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.resources) != 0 {
		t.Errorf("%d rows left after the resumed cascade", len(store.resources))
	}
	if len(store.violations) > 0 {
		t.Errorf("%d commits broke the order, first: %s", len(store.violations), store.violations[0])
	}
}

// cascadeOrder is a memStore check for cascades: no row is stored whose
// owner is deleted, no edge whose producer is.
func cascadeOrder(m *memStore) string {
	for id, r := range m.resources {
		if r.Owner != "" && m.resources[r.Owner] == nil {
			return fmt.Sprintf("%s stored, its owner %s deleted", id, r.Owner)
		}
	}
	for k := range m.edges {
		if m.resources[k[0]] != nil && m.resources[k[1]] == nil {
			return fmt.Sprintf("edge %s -> %s stored, its producer deleted", k[0], k[1])
		}
	}
	return ""
}

// convergeThenDelete converges the classic BOM of 3 domains and 20 teams
// on h, deletes its root and waits for the cascade to be durable.
func convergeThenDelete(t *testing.T, h *harness) {
	t.Helper()
	h.apply(classicDesired(makeBOM(3, 20), "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 10*time.Second)
	if err := h.s.Delete(context.Background(), "classicbom/org"); err != nil {
		t.Fatal(err)
	}
	h.waitSettled(scheduler.Converged, 10*time.Second)
	h.flush()
}

// sizedStore is a memStore that asks for at most rows rows a commit
// (scheduler.CommitSizer), as the bbolt store does once it is big.
type sizedStore struct {
	*memStore
	rows int
}

func (s sizedStore) CommitRows() int { return s.rows }

// TestCommitsSizedByStore: a store's bound on a commit's rows
// (CommitSizer) holds below Config.MaxCommit, for rows put and rows
// deleted, and the graph converges and is torn down all the same.
func TestCommitsSizedByStore(t *testing.T) {
	mem := newMemStore()
	cfg := testConfig() // MaxCommit as by default, far above the store's 5
	convergeThenDelete(t, start(t, sizedStore{mem, 5}, newFakeDisp(classicHandler, &fakeWorker{name: "w1"}), cfg))
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if mem.maxRows > 5 || mem.maxDeleted > 5 || mem.maxDeleted == 0 {
		t.Errorf("a commit held %d rows and one deleted %d, want 1 to the store's 5", mem.maxRows, mem.maxDeleted)
	}
	if len(mem.resources) != 0 {
		t.Errorf("%d rows left after the cascade", len(mem.resources))
	}
}

// TestCascadeDeleteCommitsBounded: a cascade's row deletions go at most
// MaxCommit a commit, oldest first, so no commit leaves a row whose owner
// is gone or an edge whose producer is gone, and every row goes in the
// end.
func TestCascadeDeleteCommitsBounded(t *testing.T) {
	store := newMemStore()
	store.check = cascadeOrder
	cfg := testConfig()
	cfg.MaxCommit = 8
	convergeThenDelete(t, start(t, store, newFakeDisp(classicHandler, &fakeWorker{name: "w1"}), cfg))
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.maxDeleted > cfg.MaxCommit || store.maxDeleted == 0 {
		t.Errorf("a commit deleted %d rows, want 1 to MaxCommit %d", store.maxDeleted, cfg.MaxCommit)
	}
	if len(store.violations) > 0 {
		t.Errorf("%d commits broke the order, first: %s", len(store.violations), store.violations[0])
	}
	if len(store.resources) != 0 {
		t.Errorf("%d rows left after the cascade", len(store.resources))
	}
}

// A composed child deleted by an operator while its owner still emits it
// comes back at once: the owner recomposes after the teardown, without
// waiting for a resync (none is configured here).
func TestDeleteChildIsRecomposed(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	d := classicDesired(makeBOM(1, 2), "c1")
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	oldUID := store.get("account/fd-01-team-001").UID
	rootGen := store.get("classicbom/org").Generation
	disp.resetLog()
	if err := h.s.Delete(context.Background(), "account/fd-01-team-001"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the deleted team to come back", func() bool {
		h.flush()
		r := store.get("route/fd-01-team-001")
		return r != nil && r.Phase == converge.PhaseReady
	})
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	var got []string
	for _, x := range reactionsOf(disp.tasks()) {
		if !strings.HasPrefix(x, "react ") {
			got = append(got, x)
		}
	}
	want := "teardown route/fd-01-team-001,teardown vpc/fd-01-team-001,teardown account/fd-01-team-001," +
		"compose classicbom/org,reconcile account/fd-01-team-001,reconcile vpc/fd-01-team-001,reconcile route/fd-01-team-001"
	if strings.Join(got, ",") != want {
		t.Errorf("dispatched %v,\nwant %s", got, want)
	}
	if r := store.get("account/fd-01-team-001"); r.UID == oldUID {
		t.Errorf("re-created account kept the old uid")
	}
	root := store.get("classicbom/org")
	if got, want := rollupOf(t, root), (converge.Counts{Total: bomSize(1, 2), Ready: bomSize(1, 2)}); root.Phase != converge.PhaseReady || got != want {
		t.Errorf("root %s rollup %+v, want Ready %+v", root.Phase, got, want)
	}
	if root.Generation != rootGen+1 {
		t.Errorf("root generation %d, want %d (one recompose)", root.Generation, rootGen+1)
	}
	if err := scheduler.CheckInvariants(h.s); err != nil {
		t.Error(err)
	}
}

// The recompose owed for a deleted child survives a restart in the middle
// of the teardown: the store does not say the child was deleted by an
// operator, but a child torn down under a live owner is recomposed.
func TestDeleteChildRecomposedAfterRestart(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(1, 2), "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	// The vpc's teardown never answers: the account waits behind it.
	disp.setHook(func(tk *converge.Task) (*converge.Result, bool) {
		return nil, tk.Reaction == converge.ReactionTeardown && tk.Kind == "vpc"
	})
	if err := h.s.Delete(context.Background(), "account/fd-01-team-001"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the route to be torn down", func() bool {
		h.flush()
		return store.get("route/fd-01-team-001") == nil
	})
	h.stop()
	disp.setHook(nil)
	h2 := start(t, store, disp, testConfig())
	waitFor(t, 5*time.Second, "the deleted team to come back", func() bool {
		h2.flush()
		r := store.get("route/fd-01-team-001")
		return r != nil && r.Phase == converge.PhaseReady
	})
	h2.waitSettled(scheduler.Converged, 5*time.Second)
	h2.flush()
	if root := store.get("classicbom/org"); rollupOf(t, root).Total != bomSize(1, 2) {
		t.Errorf("root rollup %+v, want total %d", rollupOf(t, root), bomSize(1, 2))
	}
}

func TestStuckTeardownNamesChild(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	disp.setHook(func(tk *converge.Task) (*converge.Result, bool) {
		if tk.Reaction == converge.ReactionTeardown && tk.Kind == "route" && tk.Name == "fd-01-team-001" {
			return &converge.Result{Outcome: converge.OutcomeTransient, Message: "api timeout"}, false
		}
		return nil, false
	})
	now := time.Now()
	var clockMu sync.Mutex
	cfg := testConfig()
	cfg.LeaseTTL = time.Hour // the fake clock runs 1000x fast
	cfg.Now = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	advance := func(d time.Duration) { clockMu.Lock(); now = now.Add(d); clockMu.Unlock() }
	go func() {
		for i := 0; i < 400; i++ {
			time.Sleep(time.Millisecond)
			advance(time.Second)
		}
	}()
	h := start(t, store, disp, cfg)
	h.apply(classicDesired(makeBOM(1, 2), "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	if err := h.s.Delete(context.Background(), "account/fd-01-team-001"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "a stuck reason on the vpc", func() bool {
		h.flush()
		r := store.get("vpc/fd-01-team-001")
		return r != nil && strings.HasPrefix(r.Reason, "waiting for teardown of route/fd-01-team-001 (stuck ") && !strings.Contains(r.Reason, "stuck 0s")
	})
	r := store.get("vpc/fd-01-team-001")
	if r.Phase != converge.PhaseDeleting {
		t.Errorf("vpc phase %s, want Deleting", r.Phase)
	}
	if a := store.get("account/fd-01-team-001"); a == nil || a.Phase != converge.PhaseDeleting {
		t.Errorf("account must wait in Deleting: %+v", a)
	}
	if rt := store.get("route/fd-01-team-001"); rt == nil || !strings.Contains(rt.Reason, "api timeout") {
		t.Errorf("route reason: %+v", rt)
	}
	t.Logf("vpc reason: %s", r.Reason)
	if p := h.s.Progress(); p.Settled != scheduler.Working {
		t.Errorf("settled %v while a teardown retries, want working", p.Settled)
	}
}

// In a synctest bubble, so "not fired again" is checked with every
// goroutine idle rather than after a sleep.
func TestReactorOnceAcrossCrashAndVanishedWorker(t *testing.T) {
	synctest.Test(t, reactorOnceAcrossCrashAndVanishedWorker)
}

func reactorOnceAcrossCrashAndVanishedWorker(t *testing.T) {
	store := newMemStore()
	rw1 := &fakeWorker{name: "rw1", delay: 20 * time.Millisecond,
		serves: map[converge.KindRef][]string{{Kind: "statussink", Version: 1}: {"react"}}}
	main := &fakeWorker{name: "w1", serves: v1Only("w1").serves}
	delete(main.serves, converge.KindRef{Kind: "statussink", Version: 1})
	disp := newFakeDisp(classicHandler, main, rw1)
	d := classicDesired(makeBOM(1, 2), "c1")
	for _, k := range d.Kinds {
		if k.Name == "statussink" {
			k.TaskDeadline = 40 * time.Millisecond
		}
	}
	h := start(t, store, disp, testConfig())
	h.apply(d, classicValidator)
	waitFor(t, 5*time.Second, "a react task", func() bool {
		for _, tk := range disp.tasks() {
			if tk.Reaction == "react" {
				return true
			}
		}
		return false
	})
	disp.vanish("rw1") // the reactor worker dies mid-react
	disp.addWorker(&fakeWorker{name: "rw2", serves: rw1.serves})
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	dl := store.deliveryList()
	if len(dl) != 1 || !dl[0].Done {
		t.Fatalf("deliveries %+v, want one done", dl)
	}
	if dl[0].Attempts < 1 {
		t.Errorf("delivery attempts %d, want >= 1 (lease expired once)", dl[0].Attempts)
	}
	var reacts []string
	for _, tk := range disp.tasks() {
		if tk.Reaction == "react" {
			reacts = append(reacts, tk.Key)
			if tk.Subject == nil || tk.Subject.Resource != "classicbom/org" || tk.Subject.Transition != "synced" {
				t.Errorf("react subject %+v", tk.Subject)
			}
		}
	}
	if len(reacts) != 2 || reacts[0] != reacts[1] {
		t.Errorf("react tasks %v, want the same key twice (vanished, then redelivered)", reacts)
	}

	// Crash and restart: the synced transition is not fired again.
	store.crash()
	h.stop()
	store.restart()
	disp.resetLog()
	h2 := start(t, store, disp, testConfig())
	h2.apply(d, classicValidator)
	h2.waitSettled(scheduler.Converged, 5*time.Second)
	time.Sleep(time.Minute) // past every flush, backoff and lease of the test config
	synctest.Wait()
	for _, tk := range disp.tasks() {
		if tk.Reaction == "react" {
			t.Errorf("reactor fired again after restart: %s", tk.Key)
		}
	}
	if got := len(store.deliveryList()); got != 1 {
		t.Errorf("%d deliveries after restart, want 1", got)
	}
}

func TestReactorDeliveryOwedSurvivesCrash(t *testing.T) {
	store := newMemStore()
	main := &fakeWorker{name: "w1", serves: v1Only("w1").serves}
	delete(main.serves, converge.KindRef{Kind: "statussink", Version: 1})
	disp := newFakeDisp(classicHandler, main)
	h := start(t, store, disp, testConfig())
	d := classicDesired(makeBOM(1, 1), "c1")
	h.apply(d, classicValidator)
	// No reactor worker: the delivery is owed and parked.
	p := h.waitSettled(scheduler.Stuck, 5*time.Second)
	if p.Deliveries != 1 || p.Counts.Ready != p.Counts.Total {
		t.Fatalf("progress %+v, want 1 owed delivery with everything Ready", p)
	}
	h.flush()
	h.stop()
	disp2 := newFakeDisp(classicHandler, main, &fakeWorker{name: "rw", serves: map[converge.KindRef][]string{{Kind: "statussink", Version: 1}: {"react"}}})
	h2 := start(t, store, disp2, testConfig())
	h2.waitSettled(scheduler.Converged, 5*time.Second)
	h2.flush()
	var reacts int
	for _, tk := range disp2.tasks() {
		if tk.Reaction == "react" {
			reacts++
		}
		if tk.Reaction != "react" {
			t.Errorf("restart dispatched %s %s/%s: nothing else was owed", tk.Reaction, tk.Kind, tk.Name)
		}
	}
	if reacts != 1 {
		t.Errorf("%d react tasks after restart, want 1", reacts)
	}
	if dl := store.deliveryList(); len(dl) != 1 || !dl[0].Done {
		t.Errorf("deliveries %+v", dl)
	}
}

func TestVersionFlipKeepsUID(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	d := &converge.Desired{Kinds: classicKinds(), Resources: []*converge.Resource{
		sampleVPC("sample", 1, `{"cidr":"10.0.0.0/16","account_id":"123456789012"}`)}}
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	v1 := store.get("vpc/sample")

	// An incomplete v2 spec: the flip is refused, the resource stays v1.
	d.Resources = []*converge.Resource{sampleVPC("sample", 2, `{"cidr":"10.0.0.0/16","account_id":"123456789012"}`)}
	plan := h.apply(d, classicValidator)
	if len(plan.Flip) != 0 || len(plan.Refused) != 1 || !strings.Contains(plan.Refused[0].Reason, "spec.region") {
		t.Fatalf("plan %+v, want the flip refused naming spec.region", plan)
	}
	h.flush()
	if r := store.get("vpc/sample"); r.KindVersion != 1 || r.Generation != v1.Generation {
		t.Errorf("after a refused flip: v%d gen %d", r.KindVersion, r.Generation)
	}
	var refused bool
	for _, e := range store.eventsOf("vpc/sample") {
		if e.Type == "FlipRefused" && strings.Contains(e.Message, "spec.region") {
			refused = true
		}
	}
	if !refused {
		t.Errorf("no FlipRefused event")
	}

	d.Resources = []*converge.Resource{sampleVPC("sample", 2, `{"cidr":"10.0.0.0/16","account_id":"123456789012","region":"us-west-2"}`)}
	disp.resetLog()
	plan = h.apply(d, classicValidator)
	if len(plan.Flip) != 1 || plan.Flip[0].From.Version != 1 || plan.Flip[0].To.Version != 2 {
		t.Fatalf("plan %+v, want one flip v1 -> v2", plan)
	}
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	r := store.get("vpc/sample")
	if r.UID != v1.UID || r.KindVersion != 2 || r.Generation != v1.Generation+1 {
		t.Errorf("flipped: uid %s (was %s) v%d gen %d", r.UID, v1.UID, r.KindVersion, r.Generation)
	}
	if got := statusField(t, r.Status, "region"); got != "us-west-2" {
		t.Errorf("status.region %v: the v2 code path did not run", got)
	}
	for _, tk := range disp.tasks() {
		if tk.KindVersion != 2 {
			t.Errorf("task after the flip at v%d", tk.KindVersion)
		}
	}
}

func TestVerbDo(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	d := &converge.Desired{Kinds: classicKinds(), Resources: []*converge.Resource{
		sampleVPC("sample", 1, `{"cidr":"10.0.0.0/16","account_id":"123456789012"}`)}}
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	res, err := h.s.Do(context.Background(), "vpc/sample", "enable_flow_logs", map[string]string{"bucket": "logs"})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if res.Outcome != converge.OutcomeOK {
		t.Errorf("outcome %v", res.Outcome)
	}
	h.flush()
	var ev string
	for _, e := range store.eventsOf("vpc/sample") {
		if e.Type == "Verb" {
			ev = e.Message
		}
	}
	if want := "verb enable_flow_logs: ok: bucket logs"; ev != want {
		t.Errorf("verb event %q, want %q", ev, want)
	}
	_, err = h.s.Do(context.Background(), "vpc/sample", "rotate_keys", nil)
	if !errors.Is(err, scheduler.ErrUndeclaredVerb) || !strings.Contains(err.Error(), "enable_flow_logs") {
		t.Errorf("undeclared verb: %v", err)
	}
	if _, err := h.s.Do(context.Background(), "vpc/nope", "enable_flow_logs", nil); !errors.Is(err, converge.ErrNotFound) {
		t.Errorf("unknown resource: %v", err)
	}
}

func TestConfigChangeReruns(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	cfgDoc := func(bucket string) []*converge.ProviderConfig {
		return []*converge.ProviderConfig{
			{Name: "vpc-v1-default", Kind: "vpc", KindVersion: 1, IsDefault: true, Config: json.RawMessage(`{"bucket":"` + bucket + `"}`)},
			{Name: "vpc-v1-payments", Kind: "vpc", KindVersion: 1, Config: json.RawMessage(`{"bucket":"pay"}`)},
		}
	}
	custom := sampleVPC("custom", 1, `{"cidr":"10.0.0.0/16","account_id":"123456789012"}`)
	custom.ProviderConfigRef = "vpc-v1-payments"
	d := &converge.Desired{Kinds: classicKinds(), Configs: cfgDoc("a"), Resources: []*converge.Resource{
		sampleVPC("sample", 1, `{"cidr":"10.0.0.0/16","account_id":"123456789012"}`), custom}}
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	for _, tk := range disp.tasks() {
		want := `{"bucket":"a"}`
		if tk.Name == "custom" {
			want = `{"bucket":"pay"}`
		}
		if string(tk.Config) != want {
			t.Errorf("%s got config %s, want %s", tk.Name, tk.Config, want)
		}
	}
	disp.resetLog()
	d.Configs = cfgDoc("b")
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	ts := disp.tasks()
	if len(ts) != 1 || ts[0].Name != "sample" || string(ts[0].Config) != `{"bucket":"b"}` {
		t.Errorf("after the default config changed: %+v, want one reconcile of sample with bucket b", reactionsOf(ts))
	}
}

func TestBadChildFailsParent(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	disp.setHook(func(tk *converge.Task) (*converge.Result, bool) {
		if tk.Reaction != converge.ReactionCompose {
			return nil, false
		}
		res := classicHandler(tk)
		for i := range res.Children {
			if res.Children[i].Kind == "vpc" && res.Children[i].Name == "fd-01-team-002" {
				res.Children[i].Spec = json.RawMessage(`{"tags":{}}`)
			}
		}
		return res, false
	})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(1, 3), "c1"), classicValidator)
	h.waitSettled(scheduler.Stuck, 5*time.Second)
	h.flush()
	root := store.get("classicbom/org")
	if want := "permanent: vpc/fd-01-team-002: spec.cidr: field is required but not present"; root.Reason != want || root.Phase != converge.PhaseFailed {
		t.Errorf("root %s %q, want Failed %q", root.Phase, root.Reason, want)
	}
	if n := len(store.all()); n != 1 {
		t.Errorf("%d resources stored, want only the root: nothing of a bad composition is applied", n)
	}
}

func TestCollidingChildRefused(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	d := classicDesired(makeBOM(1, 1), "c1")
	// A git resource with the name a child would take.
	d.Resources = append(d.Resources, sampleVPC("fd-01-team-001", 1, `{"cidr":"10.0.0.0/16","account_id":"123456789012"}`))
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Stuck, 5*time.Second)
	probs := h.s.Problems()
	if len(probs) == 0 || probs[0].ID != "classicbom/org" || !strings.Contains(probs[0].Reason, "vpc/fd-01-team-001: already exists, owned by git") {
		t.Errorf("problems %+v", probs)
	}
}

func TestGitResourceRemovedIsTornDown(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	d := &converge.Desired{Kinds: classicKinds(), Resources: []*converge.Resource{
		sampleVPC("a", 1, `{"cidr":"10.0.0.0/16","account_id":"123456789012"}`),
		sampleVPC("b", 1, `{"cidr":"10.0.0.0/16","account_id":"123456789012"}`)}}
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	disp.resetLog()
	d.Resources = d.Resources[:1]
	plan := h.apply(d, classicValidator)
	if len(plan.Delete) != 1 || plan.Delete[0].ID != "vpc/b" {
		t.Fatalf("plan %+v", plan)
	}
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	if store.get("vpc/b") != nil {
		t.Errorf("vpc/b not deleted")
	}
	if got := reactionsOf(disp.tasks()); strings.Join(got, ",") != "teardown vpc/b" {
		t.Errorf("dispatched %v", got)
	}
}

func TestDiffIsPure(t *testing.T) {
	snap := &converge.Snapshot{Resources: []*converge.Resource{
		{Kind: "vpc", KindVersion: 1, Name: "same", Origin: converge.OriginGit, Declared: json.RawMessage(`{"a":1,"b":2}`)},
		{Kind: "vpc", KindVersion: 1, Name: "changed", Origin: converge.OriginGit, Declared: json.RawMessage(`{"a":1,"b":2}`)},
		{Kind: "vpc", KindVersion: 1, Name: "flipped", Origin: converge.OriginGit, Declared: json.RawMessage(`{"a":1}`)},
		{Kind: "vpc", KindVersion: 1, Name: "gone", Origin: converge.OriginGit},
		{Kind: "vpc", KindVersion: 1, Name: "child", Origin: converge.OriginComposed, Owner: "classicbom/x"},
	}}
	d := &converge.Desired{Resources: []*converge.Resource{
		{Kind: "vpc", KindVersion: 1, Name: "same", Declared: json.RawMessage(`{"b": 2, "a": 1}`)},
		{Kind: "vpc", KindVersion: 1, Name: "changed", Declared: json.RawMessage(`{"a":1,"b":3,"c":4}`)},
		{Kind: "vpc", KindVersion: 2, Name: "flipped", Declared: json.RawMessage(`{"a":1,"region":"x"}`)},
		{Kind: "vpc", KindVersion: 1, Name: "new"},
		{Kind: "vpc", KindVersion: 1, Name: "child"},
	}}
	p := scheduler.Diff(snap, d)
	tests := []struct {
		name  string
		items []scheduler.PlanItem
		want  string
	}{
		{name: "create", items: p.Create, want: "vpc/new"},
		{name: "update", items: p.Update, want: "vpc/changed[b c]"},
		{name: "flip", items: p.Flip, want: "vpc/flipped vpc/v1->vpc/v2[region]"},
		{name: "delete", items: p.Delete, want: "vpc/gone"},
		{name: "refused", items: p.Refused, want: "vpc/child"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var parts []string
			for _, it := range tt.items {
				s := string(it.ID)
				if it.From.Kind != "" && it.To.Kind != "" && it.From != it.To {
					s += " " + it.From.String() + "->" + it.To.String()
				}
				if len(it.Fields) > 0 {
					s += "[" + strings.Join(it.Fields, " ") + "]"
				}
				parts = append(parts, s)
			}
			if got := strings.Join(parts, ","); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	if len(snap.Resources) != 5 || snap.Resources[3].Deleting {
		t.Errorf("Diff changed its input")
	}

	snap.Kinds = []*converge.Kind{leafKind("vpc", 1)}
	snap.Bindings = []*converge.Binding{{Name: "old", Kind: "vpc", Transition: "synced", Reactor: "statussink"}}
	snap.Configs = []*converge.ProviderConfig{{Name: "c", Kind: "vpc", KindVersion: 1, Config: json.RawMessage(`{"a":1}`)}}
	v1 := leafKind("vpc", 1, "enable_flow_logs")
	d.Kinds = []*converge.Kind{v1, leafKind("vpc", 2)}
	d.Configs = []*converge.ProviderConfig{{Name: "c", Kind: "vpc", KindVersion: 1, Config: json.RawMessage(`{"a":1}`)}}
	got := strings.Join(scheduler.Diff(snap, d).Definitions, "; ")
	if want := "binding old removed; kind vpc/v1 changed; kind vpc/v2 added"; got != want {
		t.Errorf("definitions %q, want %q", got, want)
	}
}

func TestCrashMidTeardownResumesWithoutRecompose(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1", delay: 2 * time.Millisecond, cap: 2})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(2, 4), "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	total := len(store.all())
	if err := h.s.Delete(context.Background(), "classicbom/org"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "part of the tree to be gone", func() bool {
		h.flush()
		return len(store.all()) < total-4
	})
	store.crash()
	h.stop()
	store.restart()
	left := store.all()
	if len(left) == 0 {
		t.Fatalf("everything was gone before the crash")
	}
	for _, r := range left {
		if !r.Deleting {
			t.Errorf("%s lost its Deleting mark", r.ID())
		}
	}
	disp.resetLog()
	h2 := start(t, store, disp, testConfig())
	h2.waitSettled(scheduler.Converged, 5*time.Second)
	h2.flush()
	if n := len(store.all()); n != 0 {
		t.Errorf("%d resources left after resuming the teardown", n)
	}
	var last string
	for _, tk := range disp.tasks() {
		if tk.Reaction != converge.ReactionTeardown {
			t.Errorf("resumed teardown dispatched %s %s/%s", tk.Reaction, tk.Kind, tk.Name)
		}
		last = string(converge.NewID(tk.Kind, tk.Name))
	}
	if last != "classicbom/org" {
		t.Errorf("last teardown %s, want the root", last)
	}
}

func TestCommitErrorIsRetried(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1", delay: time.Millisecond})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(1, 2), "c1"), classicValidator)
	store.mu.Lock()
	store.failNext = 3
	store.mu.Unlock()
	h.waitSettled(scheduler.Converged, 5*time.Second)
	waitFor(t, 5*time.Second, "every row to be committed", func() bool {
		_ = h.s.Flush(context.Background())
		for _, r := range store.all() {
			if r.Phase != converge.PhaseReady {
				return false
			}
		}
		return len(store.all()) == bomSize(1, 2)+1
	})
}

func TestNestedCompositionRollsUp(t *testing.T) {
	store := newMemStore()
	// A portfolio composes two classicboms, each of which composes leaves.
	h0 := func(tk *converge.Task) *converge.Result {
		if tk.Kind == "portfolio" {
			return &converge.Result{Outcome: converge.OutcomeOK, Children: []converge.Child{
				{Kind: "classicbom", KindVersion: 1, Name: "a", Spec: mustJSON(makeBOM(1, 2))},
				{Kind: "classicbom", KindVersion: 1, Name: "b", Spec: mustJSON(makeBOM(2, 1))},
			}}
		}
		res := classicHandler(tk)
		if tk.Kind == "classicbom" && tk.Reaction == converge.ReactionCompose {
			// prefix children names with the bom's name: unique across boms
			for i := range res.Children {
				res.Children[i].Name = tk.Name + "-" + res.Children[i].Name
			}
			for i := range res.Edges {
				e := &res.Edges[i]
				e.Consumer = converge.NewID(e.Consumer.Kind(), tk.Name+"-"+e.Consumer.Name())
				e.Producer = converge.NewID(e.Producer.Kind(), tk.Name+"-"+e.Producer.Name())
			}
		}
		return res
	}
	gate := make(chan struct{})
	disp := newFakeDisp(func(tk *converge.Task) *converge.Result {
		if tk.Kind == "route" && tk.Name == "b-fd-02-team-001" {
			<-gate
		}
		return h0(tk)
	}, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	d := &converge.Desired{Kinds: append(classicKinds(), &converge.Kind{Name: "portfolio", Version: 1, Reactions: []string{"compose"}}),
		Resources: []*converge.Resource{{Kind: "portfolio", KindVersion: 1, Name: "p", Origin: converge.OriginGit, Declared: json.RawMessage(`{}`)}}}
	h.apply(d, classicValidator)
	total := 2 + bomSize(1, 2) + bomSize(2, 1)
	waitFor(t, 5*time.Second, "all but the gated route to be Ready", func() bool {
		return h.s.Progress().Counts.Ready == total-2 // the route and bom b wait
	})
	h.flush()
	p := store.get("portfolio/p")
	if p.Phase != converge.PhasePending {
		t.Errorf("portfolio %s, want Pending while a grandchild runs", p.Phase)
	}
	if got, want := rollupOf(t, p), (converge.Counts{Total: total, Ready: total - 2, Running: 1, Pending: 1}); got != want {
		t.Errorf("portfolio rollup %+v, want %+v", got, want)
	}
	if got, want := p.Reason, itoaT(total-2)+"/"+itoaT(total)+" children ready"; got != want {
		t.Errorf("portfolio reason %q, want %q", got, want)
	}
	close(gate)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	if got, want := rollupOf(t, store.get("portfolio/p")), (converge.Counts{Total: total, Ready: total}); got != want {
		t.Errorf("portfolio rollup %+v, want %+v", got, want)
	}
	if got, want := rollupOf(t, store.get("classicbom/b")).Total, bomSize(2, 1); got != want {
		t.Errorf("bom b rollup total %d, want %d", got, want)
	}
}

func TestReactorFailedAndDeletedTransitions(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	disp.setHook(func(tk *converge.Task) (*converge.Result, bool) {
		if tk.Kind == "vpc" && tk.Name == "bad" && tk.Reaction == converge.ReactionReconcile {
			return &converge.Result{Outcome: converge.OutcomePermanent, Message: "no capacity"}, false
		}
		return nil, false
	})
	h := start(t, store, disp, testConfig())
	d := &converge.Desired{Kinds: classicKinds(),
		Configs: []*converge.ProviderConfig{{Name: "sink", Kind: "statussink", KindVersion: 1, IsDefault: true, Config: json.RawMessage(`{}`)}},
		Bindings: []*converge.Binding{
			{Name: "vpc-failed", Kind: "vpc", Transition: "failed", Reactor: "statussink"},
			{Name: "vpc-deleted", Kind: "vpc", Transition: "deleted", Reactor: "statussink", ReactorVersion: 1},
		},
		Resources: []*converge.Resource{
			sampleVPC("bad", 1, `{"cidr":"10.0.0.0/16","account_id":"123456789012"}`),
			sampleVPC("good", 1, `{"cidr":"10.0.0.0/16","account_id":"123456789012"}`),
		}}
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Stuck, 5*time.Second)
	d.Resources = d.Resources[:1]
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Stuck, 5*time.Second)
	h.flush()
	var fired []string
	for _, tk := range disp.tasks() {
		if tk.Reaction == converge.ReactionReact {
			fired = append(fired, tk.Name+" "+string(tk.Subject.Resource)+" "+tk.Subject.Transition)
		}
	}
	sortStrings(fired)
	if want := "vpc-deleted vpc/good deleted,vpc-failed vpc/bad failed"; strings.Join(fired, ",") != want {
		t.Errorf("reactors fired %v, want %s", fired, want)
	}
	// The deleted subject's delivery is done and goes (retention); the
	// failed one stays, the dedup of vpc/bad's generation.
	var got []string
	for _, dl := range store.deliveryList() {
		if !dl.Done {
			t.Errorf("delivery %s not done", dl.Key)
		}
		got = append(got, dl.Binding+" "+string(dl.Subject.Resource)+" "+dl.Subject.Transition)
	}
	if want := "vpc-failed vpc/bad failed"; strings.Join(got, ",") != want {
		t.Errorf("deliveries %v, want %s", got, want)
	}
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func TestRemovedKindStaysUntilItsResourcesAreGone(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	d := &converge.Desired{Kinds: classicKinds(), Resources: []*converge.Resource{
		sampleVPC("a", 1, `{"cidr":"10.0.0.0/16","account_id":"123456789012"}`)}}
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	disp.resetLog()
	gate := make(chan struct{})
	disp.setHook(func(tk *converge.Task) (*converge.Result, bool) {
		if tk.Reaction == converge.ReactionTeardown {
			<-gate
		}
		return nil, false
	})
	var kinds []*converge.Kind
	for _, k := range classicKinds() {
		if k.Name != "vpc" || k.Version != 1 {
			kinds = append(kinds, k)
		}
	}
	h.apply(&converge.Desired{Kinds: kinds}, classicValidator)
	h.flush()
	store.mu.Lock()
	_, kept := store.kinds[converge.KindRef{Kind: "vpc", Version: 1}]
	store.mu.Unlock()
	if !kept {
		t.Errorf("vpc/v1 dropped while vpc/a is still being torn down")
	}
	close(gate)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	store.mu.Lock()
	_, kept = store.kinds[converge.KindRef{Kind: "vpc", Version: 1}]
	store.mu.Unlock()
	if kept {
		t.Errorf("vpc/v1 kept after its last resource is gone")
	}
	if got := reactionsOf(disp.tasks()); strings.Join(got, ",") != "teardown vpc/a" {
		t.Errorf("dispatched %v: the finalizer of a removed kind must still run", got)
	}
}

func TestFullWorkerDoesNotSpin(t *testing.T) {
	store := newMemStore()
	w := &fakeWorker{name: "w1", cap: 1, delay: time.Millisecond}
	disp := newFakeDisp(classicHandler, w)
	h := start(t, store, disp, testConfig())
	d := &converge.Desired{Kinds: classicKinds()}
	for i := 0; i < 20; i++ {
		d.Resources = append(d.Resources, &converge.Resource{Kind: "account", KindVersion: 1, Name: "a" + itoaT(i),
			Origin: converge.OriginGit, Declared: json.RawMessage(`{}`)})
	}
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Converged, 10*time.Second)
	disp.mu.Lock()
	refused := disp.refused
	disp.mu.Unlock()
	// At most one refusal per freed slot (each result signals Changed).
	if refused > 2*20 {
		t.Errorf("%d refused dispatches for 20 tasks on a 1-slot worker: spinning", refused)
	}
}

func TestPermanentConsumerRecoversWhenFlowedValueChanges(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	disp.setHook(func(tk *converge.Task) (*converge.Result, bool) {
		// The first account of team-001 forgets its account_id.
		if tk.Kind == "account" && tk.Name == "fd-01-team-001" && !strings.Contains(string(tk.Spec), "rev") {
			return &converge.Result{Outcome: converge.OutcomeOK, Status: json.RawMessage(`{}`)}, false
		}
		return nil, false
	})
	h := start(t, store, disp, testConfig())
	bom := makeBOM(1, 2)
	h.apply(classicDesired(bom, "c1"), classicValidator)
	h.waitSettled(scheduler.Stuck, 5*time.Second)
	if probs := h.s.Problems(); len(probs) == 0 || probs[0].ID != "vpc/fd-01-team-001" || !probs[0].Permanent {
		t.Fatalf("problems %+v, want vpc/fd-01-team-001 failed permanently", probs)
	}
	bom.FDs[0].Teams[0].Rev = "2"
	h.apply(classicDesired(bom, "c2"), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	if got := statusField(t, store.get("vpc/fd-01-team-001").Spec, "account_id"); got != "acct-fd-01-team-001-2" {
		t.Errorf("vpc spec account_id %v", got)
	}
}

func TestResyncWritesNothingWithoutDrift(t *testing.T) {
	store := newMemStore()
	var mu sync.Mutex
	drift := ""
	disp := newFakeDisp(func(tk *converge.Task) *converge.Result {
		res := classicHandler(tk)
		mu.Lock()
		defer mu.Unlock()
		if tk.Kind == "account" && drift != "" {
			res.Status = mustJSON(map[string]string{"account_id": drift})
		}
		return res
	}, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	kinds := classicKinds()
	for _, k := range kinds {
		if k.Name == "account" {
			k.ResyncInterval = 5 * time.Millisecond
		}
	}
	d := classicDesired(makeBOM(1, 1), "c1")
	d.Kinds = kinds
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	store.mu.Lock()
	puts := store.putsByID["account/fd-01-team-001"]
	store.mu.Unlock()
	waitFor(t, 5*time.Second, "resyncs", func() bool {
		n := 0
		for _, tk := range disp.tasks() {
			if tk.Kind == "account" && tk.Name == "fd-01-team-001" {
				n++
			}
		}
		return n >= 4
	})
	h.flush()
	store.mu.Lock()
	after := store.putsByID["account/fd-01-team-001"]
	store.mu.Unlock()
	if after != puts {
		t.Errorf("resyncs without drift wrote the account %d more times", after-puts)
	}
	if r := store.get("account/fd-01-team-001"); r.Generation != 1 {
		t.Errorf("account generation %d after resyncs, want 1", r.Generation)
	}

	// Drift: the account's id changed out of band; the resync sees it and
	// its consumer vpc runs again with the new value.
	mu.Lock()
	drift = "acct-drifted"
	mu.Unlock()
	waitFor(t, 5*time.Second, "the vpc to follow the drifted account id", func() bool {
		h.flush()
		v := store.get("vpc/fd-01-team-001")
		return v.Phase == converge.PhaseReady && statusField(t, v.Status, "account_id") == "acct-drifted"
	})
	if v := store.get("vpc/fd-01-team-001"); v.Generation != 2 {
		t.Errorf("vpc generation %d, want 2", v.Generation)
	}
}

// convergedWithRouteTeardownsGated converges the classic BOM of one
// domain and two teams (revision c1) on an engine whose route teardowns
// wait until gate is closed.
func convergedWithRouteTeardownsGated(t *testing.T) (h *harness, store *memStore, bom bomSpec, gate chan struct{}) {
	t.Helper()
	store = newMemStore()
	gate = make(chan struct{})
	disp := newFakeDisp(func(tk *converge.Task) *converge.Result {
		if tk.Reaction == converge.ReactionTeardown && tk.Kind == "route" {
			<-gate
		}
		return classicHandler(tk)
	}, &fakeWorker{name: "w1"})
	h = start(t, store, disp, testConfig())
	bom = makeBOM(1, 2)
	h.apply(classicDesired(bom, "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	return h, store, bom, gate
}

func TestChildReemittedDuringTeardownComesBack(t *testing.T) {
	h, store, bom, gate := convergedWithRouteTeardownsGated(t)
	if err := h.s.Delete(context.Background(), "account/fd-01-team-001"); err != nil {
		t.Fatal(err)
	}
	// While the route's teardown hangs, the BOM changes: the recompose
	// still emits the team being torn down.
	bom.FDs[0].Teams[1].Rev = "2"
	h.apply(classicDesired(bom, "c2"), classicValidator)
	waitFor(t, 5*time.Second, "the recompose", func() bool {
		for _, tk := range h.disp.tasks() {
			if tk.Reaction == "compose" && tk.Generation == 2 {
				return true
			}
		}
		return false
	})
	close(gate)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	for _, id := range []converge.ID{"account/fd-01-team-001", "vpc/fd-01-team-001", "route/fd-01-team-001"} {
		if r := store.get(id); r == nil || r.Phase != converge.PhaseReady {
			t.Errorf("%s did not come back: %+v", id, r)
		}
	}
	if err := scheduler.CheckInvariants(h.s); err != nil {
		t.Error(err)
	}
}

// ProblemGroups groups what is not Ready by phase and by reason with the
// resource names taken out: every vpc failing the same way is one group,
// every route waiting for its own vpc another, each with its count and
// its first members.
func TestProblemGroups(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	disp.setHook(func(tk *converge.Task) (*converge.Result, bool) {
		if tk.Kind == "vpc" {
			return &converge.Result{Outcome: converge.OutcomePermanent, Message: "quota exceeded"}, false
		}
		return nil, false
	})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(2, 5), "c1"), classicValidator)
	h.waitSettled(scheduler.Stuck, 5*time.Second)
	gs := h.s.ProblemGroups(3)
	if len(gs) < 2 {
		t.Fatalf("groups %+v, want the failed vpcs and the waiting routes", gs)
	}
	vpcs, routes := gs[0], gs[1]
	if vpcs.Phase != converge.PhaseFailed || vpcs.Count != 10 || !vpcs.Permanent || vpcs.Reason != "permanent: quota exceeded" {
		t.Errorf("first group %+v, want the 10 vpcs failed permanently", vpcs)
	}
	if got, want := fmt.Sprint(vpcs.IDs), "[vpc/fd-01-team-001 vpc/fd-01-team-002 vpc/fd-01-team-003]"; got != want {
		t.Errorf("first group's members %s, want %s", got, want)
	}
	if routes.Phase != converge.PhasePending || routes.Count != 10 || routes.Pattern != "waiting for vpc/…" ||
		routes.Reason != "waiting for vpc/fd-01-team-001" || len(routes.IDs) != 3 {
		t.Errorf("second group %+v, want the 10 routes waiting for their vpcs", routes)
	}
}

// Reasons that differ only in a backoff's length ("retrying in 25s",
// "retrying in 6.7s") are one group: a stuck report of transient faults
// used to split them by the duration and sort them as strings.
func TestProblemGroupsIgnoreBackoffLength(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	disp.setHook(func(tk *converge.Task) (*converge.Result, bool) {
		if tk.Kind == "vpc" {
			return &converge.Result{Outcome: converge.OutcomeTransient, Message: "injected fault"}, false
		}
		return nil, false
	})
	cfg := testConfig()
	cfg.BackoffBase, cfg.BackoffMax = time.Second, time.Hour // long backoffs: they stay Failed while we look
	h := start(t, store, disp, cfg)
	h.apply(classicDesired(makeBOM(2, 5), "c1"), classicValidator)
	var failed []scheduler.ProblemGroup
	waitFor(t, 5*time.Second, "the ten vpcs failed, backing off", func() bool {
		failed = failed[:0]
		n := 0
		for _, g := range h.s.ProblemGroups(3) {
			if g.Phase == converge.PhaseFailed {
				failed = append(failed, g)
				n += g.Count
			}
		}
		return n == 10
	})
	if len(failed) != 1 || !strings.HasPrefix(failed[0].Pattern, "retrying in …") {
		t.Errorf("failed groups %+v, want one, its pattern without the backoff's length", failed)
	}
}
