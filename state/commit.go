package state

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/convergehq/converge"
)

// Commit applies b in one bbolt transaction, durably (fsync) unless the
// store was opened with NoSync: all of it or, on error, none of it. The
// rules it enforces are in the package documentation ("Rules a Batch must
// follow"). Commit numbers each event of b whose Seq is 0 with the next
// sequence number and, once committed, sets those Seqs in b.Events (a
// failed Commit leaves them 0); nonzero Seqs must increase and exceed
// every stored one. An empty batch commits nothing.
func (s *Store) Commit(b *converge.Batch) error {
	if b == nil || b.Empty() {
		return nil
	}
	if err := validate(b); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	// Number a copy of the events: a failed Commit leaves b as it was,
	// so a retry numbers them afresh.
	orig := b.Events
	if len(orig) > 0 {
		c := *b
		c.Events = slices.Clone(orig)
		b = &c
	}
	err := s.update(func(w *writer) error { return s.apply(w, b) })
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	for i := range orig {
		orig[i].Seq = b.Events[i].Seq
	}
	return nil
}

// edgeOp is one change to a consumer's edges: put (with flows) or delete
// the edge to producer.
type edgeOp struct {
	producer converge.ID
	flows    []converge.ValueFlow
	del      bool
}

// apply writes b through w. Order: resources (with the edges of the
// resources put), the edges of other consumers, deleted resources (with
// their index entries and edges), then the orphan checks, then kinds,
// configs, bindings, deliveries (puts, then deletes), events and the
// applied revision.
func (s *Store) apply(w *writer, b *converge.Batch) error {
	res := w.bucket(bResources)
	idx := newOwnerIndex(w)
	var rejected []converge.RowError

	// Edge changes by consumer: puts, then deletes (validate refused a
	// pair in both).
	ops := make(map[converge.ID][]edgeOp)
	for _, e := range b.Edges {
		ops[e.Consumer] = append(ops[e.Consumer], edgeOp{producer: e.Producer, flows: e.Flows})
	}
	for _, e := range b.DeletedEdges {
		ops[e.Consumer] = append(ops[e.Consumer], edgeOp{producer: e.Producer, del: true})
	}

	// Resources, last put of an ID wins, applied in key order: the
	// B-tree is walked once left to right instead of at random.
	ids := make([]converge.ID, len(b.Resources))
	last := make(map[converge.ID]int, len(b.Resources))
	for i, r := range b.Resources {
		ids[i] = r.ID()
		last[ids[i]] = i
	}
	order := make([]int, 0, len(last))
	for i, id := range ids {
		if last[id] == i {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(x, y int) int { return cmp.Compare(ids[x], ids[y]) })
	for _, i := range order {
		r, id := b.Resources[i], ids[i]
		key := []byte(id)
		old := res.Get(key)
		var oldRow row
		if old != nil {
			var err error
			if oldRow, err = splitRow(old); err != nil {
				return fmt.Errorf("resource %s: stored: %w", id, err)
			}
		}
		edges := oldRow.Edges
		var added, removed []converge.ID
		if o, ok := ops[id]; ok {
			delete(ops, id)
			var err error
			if edges, added, removed, err = applyEdgeOps(id, oldRow.Edges, o); err != nil {
				return err
			}
		}
		v, err := encodeResource(r, edges)
		if err != nil {
			// Refused rows are collected, not fatal at once: the
			// caller learns every row to take out in one round.
			rejected = append(rejected, converge.RowError{ID: id, Err: fmt.Errorf("encode: %w", err)})
			continue
		}
		if old == nil || string(old) != string(v) {
			if err := w.put(bResources, key, v); err != nil {
				return err
			}
		}
		if err := reverseIndex(w, id, added, removed); err != nil {
			return err
		}
		if old != nil && oldRow.Owner == r.Owner {
			continue
		}
		// Roots are indexed too, under the empty owner: listing them
		// must not scan every resource.
		if old != nil {
			if err := idx.remove(oldRow.Owner, id); err != nil {
				return err
			}
		}
		if err := idx.add(r.Owner, id); err != nil {
			return err
		}
	}

	// Edges of consumers not put in this batch, in key order.
	consumers := make([]converge.ID, 0, len(ops))
	for c := range ops {
		consumers = append(consumers, c)
	}
	slices.Sort(consumers)
	for _, c := range consumers {
		if err := rewriteEdges(w, c, ops[c]); err != nil {
			return err
		}
	}

	// Deleted resources, with their owner-index entry and all their edges.
	for _, id := range b.DeletedResources {
		if err := deleteResource(w, idx, id); err != nil {
			return err
		}
	}

	// No orphans: owners of put resources exist, deleted ones own nothing.
	for _, i := range order {
		r := b.Resources[i]
		if r.Owner == "" {
			continue
		}
		if !has(res, []byte(r.Owner)) {
			rejected = append(rejected, converge.RowError{ID: ids[i], Err: fmt.Errorf("owner %s does not exist", r.Owner)})
		}
	}
	if len(rejected) > 0 {
		return &converge.RejectedError{Rows: rejected}
	}
	for _, id := range b.DeletedResources {
		child, err := idx.firstChild(id)
		if err != nil {
			return err
		}
		if child != "" {
			return fmt.Errorf("delete %s: it still owns %s (delete the children first or in the same batch)", id, child)
		}
	}
	if err := idx.flush(); err != nil {
		return err
	}
	if err := flushReverse(w); err != nil {
		return err
	}

	// Kinds, configs, bindings, deliveries.
	for _, k := range b.Kinds {
		if err := putJSON(w, bKinds, kindKey(k.Ref()), k); err != nil {
			return fmt.Errorf("kind %s: %w", k.Ref(), err)
		}
	}
	for _, ref := range b.DeletedKinds {
		if err := w.del(bKinds, kindKey(ref)); err != nil {
			return err
		}
	}
	for _, c := range b.Configs {
		if err := putJSON(w, bConfigs, []byte(c.Name), c); err != nil {
			return fmt.Errorf("provider config %s: %w", c.Name, err)
		}
	}
	for _, name := range b.DeletedConfigs {
		if err := w.del(bConfigs, []byte(name)); err != nil {
			return err
		}
	}
	for _, bd := range b.Bindings {
		if err := putJSON(w, bBindings, []byte(bd.Name), bd); err != nil {
			return fmt.Errorf("binding %s: %w", bd.Name, err)
		}
	}
	for _, name := range b.DeletedBindings {
		if err := w.del(bBindings, []byte(name)); err != nil {
			return err
		}
	}
	// Deliveries in key order, like every bucket a batch writes much of.
	delivs := slices.SortedFunc(slices.Values(b.Deliveries), func(x, y *converge.Delivery) int { return cmp.Compare(x.Key, y.Key) })
	for _, d := range delivs {
		if err := putJSON(w, bDeliveries, []byte(d.Key), d); err != nil {
			return fmt.Errorf("delivery %s: %w", d.Key, err)
		}
	}
	for _, k := range slices.Sorted(slices.Values(b.DeletedDeliveries)) {
		if err := w.del(bDeliveries, []byte(k)); err != nil {
			return err
		}
	}

	if len(b.Events) > 0 {
		if err := s.appendEvents(w, b.Events); err != nil {
			return err
		}
	}
	if b.Applied != nil {
		if err := putJSON(w, bMeta, mApplied, b.Applied); err != nil {
			return fmt.Errorf("applied revision: %w", err)
		}
	}
	return nil
}

// applyEdgeOps applies ops to the edges section of consumer's row and
// returns the new section and the producers added and removed.
func applyEdgeOps(consumer converge.ID, section []byte, ops []edgeOp) (out []byte, added, removed []converge.ID, err error) {
	es, err := decodeEdges(section)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("resource %s: stored: %w", consumer, err)
	}
	changed := false
	for _, op := range ops {
		i := slices.IndexFunc(es, func(e storedEdge) bool { return e.Producer == op.producer })
		switch {
		case op.del && i >= 0:
			es = slices.Delete(es, i, i+1)
			removed = append(removed, op.producer)
			changed = true
		case op.del:
		case i < 0:
			es = append(es, storedEdge{Producer: op.producer, Flows: op.flows})
			added = append(added, op.producer)
			changed = true
		case !slices.Equal(es[i].Flows, op.flows):
			es[i].Flows = op.flows
			changed = true
		}
	}
	if !changed {
		return section, nil, nil, nil
	}
	out, err = encodeEdges(es)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("edges of %s: encode: %w", consumer, err)
	}
	return out, added, removed, nil
}

// revOp is one pending change of the reverse edge index.
type revOp struct {
	key []byte // producer\x00consumer
	del bool
}

// reverseIndex queues the addition and removal of producer\x00consumer
// entries; flushReverse writes them.
func reverseIndex(w *writer, consumer converge.ID, added, removed []converge.ID) error {
	for _, p := range added {
		w.rev = append(w.rev, revOp{key: pairKey(p, consumer)})
	}
	for _, p := range removed {
		w.rev = append(w.rev, revOp{key: pairKey(p, consumer), del: true})
	}
	return nil
}

// flushReverse writes the queued reverse-index changes in key order.
// They arrive in consumer order, which is random in producer order; bbolt
// splits no leaf until commit, so random inserts into one transaction
// memmove a growing node on every put (quadratic in the batch). The last
// change of a key wins.
func flushReverse(w *writer) error {
	slices.SortStableFunc(w.rev, func(a, b revOp) int { return bytes.Compare(a.key, b.key) })
	b := w.bucket(bProducers)
	for i, op := range w.rev {
		if i+1 < len(w.rev) && bytes.Equal(op.key, w.rev[i+1].key) {
			continue
		}
		if op.del {
			if err := w.del(bProducers, op.key); err != nil {
				return err
			}
		} else if !has(b, op.key) {
			if err := w.put(bProducers, op.key, empty); err != nil {
				return err
			}
		}
	}
	w.rev = w.rev[:0]
	return nil
}

// rewriteEdges applies ops to the stored row of consumer. A consumer that
// does not exist may only lose edges (a no-op but for stray reverse
// entries); giving it one is an error.
func rewriteEdges(w *writer, consumer converge.ID, ops []edgeOp) error {
	key := []byte(consumer)
	old := w.bucket(bResources).Get(key)
	if old == nil {
		for _, op := range ops {
			if !op.del {
				return fmt.Errorf("edge %s→%s: consumer %s does not exist", consumer, op.producer, consumer)
			}
			w.rev = append(w.rev, revOp{key: pairKey(op.producer, consumer), del: true})
		}
		return nil
	}
	rw, err := splitRow(old)
	if err != nil {
		return fmt.Errorf("resource %s: stored: %w", consumer, err)
	}
	edges, added, removed, err := applyEdgeOps(consumer, rw.Edges, ops)
	if err != nil {
		return err
	}
	if len(added)+len(removed) > 0 || string(edges) != string(rw.Edges) {
		if err := w.put(bResources, key, rw.WithEdges(edges)); err != nil {
			return err
		}
	}
	return reverseIndex(w, consumer, added, removed)
}

// deleteResource removes id, its owner-index entry and the edges it
// consumes (with their reverse entries). Edges other resources consume
// from id stay: a consumer that still names id is gated until id exists
// again (a composer re-creates it), and a caller that wants those edges
// gone deletes them, or their consumers, in the batch.
func deleteResource(w *writer, idx *ownerIndex, id converge.ID) error {
	key := []byte(id)
	old := w.bucket(bResources).Get(key)
	if old == nil {
		return nil
	}
	rw, err := splitRow(old)
	if err != nil {
		return fmt.Errorf("resource %s: stored: %w", id, err)
	}
	es, err := decodeEdges(rw.Edges)
	if err != nil {
		return fmt.Errorf("resource %s: stored: %w", id, err)
	}
	for _, e := range es {
		w.rev = append(w.rev, revOp{key: pairKey(e.Producer, id), del: true})
	}
	if err := w.del(bResources, key); err != nil {
		return err
	}
	return idx.remove(rw.Owner, id)
}

// appendEvents numbers evs, stores them as one chunk keyed by the first
// Seq, updates the events meta and trims the oldest chunks beyond
// MaxEvents.
func (s *Store) appendEvents(w *writer, evs []converge.Event) error {
	lastSeq, count := eventsMeta(w.bucket(bMeta))
	for i := range evs {
		e := &evs[i]
		if e.Seq == 0 {
			e.Seq = lastSeq + 1
		} else if e.Seq <= lastSeq {
			return fmt.Errorf("event %d (%s %s): seq %d not above %d", i, e.Resource, e.Type, e.Seq, lastSeq)
		}
		lastSeq = e.Seq
	}
	v, err := encodeChunk(evs)
	if err != nil {
		return fmt.Errorf("events: encode: %w", err)
	}
	if err := w.put(bEvents, u64(evs[0].Seq), v); err != nil {
		return err
	}
	count += uint64(len(evs))

	// Trim whole chunks from the oldest; cut the last one to size.
	max := uint64(s.maxEvents)
	eb := w.bucket(bEvents)
	for count > max {
		k, v := eb.Cursor().First()
		if k == nil {
			return fmt.Errorf("events: meta counts %d events, no chunk holds them", count)
		}
		n, err := chunkLen(v)
		if err != nil {
			return fmt.Errorf("events: chunk %d: %w", chunkSeq(k), err)
		}
		key := append([]byte(nil), k...)
		if count-uint64(n) >= max {
			if err := w.del(bEvents, key); err != nil {
				return err
			}
			count -= uint64(n)
			continue
		}
		old, err := decodeChunk(v)
		if err != nil {
			return fmt.Errorf("events: chunk %d: %w", chunkSeq(k), err)
		}
		keep := old[count-max:]
		nv, err := encodeChunk(keep)
		if err != nil {
			return fmt.Errorf("events: encode: %w", err)
		}
		if err := w.del(bEvents, key); err != nil {
			return err
		}
		if err := w.put(bEvents, u64(keep[0].Seq), nv); err != nil {
			return err
		}
		count = max
	}
	meta := binary.BigEndian.AppendUint64(u64(lastSeq), count)
	return w.put(bMeta, mEvents, meta)
}

// putJSON puts key=JSON(v) unless the stored value is equal.
func putJSON(w *writer, bucket, key []byte, v any) error {
	j, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err = w.putIfChanged(bucket, key, j)
	return err
}
