package scheduler_test

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// retentionDesired is n vpcs at spec revision rev, with a synced binding.
func retentionDesired(n, rev int) *converge.Desired {
	d := &converge.Desired{Kinds: classicKinds(),
		Configs:  []*converge.ProviderConfig{{Name: "sink", Kind: "statussink", KindVersion: 1, IsDefault: true, Config: json.RawMessage(`{}`)}},
		Bindings: []*converge.Binding{{Name: "vpc-synced", Kind: "vpc", Transition: converge.TransitionSynced, Reactor: "statussink"}},
	}
	for i := range n {
		d.Resources = append(d.Resources, sampleVPC(fmt.Sprintf("v%03d", i), 1,
			fmt.Sprintf(`{"cidr":"10.%d.0.0/16","account_id":"123456789012","rev":%d}`, i%200, rev)))
	}
	return d
}

func reactTasks(disp *fakeDisp) []string {
	var keys []string
	for _, tk := range disp.tasks() {
		if tk.Reaction == converge.ReactionReact {
			keys = append(keys, tk.Key)
		}
	}
	return keys
}

// storedDeliveries returns the stored deliveries by key, checking each is done.
func storedDeliveries(t *testing.T, store *memStore) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	for _, d := range store.deliveryList() {
		if !d.Done {
			t.Errorf("delivery %s stored owed after settling", d.Key)
		}
		got[d.Key] = true
	}
	return got
}

// TestDeliveryRetention: the store keeps one done delivery per binding and
// live subject (its newest generation's), the scheduler holds none whole,
// the one kept still stops a restart from firing again, and a deleted
// subject's goes.
func TestDeliveryRetention(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	uid := ""
	for rev := 1; rev <= 4; rev++ {
		h.apply(retentionDesired(1, rev), classicValidator)
		h.waitSettled(scheduler.Converged, 5*time.Second)
		h.flush()
		if uid == "" {
			uid = store.get("vpc/v000").UID
		}
		want := fmt.Sprintf("vpc-synced/%s/%d/synced", uid, rev)
		if got := storedDeliveries(t, store); len(got) != 1 || !got[want] {
			t.Errorf("generation %d: stored deliveries %v, want only %s", rev, got, want)
		}
		if whole, fired := scheduler.DeliveriesHeld(h.s); whole != 0 || fired != 1 {
			t.Errorf("generation %d: scheduler holds %d whole deliveries and %d fired, want 0 and 1", rev, whole, fired)
		}
		if err := scheduler.CheckInvariants(h.s); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(reactTasks(disp)); got != 4 {
		t.Errorf("%d react tasks for 4 generations, want 4", got)
	}

	// A restart reads the kept delivery: the same generation never fires
	// again, a failure and recovery at it neither.
	h.stop()
	disp.resetLog()
	h = start(t, store, disp, testConfig())
	h.apply(retentionDesired(1, 4), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	if got := reactTasks(disp); len(got) != 0 {
		t.Errorf("reactor fired again after restart: %v", got)
	}
	if whole, fired := scheduler.DeliveriesHeld(h.s); whole != 0 || fired != 1 {
		t.Errorf("after restart: scheduler holds %d whole deliveries and %d fired, want 0 and 1", whole, fired)
	}

	// Deleting the subject deletes its delivery.
	d := retentionDesired(0, 4)
	h.apply(d, classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	if got := storedDeliveries(t, store); len(got) != 0 {
		t.Errorf("deliveries of a deleted subject stored: %v", got)
	}
	if whole, fired := scheduler.DeliveriesHeld(h.s); whole != 0 || fired != 0 {
		t.Errorf("after delete: scheduler holds %d whole deliveries and %d fired, want none", whole, fired)
	}
}

// TestDeliveryDeleteWaitsForRow: a recompose bumps the generation of many
// accounts at once and, with one row per commit, their rows trail their
// reconciles; a superseded delivery's delete must not reach the store
// before its subject's newer generation (the fake store panics if it
// does: a crash there would let the old generation fire again).
func TestDeliveryDeleteWaitsForRow(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(classicHandler, &fakeWorker{name: "w1"})
	cfg := testConfig()
	cfg.MaxCommit = 1
	h := start(t, store, disp, cfg)
	const teams = 40
	bom := makeBOM(1, teams)
	for rev := 1; rev <= 3; rev++ {
		for i := range bom.FDs[0].Teams {
			bom.FDs[0].Teams[i].Rev = fmt.Sprint(rev)
		}
		d := classicDesired(bom, fmt.Sprint("c", rev))
		d.Bindings = append(d.Bindings, &converge.Binding{Name: "account-synced", Kind: "account", Transition: converge.TransitionSynced, Reactor: "statussink"})
		h.apply(d, classicValidator)
		h.waitSettled(scheduler.Converged, 10*time.Second)
		h.flush()
		got := storedDeliveries(t, store)
		for _, r := range store.all() {
			if r.Kind != "account" {
				continue
			}
			if k := fmt.Sprintf("account-synced/%s/%d/synced", r.UID, r.Generation); !got[k] {
				t.Errorf("rev %d: %s's delivery %s missing", rev, r.ID(), k)
			}
		}
		if err := scheduler.CheckInvariants(h.s); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := store.deletedDeliveries(), 2*(teams+1); got != want {
		t.Errorf("%d deliveries deleted, want %d (two superseded generations of %d accounts and the root)", got, want, teams)
	}
}

// attemptHandler is classicHandler with a vpc's status numbering its
// reconciles, so two deliveries of one transition made from two
// reconciles carry two bodies.
func attemptHandler() handler {
	var attempts atomic.Int32
	return func(tk *converge.Task) *converge.Result {
		res := classicHandler(tk)
		if tk.Kind == "vpc" && tk.Reaction == converge.ReactionReconcile && res.Outcome == converge.OutcomeOK {
			res.Status = mustJSON(map[string]any{"vpc_id": "vpc-" + tk.Name, "attempt": attempts.Add(1)})
		}
		return res
	}
}

// TestDeliveryWaitsForItsRow: a reactor delivery is dispatched only once
// the batch holding its outbox row is committed. A process (or a
// leader's term) whose commits stop landing after a transition fired
// sends nothing for it; the next one, finding no row, reconciles again
// and fires the transition once, with the status of its own reconcile,
// so the receiver sees one delivery of the transition, not two with two
// bodies.
func TestDeliveryWaitsForItsRow(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(attemptHandler(), &fakeWorker{name: "w1"})
	release := make(chan struct{})
	disp.setHook(func(tk *converge.Task) (*converge.Result, bool) {
		if tk.Reaction == converge.ReactionReconcile {
			<-release
		}
		return nil, false
	})
	h := start(t, store, disp, testConfig())
	h.apply(retentionDesired(1, 1), classicValidator)
	store.crash() // nothing the vpc's reconcile changes lands
	close(release)
	// Progress is published after the loop's dispatch step, so once it
	// shows the vpc Ready, that step has run for the transition.
	waitFor(t, 5*time.Second, "the vpc Ready in memory, two commits refused", func() bool {
		return h.s.Progress().Counts.Ready == 1 && store.refused() >= 2
	})
	if got := reactTasks(disp); len(got) != 0 {
		t.Fatalf("delivered before its outbox row was committed: %v", got)
	}
	if p := h.s.Progress(); p.Deliveries != 1 {
		t.Fatalf("%d deliveries owed, want the transition's", p.Deliveries)
	}
	if err := scheduler.CheckInvariants(h.s); err != nil {
		t.Fatal(err)
	}

	h.stop() // the process ends, its last flush refused too
	store.restart()
	h = start(t, store, disp, testConfig())
	h.apply(retentionDesired(1, 1), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	var reacts []converge.Task
	for _, tk := range disp.tasks() {
		if tk.Reaction == converge.ReactionReact {
			reacts = append(reacts, tk)
		}
	}
	if len(reacts) != 1 {
		t.Fatalf("%d deliveries of one transition, want 1: %+v", len(reacts), reacts)
	}
	if got, want := string(reacts[0].Subject.Status), store.get("vpc/v000").Status; got != string(want) {
		t.Errorf("delivered status %s, the stored vpc's is %s", got, want)
	}
	if got := storedDeliveries(t, store); len(got) != 1 || !got[reacts[0].Key] {
		t.Errorf("stored deliveries %v, want only %s", got, reacts[0].Key)
	}
}

// TestDeliveryReplayedWithItsBody: a delivery whose row is committed but
// whose answer never is (the process ends while the reactor runs) is
// sent again by the next process from its row: the same idempotency key
// and the same body, however the subject's status could differ by then.
func TestDeliveryReplayedWithItsBody(t *testing.T) {
	store := newMemStore()
	disp := newFakeDisp(attemptHandler(), &fakeWorker{name: "w1"})
	disp.setHook(func(tk *converge.Task) (*converge.Result, bool) {
		if tk.Reaction == converge.ReactionReact {
			store.crash() // the answer is never committed
			return nil, true
		}
		return nil, false
	})
	h := start(t, store, disp, testConfig())
	h.apply(retentionDesired(1, 1), classicValidator)
	waitFor(t, 5*time.Second, "the delivery dispatched", func() bool { return len(reactTasks(disp)) == 1 })
	h.stop()
	store.restart()
	disp.setHook(nil)
	h = start(t, store, disp, testConfig())
	h.apply(retentionDesired(1, 1), classicValidator)
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	var reacts []converge.Task
	for _, tk := range disp.tasks() {
		if tk.Reaction == converge.ReactionReact {
			reacts = append(reacts, tk)
		}
	}
	if len(reacts) != 2 {
		t.Fatalf("%d deliveries, want the first and its replay: %+v", len(reacts), reacts)
	}
	a, b := reacts[0], reacts[1]
	if a.Key != b.Key || string(a.Subject.Status) != string(b.Subject.Status) || a.Subject.Generation != b.Subject.Generation {
		t.Errorf("replay differs: key %s status %s, then key %s status %s", a.Key, a.Subject.Status, b.Key, b.Subject.Status)
	}
	if got := storedDeliveries(t, store); len(got) != 1 || !got[a.Key] {
		t.Errorf("stored deliveries %v, want only %s", got, a.Key)
	}
}
