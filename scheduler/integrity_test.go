package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/statetest"
)

// TestBadStatusRefusedOnArrival: a worker's status that is not valid JSON
// (or holds a key twice), or that its kind's status schema rejects, fails that task with a reason
// naming the field; nothing of it is stored or flowed, and every other
// resource converges and is committed.
func TestBadStatusRefusedOnArrival(t *testing.T) {
	tests := []struct {
		name       string
		status     string
		wantReason string
	}{
		{name: "schema", status: `{"account_id":"NOT-AN-ID"}`, wantReason: `status.account_id: invalid value "NOT-AN-ID"`},
		{name: "unknown field", status: `{"account_id":"acct-1","bogus":1}`, wantReason: "status.bogus: field not allowed"},
		{name: "invalid JSON", status: `{"account_id":`, wantReason: "status: invalid JSON"},
		{name: "not an object", status: `["acct"]`, wantReason: "status: not a JSON object"},
		{name: "trailing bytes", status: `{"account_id":"acct-1"} x`, wantReason: "status: invalid JSON"},
		{name: "duplicate key", status: `{"account_id":"acct-1","account_id":"acct-2"}`, wantReason: `status: duplicate key "account_id"`},
		{name: "nested duplicate key", status: `{"account_id":"acct-1","tags":{"a":1,"\u0061":2}}`, wantReason: `status: duplicate key "a" in tags`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const bad = "account/fd-01-team-001"
			store := newMemStore()
			disp := newFakeDisp(func(tk *converge.Task) *converge.Result {
				if converge.NewID(tk.Kind, tk.Name) == bad && tk.Reaction == converge.ReactionReconcile {
					return &converge.Result{Outcome: converge.OutcomeOK, Status: json.RawMessage(tt.status)}
				}
				return classicHandler(tk)
			}, &fakeWorker{name: "w1"})
			h := start(t, store, disp, testConfig())
			h.apply(classicDesired(makeBOM(1, 2), "c1"), classicValidator)
			p := h.waitSettled(scheduler.Stuck, 5*time.Second)
			h.flush()
			if p.CommitError != "" {
				t.Errorf("CommitError = %q, want none", p.CommitError)
			}
			r := store.get(bad)
			if r == nil {
				t.Fatalf("%s not stored", bad)
			}
			if got, want := r.Phase, converge.PhaseFailed; got != want {
				t.Errorf("%s phase %s, want %s", bad, got, want)
			}
			if !strings.HasPrefix(r.Reason, "permanent: worker result refused: ") || !strings.Contains(r.Reason, tt.wantReason) {
				t.Errorf("%s reason %q, want the refusal naming %q", bad, r.Reason, tt.wantReason)
			}
			if len(r.Status) != 0 {
				t.Errorf("%s status %s stored, want none", bad, r.Status)
			}
			vpc := store.get("vpc/fd-01-team-001")
			if vpc == nil || strings.Contains(string(vpc.Spec), "NOT") || vpc.Phase == converge.PhaseReady {
				t.Errorf("the consumer of a refused status: %+v", vpc)
			}
			// Everything else is Ready and durable.
			ready := 0
			for _, r := range store.all() {
				if r.Phase == converge.PhaseReady {
					ready++
				}
			}
			// Not Ready: the account, its vpc and route, and the root.
			if got, want := ready, bomSize(1, 2)+1-4; got != want {
				t.Errorf("%d resources stored Ready, want %d", got, want)
			}
		})
	}
}

// TestVerbStatusRefused: an operator verb whose status the schema rejects
// returns an error and leaves the resource's status as it was.
func TestVerbStatusRefused(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(func(tk *converge.Task) *converge.Result {
		if tk.Reaction == "enable_flow_logs" {
			return &converge.Result{Outcome: converge.OutcomeOK, Status: json.RawMessage(`{"vpc_id":"NOT-A-VPC"}`)}
		}
		return classicHandler(tk)
	}, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(1, 1), "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	before := store.get("vpc/fd-01-team-001").Status
	_, err := h.s.Do(t.Context(), "vpc/fd-01-team-001", "enable_flow_logs", nil)
	if err == nil || !strings.Contains(err.Error(), `status.vpc_id: invalid value "NOT-A-VPC"`) {
		t.Fatalf("Do error = %v, want the refused status named", err)
	}
	h.flush()
	if got := store.get("vpc/fd-01-team-001").Status; string(got) != string(before) {
		t.Errorf("status after a refused verb result = %s, want %s", got, before)
	}
}

// TestStoreRefusalDoesNotStopProgress: a row the store refuses is taken
// out of its batch; the resource fails with the store's reason, and every
// other row is committed, then and later.
func TestStoreRefusalDoesNotStopProgress(t *testing.T) {
	const bad = "vpc/fd-01-team-002"
	store := newMemStore()
	refusals := 0
	store.refuse = func(r *converge.Resource) error {
		if r.ID() == bad && len(r.Status) > 0 && refusals == 0 {
			refusals++ // once: the row without its refused data is kept
			return errors.New("encode: status: invalid JSON")
		}
		return nil
	}
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(1, 3), "c1"), classicValidator)
	p := h.waitSettled(scheduler.Stuck, 5*time.Second)
	h.flush()
	if got, want := p.Refused, 1; got != want {
		t.Errorf("Progress.Refused = %d, want %d", got, want)
	}
	if p.CommitError != "" {
		t.Errorf("CommitError = %q after the refused row was taken out", p.CommitError)
	}
	r := store.get(bad)
	if r == nil {
		t.Fatalf("%s not stored after its refused data was dropped", bad)
	}
	if r.Phase != converge.PhaseFailed || !strings.Contains(r.Reason, "store refused the resource: encode: status: invalid JSON") {
		t.Errorf("%s: %s %q, want Failed naming the store's refusal", bad, r.Phase, r.Reason)
	}
	// Ready: everything but the vpc, the root, and the vpc's route if
	// the refusal came before the route's turn (it then waits for the
	// vpc).
	for _, r := range store.all() {
		switch id := r.ID(); {
		case id == bad || id == "classicbom/org":
			if r.Phase == converge.PhaseReady {
				t.Errorf("%s is Ready", id)
			}
		case id == "route/fd-01-team-002":
			if r.Phase != converge.PhaseReady && r.Phase != converge.PhasePending {
				t.Errorf("%s is %s, want Ready or Pending", id, r.Phase)
			}
		case r.Phase != converge.PhaseReady:
			t.Errorf("%s is %s, want Ready", id, r.Phase)
		}
	}
	if ev := store.eventsOf(bad); len(ev) == 0 || !hasEvent(ev, "StoreRefused") {
		t.Errorf("events of %s: %+v, want a StoreRefused event", bad, ev)
	}
}

func hasEvent(evs []converge.Event, typ string) bool {
	for _, e := range evs {
		if e.Type == typ {
			return true
		}
	}
	return false
}

// TestUnstorableRowStaysVisible: a row the store refuses even after its
// refused data was dropped is kept out of every batch; it stays Failed in
// the engine (a Problem) and the rest is committed.
func TestUnstorableRowStaysVisible(t *testing.T) {
	const bad = "route/fd-01-team-001"
	store := newMemStore()
	store.refuse = func(r *converge.Resource) error {
		if r.ID() == bad {
			return errors.New("name too long")
		}
		return nil
	}
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(1, 2), "c1"), classicValidator)
	p := h.waitSettled(scheduler.Stuck, 5*time.Second)
	h.flush()
	if got, want := p.Refused, 1; got != want {
		t.Errorf("Progress.Refused = %d, want %d", got, want)
	}
	if r := store.get(bad); r != nil {
		t.Errorf("%s stored: %+v", bad, r)
	}
	if got, want := len(store.all()), bomSize(1, 2); got != want {
		t.Errorf("%d resources stored, want %d (all but the refused one)", got, want)
	}
	found := false
	for _, pr := range h.s.Problems() {
		if pr.ID == bad {
			found = true
			if !pr.Permanent || !strings.Contains(pr.Reason, "store refused the resource: name too long") {
				t.Errorf("problem %+v, want a permanent one naming the refusal", pr)
			}
		}
	}
	if !found {
		t.Errorf("%s is not among the problems %+v", bad, h.s.Problems())
	}
}

// TestCommitsAreBounded: however many rows a composition makes dirty at
// once, no commit holds more than MaxCommit of them, and the rows and
// edges left for later batches all arrive (the real store refuses an edge
// whose consumer is not stored yet, and a child whose owner is not).
func TestCommitsAreBounded(t *testing.T) {
	for _, name := range []string{"mem", "bbolt", "etcd"} {
		t.Run(name, func(t *testing.T) {
			mem := newMemStore()
			var store soakStore = mem
			switch name {
			case "bbolt":
				store = &boltSoak{Backend: statetest.Open(t)}
			case "etcd":
				store = &boltSoak{Backend: openEtcd(t)}
			}
			disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
			cfg := testConfig()
			cfg.MaxCommit = 7
			h := start(t, store, disp, cfg)
			bom := makeBOM(3, 5)
			h.apply(classicDesired(bom, "c1"), classicValidator)
			h.waitSettled(scheduler.Converged, 10*time.Second)
			h.flush()
			if p := h.s.Progress(); p.CommitError != "" {
				t.Fatalf("CommitError %q", p.CommitError)
			}
			if got, want := len(store.all()), bomSize(3, 5)+1; got != want {
				t.Errorf("%d resources stored, want %d", got, want)
			}
			if got, want := store.edgeCount(), len(bom.FDs)+countTeams(bom)*3; got != want {
				t.Errorf("%d edges stored, want %d", got, want)
			}
			for _, r := range store.all() {
				if r.Phase != converge.PhaseReady {
					t.Errorf("%s stored %s", r.ID(), r.Phase)
				}
			}
			if name == "mem" && mem.maxRows > cfg.MaxCommit {
				t.Errorf("a commit held %d rows, want at most %d", mem.maxRows, cfg.MaxCommit)
			}
		})
	}
}

// TestMaxChildren: a composition over its kind's max_children fails the
// composer permanently, naming the limit; nothing of it is applied. A
// kind without the setting has no limit.
func TestMaxChildren(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	d := classicDesired(makeBOM(2, 3), "c1")
	d.Kinds[0].MaxChildren = 10
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Stuck, 5*time.Second)
	h.flush()
	root := store.get("classicbom/org")
	if want := "permanent: 22 children: more than max_children 10 of classicbom/v1"; root == nil || root.Reason != want {
		t.Fatalf("root %+v, want reason %q", root, want)
	}
	if got := len(store.all()); got != 1 {
		t.Errorf("%d resources stored, want only the root", got)
	}
	d = classicDesired(makeBOM(2, 3), "c2")
	d.Kinds[0].MaxChildren = 0
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
}

// countingValidator counts spec validations and refuses any spec with
// "bad" in it.
type countingValidator struct {
	validatorFunc
	n atomic.Int64
}

func (c *countingValidator) ValidateSpec(ref converge.KindRef, spec json.RawMessage) error {
	c.n.Add(1)
	if strings.Contains(string(spec), "bad") {
		return errors.New("spec.team_name: bad")
	}
	return c.validatorFunc.ValidateSpec(ref, spec)
}

// TestComposeValidatesChangedChildrenOnly: a big composition is validated
// whole (on every core, the first bad child in order named); a recompose
// validates only the children whose spec changed.
func TestComposeValidatesChangedChildrenOnly(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	v := &countingValidator{validatorFunc: classicValidator}
	bom := makeBOM(4, 300) // 3,608 children
	name1, name2 := bom.FDs[2].Teams[100].Name, bom.FDs[3].Teams[5].Name
	bom.FDs[2].Teams[100].Name = "team-bad"
	bom.FDs[3].Teams[5].Name = "team-bad"
	h.apply(classicDesired(bom, "c1"), v)
	h.waitSettled(scheduler.Stuck, 10*time.Second)
	h.flush()
	if r := store.get("classicbom/org"); r == nil || !strings.Contains(r.Reason, "account/fd-03-team-bad: spec.team_name: bad") {
		t.Fatalf("root %+v, want the first bad child named", r)
	}
	bom.FDs[2].Teams[100].Name = name1
	bom.FDs[3].Teams[5].Name = name2
	h.apply(classicDesired(bom, "c2"), v)
	h.waitSettled(scheduler.Converged, 20*time.Second)
	v.n.Store(0)
	bom.FDs[0].Teams[0].Rev = "2" // one account's spec changes
	h.apply(classicDesired(bom, "c3"), v)
	h.waitSettled(scheduler.Converged, 20*time.Second)
	// The account, and its vpc's spec once the flow writes the new
	// account_id (a flowed value is checked when written).
	if got := v.n.Load(); got != 2 {
		t.Errorf("%d specs validated on a recompose that changed one child, want 2", got)
	}
}

// TestRestartMidDrainDoesNotRerunReady: a crash while a big composition's
// rows are still being committed (MaxCommit at a time) loses what was not
// committed; the restart runs only what the store does not record as
// Ready at its generation.
func TestRestartMidDrainDoesNotRerunReady(t *testing.T) {
	store := newMemStore()
	var mu sync.Mutex
	gate := make(chan struct{})
	disp := newFakeDisp(func(tk *converge.Task) *converge.Result {
		mu.Lock()
		g := gate
		mu.Unlock()
		if g != nil && tk.Reaction == converge.ReactionReconcile {
			<-g // hold the leaves until the crash: the drain goes on
		}
		return classicHandler(tk)
	}, &fakeWorker{name: "w1"})
	cfg := testConfig()
	cfg.MaxCommit = 4
	h := start(t, store, disp, cfg)
	bom := makeBOM(3, 10) // 96 children
	h.apply(classicDesired(bom, "c1"), classicValidator)
	waitFor(t, 5*time.Second, "the composition", func() bool {
		for _, tk := range disp.tasks() {
			if tk.Reaction == converge.ReactionReconcile {
				return true
			}
		}
		return false
	})
	// Let some leaves finish while rows still drain, then crash mid-drain.
	store.mu.Lock()
	store.crashAt = store.commits + 6
	store.mu.Unlock()
	mu.Lock()
	close(gate)
	gate = nil
	mu.Unlock()
	crashThenRestart(t, store, h)
	ready := map[converge.ID]bool{}
	for _, r := range store.all() {
		if r.Phase == converge.PhaseReady && r.ObservedGeneration == r.Generation {
			ready[r.ID()] = true
		}
	}
	disp.resetLog()
	h = start(t, store, disp, testConfig())
	h.apply(classicDesired(bom, "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 10*time.Second)
	for _, tk := range disp.tasks() {
		if id := converge.NewID(tk.Kind, tk.Name); ready[id] && tk.Reaction == converge.ReactionReconcile {
			t.Errorf("%s was stored Ready at generation %d and ran again (generation %d)", id, store.get(id).ObservedGeneration, tk.Generation)
		}
	}
	t.Logf("%d stored Ready before the restart, %d tasks after", len(ready), len(disp.tasks()))
	// And the whole graph is there: children the crash kept from the
	// store are made again, though the root's row said its compose was
	// done.
	h.flush()
	if got, want := len(store.all()), bomSize(3, 10)+1; got != want {
		t.Errorf("%d resources after the restart converged, want %d", got, want)
	}
}

// TestProgressIsDurableDuringADrain: while the rows a big composition
// created still drain into a slow store, MaxCommit at a time, the
// resources that turn Ready are committed ahead of them: a crash then
// loses seconds of progress, not everything done since the compose.
func TestProgressIsDurableDuringADrain(t *testing.T) {
	store := newMemStore()
	// A leaf takes longer than a commit: the first children's rows are
	// stored Pending before they turn Ready.
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1", delay: 5 * time.Millisecond})
	cfg := testConfig()
	cfg.MaxCommit = 8
	store.commitDelay = 3 * time.Millisecond
	h := start(t, store, disp, cfg)
	bom := makeBOM(4, 40) // 488 children: ~60 batches of new rows
	h.apply(classicDesired(bom, "c1"), classicValidator)
	total := bomSize(4, 40) + 1
	const first = "account/fd-01-team-001"
	waitFor(t, 20*time.Second, first+" stored Ready", func() bool {
		r := store.get(first)
		return r != nil && r.Phase == converge.PhaseReady
	})
	if n := len(store.all()); n >= total {
		t.Errorf("%s was stored Ready only after every created row (%d of %d): progress waited behind the drain", first, n, total)
	}
	h.waitSettled(scheduler.Converged, 20*time.Second)
}

// blockingValidator blocks the check of one status (exactly block)
// until release is closed.
type blockingValidator struct {
	validatorFunc
	block   string
	started chan struct{}
	release chan struct{}
}

func (b *blockingValidator) ValidateStatus(ref converge.KindRef, status json.RawMessage) error {
	if string(status) == b.block {
		close(b.started)
		<-b.release
	}
	return b.validatorFunc.ValidateStatus(ref, status)
}

// TestStatusChecksOffTheLoop: a worker's status is checked on the result
// stage's goroutines, not on the scheduler's loop: while one check is
// slow, other results are handled and the graph moves on.
//
// In a synctest bubble: the wait for the others is not a wall-clock
// budget that a loaded machine misses.
func TestStatusChecksOffTheLoop(t *testing.T) { synctest.Test(t, statusChecksOffTheLoop) }

func statusChecksOffTheLoop(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs GOMAXPROCS >= 2: with one checker goroutine the blocked check holds every result")
	}
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	v := &blockingValidator{validatorFunc: classicValidator, block: `{"account_id":"acct-fd-01-team-001"}`,
		started: make(chan struct{}), release: make(chan struct{})}
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(2, 4), "c1"), v)
	<-v.started
	waitFor(t, 5*time.Second, "other resources Ready while one status check blocks", func() bool {
		return h.s.Progress().Counts.Ready >= 10
	})
	close(v.release)
	h.waitSettled(scheduler.Converged, 5*time.Second)
}

// A composer whose row is big (its spec is a large BOM) is not rewritten
// in every batch for its rollup and reason alone: those wait up to
// bigRowEvery, and a synchronous flush writes them. The store ends with
// the final rollup.
//
// In a synctest bubble: the run takes its second of (virtual) time
// however loaded the machine is, so the count of throttled writes does
// not grow with the load.
func TestBigComposerRowThrottled(t *testing.T) { synctest.Test(t, bigComposerRowThrottled) }

func bigComposerRowThrottled(t *testing.T) {
	b := makeBOM(2, 1000)
	pad := strings.Repeat("r", 600)
	for i := range b.FDs {
		for j := range b.FDs[i].Teams {
			b.FDs[i].Teams[j].Rev = pad
		}
	}
	mem := newMemStore()
	// A millisecond a task, 16 at a time: the rollup changes in batch
	// after batch for about a second.
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1", cap: 16, delay: time.Millisecond})
	cfg := testConfig()
	cfg.MaxCommit = 300
	h := start(t, mem, disp, cfg)
	h.apply(classicDesired(b, "r1"), classicValidator)
	h.waitSettled(scheduler.Converged, 30*time.Second)
	h.flush()
	root := converge.NewID("classicbom", "org")
	mem.mu.Lock()
	commits, rootPuts := mem.commits, mem.putsByID[root]
	mem.mu.Unlock()
	if commits < 20 {
		t.Fatalf("%d commits: the test wants many batches", commits)
	}
	// The root's row is written when composed, when Ready, and for its
	// rollup at most every bigRowEvery of a run that takes ~a second.
	if rootPuts > 8 {
		t.Errorf("the big root row was written %d times in %d commits; want its rollup and reason throttled", rootPuts, commits)
	}
	got := rollupOf(t, mem.get(root))
	if want := bomSize(2, 1000); got.Total != want || got.Ready != want {
		t.Errorf("stored rollup %+v, want total and ready %d", got, want)
	}
}

// A big row (a root whose spec is megabytes of BOM) makes its commit long
// by itself: a commit that carries one holds at most a quarter of
// MaxCommit rows besides.
func TestBigRowCommitsAreSmaller(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	cfg := testConfig()
	cfg.MaxCommit = 40
	h := start(t, store, disp, cfg)
	d := classicDesired(makeBOM(3, 5), "c1")
	root := d.Resources[0]
	pad := `{"notes":"` + strings.Repeat("x", 1<<20) + `",` + string(root.Declared[1:])
	root.Declared = json.RawMessage(pad)
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Converged, 10*time.Second)
	h.flush()
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.bigCommits == 0 {
		t.Fatal("no commit carried the big root: the test proves nothing")
	}
	if store.maxRowsBig > cfg.MaxCommit/4 {
		t.Errorf("a commit with the big root held %d rows, want at most %d", store.maxRowsBig, cfg.MaxCommit/4)
	}
	if got, want := len(store.resources), bomSize(3, 5)+1; got != want {
		t.Errorf("%d resources stored, want %d", got, want)
	}
}

// edgeCountingStore is a real store that records the most edge
// deletions any one commit carried.
type edgeCountingStore struct {
	scheduler.Store

	mu      sync.Mutex
	delMax  int // the most edges one commit deleted
	deleted int // resources deleted in all
}

func (s *edgeCountingStore) Commit(ctx context.Context, b *converge.Batch) error {
	s.mu.Lock()
	s.delMax = max(s.delMax, len(b.DeletedEdges))
	s.deleted += len(b.DeletedResources)
	s.mu.Unlock()
	return s.Store.Commit(ctx, b)
}

// TestCascadeDeleteSendsNoEdgeDeletions: a deleted row's edges go with it
// in the store (Batch.DeletedResources), so a cascade delete sends no
// edge deletions of its own (each rewrote the consumer's row just before
// deleting it), and the bbolt store ends empty, every edge gone.
func TestCascadeDeleteSendsNoEdgeDeletions(t *testing.T) {
	bolt, err := state.Open(t.TempDir(), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bolt.Close() })
	store := &edgeCountingStore{Store: bolt}
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(4, 8), "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 10*time.Second)
	h.flush()
	if err := h.s.Delete(t.Context(), "classicbom/org"); err != nil {
		t.Fatal(err)
	}
	h.waitSettled(scheduler.Converged, 20*time.Second)
	h.flush()
	h.stop()
	store.mu.Lock()
	defer store.mu.Unlock()
	if want := bomSize(4, 8) + 1; store.deleted != want {
		t.Errorf("%d resources deleted, want %d", store.deleted, want)
	}
	if store.delMax > 0 {
		t.Errorf("a commit deleted %d edges one by one: a deleted row's edges go with it", store.delMax)
	}
	snap, err := bolt.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Resources) != 0 || len(snap.Edges) != 0 {
		t.Errorf("%d resources and %d edges left in the store, want none", len(snap.Resources), len(snap.Edges))
	}
}

// clockStore is a real store whose every commit moves a clock the
// scheduler reads by took: a commit that seems to take that long.
type clockStore struct {
	scheduler.Store
	took   time.Duration
	offset atomic.Int64
}

func (s *clockStore) Commit(ctx context.Context, b *converge.Batch) error {
	s.offset.Add(int64(s.took))
	return s.Store.Commit(ctx, b)
}

func (s *clockStore) now() time.Time { return time.Now().Add(time.Duration(s.offset.Load())) }

// TestSlowCommitIsLogged: a commit that takes a second or more is logged
// with what its batch held, so the longest commits of a big run can be
// taken apart from the log; quick ones are not.
//
// It runs in a synctest bubble: the clock moves only when every goroutine
// waits, so a real commit takes no time however loaded the machine is,
// and only the store's own "took" makes one slow.
func TestSlowCommitIsLogged(t *testing.T) {
	for _, tc := range []struct {
		took time.Duration
		want bool
	}{{took: 0, want: false}, {took: 1500 * time.Millisecond, want: true}} {
		synctest.Test(t, func(t *testing.T) { slowCommitCase(t, tc.took, tc.want) })
	}
}

func slowCommitCase(t *testing.T, took time.Duration, want bool) {
	bolt, err := state.Open(t.TempDir(), state.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	store := &clockStore{Store: bolt, took: took}
	var logs strings.Builder
	var mu sync.Mutex
	cfg := testConfig()
	cfg.Now = store.now
	cfg.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	h := start(t, store, newFakeDisp(classicHandler, &fakeWorker{name: "w1"}), cfg)
	h.apply(classicDesired(makeBOM(2, 3), "c1"), classicValidator)
	h.waitSettled(scheduler.Converged, 10*time.Second)
	h.flush()
	h.stop()
	bolt.Close()
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	got := strings.Contains(out, "slow commit")
	if got != want {
		t.Errorf("commits of %v: logged a slow commit %v, want %v; log:\n%s", took, got, want, out)
	}
	if want && !(strings.Contains(out, "took=1.5s") && strings.Contains(out, "rows=") && strings.Contains(out, "events=")) {
		t.Errorf("the slow commit's line does not say what the batch held:\n%s", out)
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestConvergedIsDurable: on a slow store whose commits hold a few rows
// each, the graph is Ready in memory long before the store has it all.
// Converged (what serve records as the revision's success) waits for
// the store: the moment it is published, every row in the store is
// Ready. (A serve killed right after its verdict must not leave a store
// that says converged with rows still Pending.)
func TestConvergedIsDurable(t *testing.T) {
	store := newMemStore()
	store.commitDelay = 5 * time.Millisecond
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	cfg := testConfig()
	cfg.MaxCommit = 16
	h := start(t, store, disp, cfg)
	h.apply(classicDesired(makeBOM(2, 20), "c1"), classicValidator)
	p := h.waitSettled(scheduler.Converged, 30*time.Second)
	rows := store.all()
	ready := 0
	for _, r := range rows {
		if r.Phase == converge.PhaseReady {
			ready++
		}
	}
	if want := 1 + bomSize(2, 20); len(rows) != want || ready != want || p.Counts.Total != want {
		t.Fatalf("at Converged the store holds %d rows, %d Ready (memory: %d/%d Ready), want all %d stored and Ready",
			len(rows), ready, p.Counts.Ready, p.Counts.Total, want)
	}
}

// TestFailingCommitsSettleStuckThenHeal: with every commit refused after
// the apply, the graph turns Ready in memory but never Converged (none
// of it is durable), and settles Stuck naming the commit's failure
// instead of Working for ever: a reactor delivery waiting for its
// outbox row waits for the store like the rows. Once the store takes
// commits again, everything is written and the graph is Converged.
func TestFailingCommitsSettleStuckThenHeal(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(1, 3), "c1"), classicValidator)
	store.mu.Lock()
	store.failNext = 1 << 30
	store.mu.Unlock()
	p := h.waitSettled(scheduler.Stuck, 10*time.Second)
	if p.CommitError == "" || p.Counts.Ready != p.Counts.Total {
		t.Fatalf("stuck with commits refused: CommitError %q, %d/%d Ready in memory; want the error named, all Ready", p.CommitError, p.Counts.Ready, p.Counts.Total)
	}
	store.mu.Lock()
	store.failNext = 0
	store.mu.Unlock()
	p = h.waitSettled(scheduler.Converged, 10*time.Second)
	for _, r := range store.all() {
		if r.Phase != converge.PhaseReady {
			t.Errorf("converged, yet the store holds %s %s", r.ID(), r.Phase)
		}
	}
	if len(store.all()) != p.Counts.Total {
		t.Errorf("converged with %d rows stored, want %d", len(store.all()), p.Counts.Total)
	}
}
