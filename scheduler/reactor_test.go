package scheduler_test

import (
	"encoding/json"
	"fmt"
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
