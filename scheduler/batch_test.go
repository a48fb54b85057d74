package scheduler

import (
	"testing"
	"time"

	"github.com/convergehq/converge"
)

// The batcher part on its own: pending writes and what a batch takes.

func newTestBatcher() *batcher {
	return &batcher{
		delRes:     map[converge.ID]bool{},
		edgePut:    map[edgeKey]*converge.Edge{},
		edgeDel:    map[edgeKey]bool{},
		delivDirty: map[string]*converge.Delivery{},
		interval:   5 * time.Millisecond,
	}
}

func batchNode(id converge.ID, stored bool) *node {
	n := &node{id: id, r: &converge.Resource{}}
	n.setTo(mStored, stored)
	return n
}

func TestBatcherArmsFlushOnce(t *testing.T) {
	b := newTestBatcher()
	t0 := time.Unix(100, 0)
	e := &converge.Edge{Consumer: "subnet/a", Producer: "vpc/a"}
	b.putEdge(e, t0)
	b.delEdge(e, t0.Add(time.Second)) // a later change: the flush stays armed as it was
	if want := t0.Add(b.interval); !b.flushAt.Equal(want) {
		t.Fatalf("flushAt %v, want %v", b.flushAt, want)
	}
	if len(b.edgePut) != 0 || !b.edgeDel[edgeKey{"subnet/a", "vpc/a"}] {
		t.Fatalf("a deleted edge is still put (%v) or not deleted (%v)", b.edgePut, b.edgeDel)
	}
	b.putEdge(e, t0)
	if len(b.edgeDel) != 0 || b.edgePut[edgeKey{"subnet/a", "vpc/a"}] != e {
		t.Fatal("an edge put again is still deleted")
	}
	b.retryLater(t0)
	if want := t0.Add(100 * time.Millisecond); !b.flushAt.Equal(want) {
		t.Fatalf("retryLater armed %v, want %v (at least 100ms)", b.flushAt, want)
	}
}

func TestBatcherQueuesRowsByKind(t *testing.T) {
	b := newTestBatcher()
	now := time.Unix(100, 0)
	stored, fresh, gone := batchNode("vpc/stored", true), batchNode("vpc/new", false), batchNode("vpc/gone", true)
	gone.to(stateRemoved)
	b.queueRow(stored, now)
	b.queueRow(fresh, now)
	if len(b.updated) != 1 || b.updated[0] != stored || len(b.dirty) != 1 || b.dirty[0] != fresh {
		t.Fatalf("updated %d dirty %d: a stored row is an update, a new one new", len(b.updated), len(b.dirty))
	}
	b.markRollup(stored, now)
	b.markRollup(stored, now)
	b.markRollup(gone, now)
	b.markReason(stored, now)
	b.markReason(gone, now)
	if len(b.rollupDirty) != 1 || len(b.reasonDirty) != 1 || !stored.has(mRollupDirty|mReasonDirty) {
		t.Fatalf("rollupDirty %d reasonDirty %d: want one each, for the live row", len(b.rollupDirty), len(b.reasonDirty))
	}
	if !b.hasPending() {
		t.Fatal("hasPending is false with rows queued")
	}
}

func TestBatcherPickRows(t *testing.T) {
	var upd, fresh []*node
	b := newTestBatcher()
	for i := range 10 {
		b.updated = append(b.updated, batchNode(converge.ID("vpc/u"+itoa(int64(i))), true))
		b.dirty = append(b.dirty, batchNode(converge.ID("vpc/n"+itoa(int64(i))), false))
	}
	upd, fresh = b.pickRows(8)
	// A quarter of the batch is kept for new rows, the rest goes to
	// changes of stored rows first.
	if len(upd) != 6 || len(fresh) != 2 || upd[0].id != "vpc/u0" || fresh[0].id != "vpc/n0" {
		t.Fatalf("picked %d updates and %d new rows, want 6 and 2, oldest first", len(upd), len(fresh))
	}
	big := b.updated[3]
	big.res().Spec = make([]byte, bigRow)
	upd, fresh = b.pickRows(8)
	// A big row goes first, in a batch a quarter the size.
	if upd[0] != big || len(upd)+len(fresh) > 2 {
		t.Fatalf("with a big row: first %s, %d rows; want the big row first, at most 2", upd[0].id, len(upd)+len(fresh))
	}
}

func TestBatcherEvents(t *testing.T) {
	b := newTestBatcher()
	b.eventSeq = 41
	now := time.Unix(100, 0)
	for range 3 {
		b.addEvent(now, "vpc/a", "Ready", "ready")
	}
	var buf batchBufs
	got := b.takeEvents(2, &buf)
	if left := b.events[b.evHead:]; len(got) != 2 || got[0].Seq != 42 || got[1].Seq != 43 || len(left) != 1 || left[0].Seq != 44 {
		t.Fatalf("took %v, left %v: want 42 and 43 taken, 44 left", got, left)
	}
	if got := b.takeEvents(2, &buf); len(got) != 1 || got[0].Seq != 44 || b.hasPending() {
		t.Fatalf("took %v, pending %v: want 44, then nothing", got, b.hasPending())
	}
}

// TestBatcherEventsBounded: past maxEvents waiting, the oldest are
// dropped unwritten (the store keeps only its newest MaxEvents); taking
// a batch's worth from the front keeps the rest in order, and each event
// is moved about once however many batches take them.
func TestBatcherEventsBounded(t *testing.T) {
	b := newTestBatcher()
	b.maxEvents = 3000
	now := time.Unix(100, 0)
	for range 10000 {
		b.addEvent(now, "vpc/a", "Created", "created")
	}
	if b.evDropped != 7000 || len(b.events)-b.evHead != 3000 {
		t.Fatalf("dropped %d, waiting %d: want 7000 dropped, 3000 waiting", b.evDropped, len(b.events)-b.evHead)
	}
	if len(b.events) > 2*3000 {
		t.Errorf("%d events held for 3000 waiting: the dropped ones are not let go", len(b.events))
	}
	var buf batchBufs
	want := uint64(7001)
	for b.hasPending() {
		got := b.takeEvents(512, &buf)
		for _, e := range got {
			if e.Seq != want {
				t.Fatalf("took seq %d, want %d", e.Seq, want)
			}
			want++
		}
	}
	if want != 10001 {
		t.Errorf("took up to seq %d, want 10000", want-1)
	}
}

func TestBatcherGoneDeliveriesWaitForTheirRow(t *testing.T) {
	b := newTestBatcher()
	now := time.Unix(100, 0)
	dirty, clean := batchNode("vpc/dirty", true), batchNode("vpc/clean", true)
	dirty.set(mDirty)
	b.delivDirty["clean-key"] = &converge.Delivery{Key: "clean-key"}
	b.dropDelivery("dirty-key", dirty, now)
	b.dropDelivery("clean-key", clean, now)
	b.dropDelivery("gone-key", nil, now)
	got := b.goneDeliveries()
	if len(got) != 2 || got[0] != "clean-key" || got[1] != "gone-key" {
		t.Fatalf("goneDeliveries = %v, want the clean row's and the gone subject's", got)
	}
	if b.delivDirty["clean-key"] != nil {
		t.Fatal("a delete does not win over a pending put of the same key")
	}
	if len(b.delivGone) != 1 || b.delivGone[0].key != "dirty-key" {
		t.Fatalf("kept %v, want the dirty row's delivery", b.delivGone)
	}
}

func TestBatcherDefersBigRows(t *testing.T) {
	b := newTestBatcher()
	t0 := time.Unix(100, 0)
	n := batchNode("vpc/root", true)
	b.deferRow(n, t0)
	b.deferRow(n, t0.Add(time.Second))
	if len(b.deferred) != 1 || !b.deferDue.Equal(t0.Add(bigRowEvery)) || !b.flushAt.Equal(b.deferDue) {
		t.Fatalf("deferred %d due %v flushAt %v, want one row due in bigRowEvery", len(b.deferred), b.deferDue, b.flushAt)
	}
	b.armFlush(t0) // an armed flush stays as it is
	if !b.flushAt.Equal(b.deferDue) {
		t.Fatalf("flushAt %v moved", b.flushAt)
	}
}

// TestBatcherEdgeDeletions: a pending edge deletion is written once,
// unless its consumer's row is deleted (in this batch or pending for a
// later one): the store deletes a row's edges with it. Either way it
// leaves the pending set at once, so no later batch walks it again.
func TestBatcherEdgeDeletions(t *testing.T) {
	b := newTestBatcher()
	t0 := time.Unix(100, 0)
	for _, e := range []converge.Edge{
		{Consumer: "route/a", Producer: "vpc/a"}, // its consumer stays: written
		{Consumer: "route/b", Producer: "vpc/b"}, // deleted in this batch
		{Consumer: "route/c", Producer: "vpc/c"}, // deleted in a later batch
	} {
		b.delEdge(&e, t0)
	}
	b.delRes["route/c"] = true
	got := b.takeEdgeDeletions([]converge.ID{"route/b"}, nil)
	if want := []converge.Edge{{Consumer: "route/a", Producer: "vpc/a"}}; len(got) != 1 || got[0].Consumer != want[0].Consumer || got[0].Producer != want[0].Producer {
		t.Fatalf("edge deletions written %v, want %v", got, want)
	}
	if len(b.edgeDel) != 0 {
		t.Fatalf("pending edge deletions left after the batch: %v (a later batch would walk them again)", b.edgeDel)
	}
}

// TestDropHead: the entries dropped are cleared (a queue of a million
// nodes holds none it wrote) and the rest keep their order.
func TestDropHead(t *testing.T) {
	nodes := []*node{{id: "a/1"}, {id: "a/2"}, {id: "a/3"}, {id: "a/4"}}
	q := append([]*node(nil), nodes...)
	backing := q
	q = dropHead(q, 3)
	if len(q) != 1 || q[0] != nodes[3] {
		t.Fatalf("dropHead(4 nodes, 3) = %v, want the 4th", q)
	}
	for i, n := range backing[:3] {
		if n != nil {
			t.Fatalf("dropped entry %d still holds %s", i, n.id)
		}
	}
	if q = dropHead(q, 1); len(q) != 0 || backing[3] != nil {
		t.Fatalf("dropHead of the whole queue left %v (array: %v)", q, backing[3])
	}
	if q = dropHead(append(q, nodes[0]), 0); len(q) != 1 || q[0] != nodes[0] {
		t.Fatalf("dropHead(q, 0) = %v, want q", q)
	}
}
