package scheduler

import (
	"slices"
	"time"

	"github.com/convergehq/converge"
)

// batcher is the loop's write part: every change not yet handed to the
// store (rows, edges, deliveries, events, metadata) and the state of the
// commit in flight. flush.go builds and commits its batches.
type batcher struct {
	// pending writes: rows never handed to the store (dirty, in the
	// order made) and changes of stored rows (updated)
	dirty   []*node
	updated []*node
	// goneQueued counts the removed nodes still in dirty or updated
	// (dropRemoved): a cascade's rows, queued as Deleting, mostly go
	// before their turn to be written.
	goneQueued  int
	rollupDirty []*node
	deferred    []*node   // big rows whose rollup or reason waits (markDirtySoon)
	deferDue    time.Time // when the deferred rows are written
	reasonDirty []*node
	delRes      map[converge.ID]bool
	// delOrder holds delRes's IDs in the order their rows went (an ID
	// no longer in delRes is skipped): a batch deletes the oldest
	// MaxCommit, so an owner's row never goes before its children's, nor
	// a producer's before its consumers', and a cascade's commits stay
	// bounded however fast its teardowns end.
	delOrder    []converge.ID
	delPeak     int // the most entries delRes held since it was made
	edgePut     map[edgeKey]*converge.Edge
	edgePutPeak int // the most entries edgePut held since it was made
	edgeDel     map[edgeKey]bool
	delivDirty  map[string]*converge.Delivery
	delivGone   []goneDelivery // done deliveries to delete (reactor.go)
	meta        converge.Batch // kinds, configs, bindings, applied
	// events are the events not yet in a batch, oldest first, from
	// evHead on: taking a batch's worth from the front moves nothing (a
	// million events waited behind a composition, and each batch moved
	// the rest). At most maxEvents wait (0: no bound): the store keeps
	// only its newest MaxEvents, so older ones would be trimmed as they
	// arrive; evDropped counts those dropped unwritten.
	events    []converge.Event
	evHead    int
	maxEvents int
	evDropped uint64
	eventSeq  uint64
	flushAt   time.Time
	// committing: a batch is with the committer goroutine (Run only);
	// failed is that batch, or one whose commit failed, until durable.
	committing bool
	failed     *converge.Batch
	// batchNodes are the nodes whose rows are in failed (mInBatch).
	batchNodes []*node
	commitErr  string // the newest failed commit's error, "" after a success
	refused    int    // nodes the store refused (refusals > 0)
	bufs       [2]batchBufs
	spare      int
	commitReq  chan *converge.Batch
	commitRes  chan error
	// interval is Config.FlushInterval.
	interval time.Duration
}

// armFlush arms the flush timer one interval from now, unless it is
// armed already.
func (b *batcher) armFlush(now time.Time) {
	if b.flushAt.IsZero() {
		b.flushAt = now.Add(b.interval)
	}
}

// putEdge records e as a pending write.
func (b *batcher) putEdge(e *converge.Edge, now time.Time) {
	k := edgeKey{e.Consumer, e.Producer}
	delete(b.edgeDel, k)
	b.edgePut[k] = e
	b.armFlush(now)
}

// delEdge records the deletion of e as a pending write.
func (b *batcher) delEdge(e *converge.Edge, now time.Time) {
	k := edgeKey{e.Consumer, e.Producer}
	delete(b.edgePut, k)
	b.edgeDel[k] = true
	b.armFlush(now)
}

// markRollup queues a write of n's rollup (flush writes it once per
// batch, however often its subtree changed).
func (b *batcher) markRollup(n *node, now time.Time) {
	if n.has(mRollupDirty) || n.is(stateRemoved) {
		return
	}
	n.set(mRollupDirty)
	b.rollupDirty = append(b.rollupDirty, n)
	b.armFlush(now)
}

// markReason queues a refresh of n's teardown reason.
func (b *batcher) markReason(n *node, now time.Time) {
	if n.has(mReasonDirty) || n.is(stateRemoved) {
		return
	}
	n.set(mReasonDirty)
	b.reasonDirty = append(b.reasonDirty, n)
	b.armFlush(now)
}

// retryLater arms the flush that commits a failed batch again.
func (b *batcher) retryLater(now time.Time) {
	b.flushAt = now.Add(max(b.interval, 100*time.Millisecond))
}

// hasPending reports whether anything waits to be written.
func (b *batcher) hasPending() bool {
	return len(b.dirty) > 0 || len(b.updated) > 0 || len(b.rollupDirty) > 0 || len(b.reasonDirty) > 0 || len(b.delRes) > 0 ||
		len(b.edgePut) > 0 || len(b.edgeDel) > 0 || len(b.delivDirty) > 0 || len(b.delivGone) > 0 || len(b.events) > b.evHead ||
		!b.meta.Empty()
}

// durable reports whether everything the loop changed is in the store:
// nothing pending (deferred big rows included), no batch with the
// committer or waiting to be retried.
func (b *batcher) durable() bool {
	return !b.committing && b.failed == nil && len(b.deferred) == 0 && !b.hasPending()
}

// queueRow queues n's row, just marked dirty: a change of a stored row
// is an update (committed first), a row never handed to the store is
// new (committed in the order made).
func (b *batcher) queueRow(n *node, now time.Time) {
	if n.has(mStored) {
		b.updated = append(b.updated, n)
	} else {
		b.dirty = append(b.dirty, n)
	}
	b.armFlush(now)
}

// deferRow queues a change of a big row's rollup or reason alone, to be
// written within bigRowEvery (markDirtySoon).
func (b *batcher) deferRow(n *node, now time.Time) {
	if n.has(mDeferred) {
		return
	}
	n.set(mDeferred)
	b.deferred = append(b.deferred, n)
	if b.deferDue.IsZero() {
		b.deferDue = now.Add(bigRowEvery)
	}
	b.armDeferred()
}

// addEvent numbers and queues an event.
func (b *batcher) addEvent(now time.Time, id converge.ID, typ, msg string) {
	b.eventSeq++
	b.events = append(b.events, converge.Event{Seq: b.eventSeq, Time: now, Resource: id, Type: typ, Message: msg})
	if b.maxEvents > 0 && len(b.events)-b.evHead > b.maxEvents {
		b.events[b.evHead] = converge.Event{}
		b.evHead++
		b.evDropped++
		b.compactEvents()
	}
	b.armFlush(now)
}

// armDeferred arms the flush timer for the deferred big rows' due time.
func (b *batcher) armDeferred() {
	if len(b.deferred) > 0 && (b.flushAt.IsZero() || b.flushAt.After(b.deferDue)) {
		b.flushAt = b.deferDue
	}
}

// goneDeliveries returns the delivery keys the batch being built deletes:
// those whose subject is gone or whose row is in this batch or an earlier
// one (not dirty). The others wait for their row. A delete wins over a
// pending put of the same key.
func (b *batcher) goneDeliveries() []string {
	if len(b.delivGone) == 0 {
		return nil
	}
	var out []string
	keep := b.delivGone[:0]
	for _, g := range b.delivGone {
		// Kept while its subject's row is not written yet, or its
		// deletion waits for a later batch (takeDeleted).
		if g.n != nil && (!g.n.is(stateRemoved) && g.n.has(mDirty) || g.n.is(stateRemoved) && b.delRes[g.n.id]) {
			keep = append(keep, g)
			continue
		}
		out = append(out, g.key)
		delete(b.delivDirty, g.key)
	}
	clear(b.delivGone[len(keep):])
	b.delivGone = keep
	return out
}

// dropDelivery deletes the done delivery key from the store, with or
// after n's row.
func (b *batcher) dropDelivery(key string, n *node, now time.Time) {
	b.delivGone = append(b.delivGone, goneDelivery{key: key, n: n})
	b.armFlush(now)
}

// pickRows returns the rows of the next batch, at most limit: changes of
// stored rows first, then new rows, at least a quarter of the batch,
// oldest first. A big row among the changes goes first, with a quarter
// of the rows. The caller drops what it took from the heads of updated
// and dirty.
func (b *batcher) pickRows(limit int) (upd, fresh []*node) {
	newRoom := min(len(b.dirty), limit/4)
	upd = b.updated[:min(len(b.updated), limit-newRoom)]
	if k := bigIndex(upd); k >= 0 && len(upd)+len(b.dirty) > limit/4 {
		// A big row (a root's megabytes of spec) makes its commit
		// long by itself: it goes first, with a quarter of the
		// rows. Rows already stored may change places; new ones
		// keep their order.
		upd[0], upd[k] = upd[k], upd[0]
		limit = max(1, limit/4)
		newRoom = min(len(b.dirty), limit/4)
		upd = upd[:min(len(upd), max(1, limit-newRoom))]
	}
	fresh = b.dirty[:min(len(b.dirty), max(0, limit-len(upd)))]
	return upd, fresh
}

// takeEdgeDeletions empties the pending edge deletions into out, but
// those whose consumer's row is deleted (in deleted, this batch's
// sorted deletions, or pending for a later batch): the store deletes a
// row's edges with it, so writing them would be a write for nothing.
// Each pending deletion is looked at once: one kept for its consumer's
// later batch made every batch of a 1M cascade walk a million of them.
func (b *batcher) takeEdgeDeletions(deleted []converge.ID, out []converge.Edge) []converge.Edge {
	for k := range b.edgeDel {
		delete(b.edgeDel, k)
		if b.delRes[k.consumer] {
			continue
		}
		if _, gone := slices.BinarySearch(deleted, k.consumer); gone {
			continue
		}
		out = append(out, converge.Edge{Consumer: k.consumer, Producer: k.producer})
	}
	return out
}

// takeEvents takes the oldest events, at most limit, into buf's events
// (they are numbered already); a burst's buffer is not kept at its size.
func (b *batcher) takeEvents(limit int, buf *batchBufs) []converge.Event {
	take := min(len(b.events)-b.evHead, limit)
	out := append(buf.events[:0], b.events[b.evHead:b.evHead+take]...)
	buf.events = out
	clear(b.events[b.evHead : b.evHead+take])
	b.evHead += take
	if b.evHead == len(b.events) {
		b.events, b.evHead = b.events[:0], 0
		if cap(b.events) > 4*limit {
			b.events = nil // a burst's buffer is not kept at its size
		}
	} else {
		b.compactEvents()
	}
	if cap(buf.events) > 2*limit {
		buf.events = nil
	}
	return out
}

// compactEvents moves the waiting events to the front once the taken or
// dropped ones are half the slice: each event is moved about once.
func (b *batcher) compactEvents() {
	if b.evHead < 1024 || b.evHead < len(b.events)/2 {
		return
	}
	n := copy(b.events, b.events[b.evHead:])
	clear(b.events[n:])
	b.events, b.evHead = b.events[:n], 0
}

// batchBufs are reusable backing arrays of one Batch.

type batchBufs struct {
	rows   []converge.Resource
	ptrs   []*converge.Resource
	events []converge.Event
}

type edgeKey struct{ consumer, producer converge.ID }

// takeDeleted takes the oldest rows deleted, at most limit, in key order
// (the store's B-tree is rewritten once per page, not once per row). A
// batch of a whole cascade's deletions at once took 30-70 s in bbolt's
// rebalance on a loaded machine, and the longer it took the more the next
// one held.
func (b *batcher) takeDeleted(limit int) []converge.ID {
	b.delPeak = max(b.delPeak, len(b.delRes))
	ids := make([]converge.ID, 0, min(limit, len(b.delRes)))
	i := 0
	for ; i < len(b.delOrder) && len(ids) < limit; i++ {
		if id := b.delOrder[i]; b.delRes[id] {
			ids = append(ids, id)
			delete(b.delRes, id)
		}
	}
	clear(b.delOrder[:i])
	b.delOrder = b.delOrder[i:]
	if len(b.delOrder) == 0 {
		for id := range b.delRes { // none should be left: the order lost none
			ids = append(ids, id)
		}
		clear(b.delRes)
	}
	if len(b.delRes) == 0 {
		b.delOrder = nil
		// A Go map keeps its buckets when emptied: one that held a
		// cascade's million is made again.
		if b.delPeak > bigMap {
			b.delRes, b.delPeak = make(map[converge.ID]bool), 0
		}
	}
	slices.Sort(ids)
	return ids
}
