package etcdstate

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/internal/codec"
)

// Commit applies b atomically and durably: all of it or, on error, none
// of it (a batch bigger than one transaction goes through the batch
// journal, doc.go). It enforces the rules of the state package's
// documentation ("Rules a Batch must follow") exactly as the bbolt store
// does, refusing rows with a *converge.RejectedError, and numbers events
// the same way: a failed Commit leaves b.Events' Seqs as they were.
func (s *Store) Commit(b *converge.Batch) error {
	if b == nil || b.Empty() {
		return nil
	}
	if err := codec.Validate(b); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	orig := b.Events
	if len(orig) > 0 {
		c := *b
		c.Events = slices.Clone(orig)
		b = &c
	}
	err := s.update(func(w *wtx) error { return s.apply(w, b) })
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	for i := range orig {
		orig[i].Seq = b.Events[i].Seq
	}
	return nil
}

// update runs fn over a fresh write overlay, then writes what it
// changed (nothing if it changed nothing) and counts it in Stats.
func (s *Store) update(fn func(w *wtx) error) error {
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	err := s.updateOnce(fn)
	if err != nil && s.opts.termCtx != nil && s.opts.termCtx.Err() != nil {
		// The leader's term ended (its lease is gone): whatever was in
		// flight was cut short, and nothing more will be accepted.
		return fmt.Errorf("%w: the leader's term ended (%v)", ErrFenced, err)
	}
	return err
}

func (s *Store) updateOnce(fn func(w *wtx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.finish(); err != nil {
		return err
	}
	start := time.Now()
	ctx, cancel := s.writeContext()
	defer cancel()
	w := &wtx{s: s, ctx: ctx, read: map[string][]byte{}, ops: map[string]kvOp{}}
	if err := fn(w); err != nil {
		return err
	}
	if len(w.ops) == 0 {
		return nil
	}
	ops := make([]kvOp, 0, len(w.ops))
	for _, op := range w.ops {
		ops = append(ops, op)
	}
	slices.SortFunc(ops, func(a, b kvOp) int { return cmp.Compare(a.key, b.key) })
	done, err := s.write(ctx, ops)
	if err != nil {
		return err
	}
	s.count(done, time.Since(start))
	return nil
}

// wtx is one write: reads go to etcd once per key (and see this write's
// own changes), writes collect in ops, one per key, the last winning.
type wtx struct {
	s    *Store
	ctx  context.Context
	mu   sync.Mutex        // guards read (prefetch fills it concurrently)
	read map[string][]byte // key → stored value, nil if absent
	ops  map[string]kvOp
}

// get returns key's value as this write leaves it, or nil.
func (w *wtx) get(key string) ([]byte, error) {
	if op, ok := w.ops[key]; ok {
		if op.del {
			return nil, nil
		}
		return op.val, nil
	}
	w.mu.Lock()
	v, ok := w.read[key]
	w.mu.Unlock()
	if ok {
		return v, nil
	}
	if err := w.prefetch([]string{key}); err != nil {
		return nil, err
	}
	return w.read[key], nil
}

// prefetch reads the keys not read yet, MaxTxnOps a transaction, a few
// transactions at once.
func (w *wtx) prefetch(keys []string) error {
	var missing []string
	seen := map[string]bool{}
	for _, k := range keys {
		if _, ok := w.read[k]; !ok && !seen[k] {
			if _, ok := w.ops[k]; !ok {
				missing = append(missing, k)
				seen[k] = true
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	n := w.s.opts.MaxTxnOps
	groups := (len(missing) + n - 1) / n
	return parallel(groups, readWidth, func(g int) error {
		part := missing[g*n : min(len(missing), (g+1)*n)]
		gets := make([]clientv3.Op, len(part))
		for i, k := range part {
			gets[i] = clientv3.OpGet(w.s.p + k)
		}
		resp, err := w.s.cli.Txn(w.ctx).Then(gets...).Commit()
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for i, r := range resp.Responses {
			var v []byte
			if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
				v = kvs[0].Value
				if v == nil {
					v = []byte{}
				}
			}
			w.read[part[i]] = v
		}
		return nil
	})
}

// has reports whether key exists as this write leaves it.
func (w *wtx) has(key string) (bool, error) {
	if op, ok := w.ops[key]; ok {
		return !op.del, nil
	}
	v, err := w.get(key)
	return v != nil, err
}

func (w *wtx) put(key string, val []byte) { w.ops[key] = kvOp{key: key, val: val} }

// del deletes key unless it is known to be absent.
func (w *wtx) del(key string) {
	if _, ok := w.ops[key]; !ok {
		w.mu.Lock()
		v, read := w.read[key]
		w.mu.Unlock()
		if read && v == nil {
			return
		}
	}
	w.ops[key] = kvOp{key: key, del: true}
}

// putIfChanged puts key=val unless the stored value is equal.
func (w *wtx) putIfChanged(key string, val []byte) error {
	old, err := w.get(key)
	if err != nil {
		return err
	}
	if old != nil && bytes.Equal(old, val) {
		return nil
	}
	w.put(key, val)
	return nil
}

func (w *wtx) putJSON(key string, v any) error {
	j, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	return w.putIfChanged(key, j)
}

// readWidth is how many read requests one read has in flight at once.
const readWidth = 16

// parallel runs fn(0..n-1) on up to width goroutines and returns the
// first error.
func parallel(n, width int, fn func(i int) error) error {
	if n == 1 {
		return fn(0)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex // guards first and next
		first error
		next  int
	)
	for range min(n, width) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil
				mu.Unlock()
				if i >= n || stop {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return first
}

func resKey(id converge.ID) string             { return kResources + string(id) }
func ownerKey(owner, child converge.ID) string { return kOwners + string(codec.PairKey(owner, child)) }
func ownerPrefix(owner converge.ID) string     { return kOwners + string(codec.PrefixKey(owner)) }
func revKey(producer, consumer converge.ID) string {
	return kProducers + string(codec.PairKey(producer, consumer))
}
func eventKey(seq uint64) string { return kEvents + string(u64(seq)) }

// edgeOp is one change to a consumer's edges.
type edgeOp struct {
	producer converge.ID
	flows    []converge.ValueFlow
	del      bool
}

// apply computes the writes of b in w, mirroring the bbolt store's
// apply (state/commit.go) rule for rule over this layout: resources
// with their edges, other consumers' edges, deletions, the orphan
// checks, then kinds, configs, bindings, deliveries, events and the
// applied revision.
func (s *Store) apply(w *wtx, b *converge.Batch) error {
	var rejected []converge.RowError
	ops := make(map[converge.ID][]edgeOp)
	for _, e := range b.Edges {
		ops[e.Consumer] = append(ops[e.Consumer], edgeOp{producer: e.Producer, flows: e.Flows})
	}
	for _, e := range b.DeletedEdges {
		ops[e.Consumer] = append(ops[e.Consumer], edgeOp{producer: e.Producer, del: true})
	}
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

	// Read every row this batch may need in a few round trips.
	var keys []string
	for _, i := range order {
		keys = append(keys, resKey(ids[i]))
		if o := b.Resources[i].Owner; o != "" {
			keys = append(keys, resKey(o))
		}
	}
	for c := range ops {
		keys = append(keys, resKey(c))
	}
	for _, id := range b.DeletedResources {
		keys = append(keys, resKey(id))
	}
	if err := w.prefetch(keys); err != nil {
		return err
	}

	idx := ownerChanges{}
	var rev []revOp
	for _, i := range order {
		r, id := b.Resources[i], ids[i]
		old, err := w.get(resKey(id))
		if err != nil {
			return err
		}
		var oldRow codec.Row
		if old != nil {
			if oldRow, err = codec.SplitRow(old); err != nil {
				return fmt.Errorf("resource %s: stored: %w", id, err)
			}
		}
		edges := oldRow.Edges
		if o, ok := ops[id]; ok {
			delete(ops, id)
			var added, removed []converge.ID
			if edges, added, removed, err = applyEdgeOps(id, oldRow.Edges, o); err != nil {
				return err
			}
			rev = queueRev(rev, id, added, removed)
		}
		v, err := codec.EncodeResource(r, edges)
		if err != nil {
			rejected = append(rejected, converge.RowError{ID: id, Err: fmt.Errorf("encode: %w", err)})
			continue
		}
		// One value must fit one etcd request: a row over the limit is
		// refused like any bad row, so it cannot hold up the others.
		if n := len(v) + len(resKey(id)); n > s.opts.MaxTxnBytes-1024 {
			rejected = append(rejected, converge.RowError{ID: id, Err: fmt.Errorf("row of %d bytes: over the %d bytes one etcd write may carry", n, s.opts.MaxTxnBytes-1024)})
			continue
		}
		if old == nil || !bytes.Equal(old, v) {
			w.put(resKey(id), v)
		}
		if old != nil && oldRow.Owner == r.Owner {
			continue
		}
		if old != nil {
			idx.remove(w, oldRow.Owner, id)
		}
		idx.add(w, r.Owner, id)
	}

	consumers := make([]converge.ID, 0, len(ops))
	for c := range ops {
		consumers = append(consumers, c)
	}
	slices.Sort(consumers)
	for _, c := range consumers {
		var err error
		if rev, err = rewriteEdges(w, c, ops[c], rev); err != nil {
			return err
		}
	}

	for _, id := range b.DeletedResources {
		old, err := w.get(resKey(id))
		if err != nil {
			return err
		}
		if old == nil {
			continue
		}
		rw, err := codec.SplitRow(old)
		if err != nil {
			return fmt.Errorf("resource %s: stored: %w", id, err)
		}
		es, err := codec.DecodeEdges(rw.Edges)
		if err != nil {
			return fmt.Errorf("resource %s: stored: %w", id, err)
		}
		for _, e := range es {
			rev = append(rev, revOp{key: revKey(e.Producer, id), del: true})
		}
		w.del(resKey(id))
		idx.remove(w, rw.Owner, id)
	}

	for _, i := range order {
		r := b.Resources[i]
		if r.Owner == "" {
			continue
		}
		ok, err := w.has(resKey(r.Owner))
		if err != nil {
			return err
		}
		if !ok {
			rejected = append(rejected, converge.RowError{ID: ids[i], Err: fmt.Errorf("owner %s does not exist", r.Owner)})
		}
	}
	if len(rejected) > 0 {
		return &converge.RejectedError{Rows: rejected}
	}
	if err := idx.checkDeleted(w, b.DeletedResources); err != nil {
		return err
	}

	// The reverse edge index, the last change of a key winning.
	slices.SortStableFunc(rev, func(a, b revOp) int { return cmp.Compare(a.key, b.key) })
	for i, op := range rev {
		if i+1 < len(rev) && rev[i+1].key == op.key {
			continue
		}
		if op.del {
			w.del(op.key)
		} else {
			w.put(op.key, []byte{})
		}
	}

	// Kinds, configs, bindings, deliveries: read what they replace first.
	keys = keys[:0]
	for _, k := range b.Kinds {
		keys = append(keys, kKinds+string(codec.KindKey(k.Ref())))
	}
	for _, c := range b.Configs {
		keys = append(keys, kConfigs+c.Name)
	}
	for _, bd := range b.Bindings {
		keys = append(keys, kBindings+bd.Name)
	}
	for _, d := range b.Deliveries {
		keys = append(keys, kDeliveries+d.Key)
	}
	for _, k := range b.DeletedDeliveries {
		keys = append(keys, kDeliveries+k)
	}
	if b.Applied != nil {
		keys = append(keys, mApplied)
	}
	if len(b.Events) > 0 {
		keys = append(keys, mEvents)
	}
	if err := w.prefetch(keys); err != nil {
		return err
	}
	for _, k := range b.Kinds {
		if err := w.putJSON(kKinds+string(codec.KindKey(k.Ref())), k); err != nil {
			return fmt.Errorf("kind %s: %w", k.Ref(), err)
		}
	}
	for _, ref := range b.DeletedKinds {
		w.del(kKinds + string(codec.KindKey(ref)))
	}
	for _, c := range b.Configs {
		if err := w.putJSON(kConfigs+c.Name, c); err != nil {
			return fmt.Errorf("provider config %s: %w", c.Name, err)
		}
	}
	for _, name := range b.DeletedConfigs {
		w.del(kConfigs + name)
	}
	for _, bd := range b.Bindings {
		if err := w.putJSON(kBindings+bd.Name, bd); err != nil {
			return fmt.Errorf("binding %s: %w", bd.Name, err)
		}
	}
	for _, name := range b.DeletedBindings {
		w.del(kBindings + name)
	}
	for _, d := range b.Deliveries {
		if err := w.putJSON(kDeliveries+d.Key, d); err != nil {
			return fmt.Errorf("delivery %s: %w", d.Key, err)
		}
	}
	for _, k := range b.DeletedDeliveries {
		w.del(kDeliveries + k)
	}
	if len(b.Events) > 0 {
		if err := s.appendEvents(w, b.Events); err != nil {
			return err
		}
	}
	if b.Applied != nil {
		if err := w.putJSON(mApplied, b.Applied); err != nil {
			return fmt.Errorf("applied revision: %w", err)
		}
	}
	return nil
}

// applyEdgeOps applies ops to the edges section of consumer's row and
// returns the new section and the producers added and removed.
func applyEdgeOps(consumer converge.ID, section []byte, ops []edgeOp) (out []byte, added, removed []converge.ID, err error) {
	es, err := codec.DecodeEdges(section)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("resource %s: stored: %w", consumer, err)
	}
	changed := false
	for _, op := range ops {
		i := slices.IndexFunc(es, func(e codec.StoredEdge) bool { return e.Producer == op.producer })
		switch {
		case op.del && i >= 0:
			es = slices.Delete(es, i, i+1)
			removed = append(removed, op.producer)
			changed = true
		case op.del:
		case i < 0:
			es = append(es, codec.StoredEdge{Producer: op.producer, Flows: op.flows})
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
	out, err = codec.EncodeEdges(es)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("edges of %s: encode: %w", consumer, err)
	}
	return out, added, removed, nil
}

// revOp is one pending change of the reverse edge index.
type revOp struct {
	key string
	del bool
}

func queueRev(rev []revOp, consumer converge.ID, added, removed []converge.ID) []revOp {
	for _, p := range added {
		rev = append(rev, revOp{key: revKey(p, consumer)})
	}
	for _, p := range removed {
		rev = append(rev, revOp{key: revKey(p, consumer), del: true})
	}
	return rev
}

// rewriteEdges applies ops to the stored row of consumer. A consumer
// that does not exist may only lose edges (removing stray reverse
// entries); giving it one is an error.
func rewriteEdges(w *wtx, consumer converge.ID, ops []edgeOp, rev []revOp) ([]revOp, error) {
	old, err := w.get(resKey(consumer))
	if err != nil {
		return nil, err
	}
	if old == nil {
		for _, op := range ops {
			if !op.del {
				return nil, fmt.Errorf("edge %s→%s: consumer %s does not exist", consumer, op.producer, consumer)
			}
			rev = append(rev, revOp{key: revKey(op.producer, consumer), del: true})
		}
		return rev, nil
	}
	rw, err := codec.SplitRow(old)
	if err != nil {
		return nil, fmt.Errorf("resource %s: stored: %w", consumer, err)
	}
	edges, added, removed, err := applyEdgeOps(consumer, rw.Edges, ops)
	if err != nil {
		return nil, err
	}
	if len(added)+len(removed) > 0 || !bytes.Equal(edges, rw.Edges) {
		w.put(resKey(consumer), rw.WithEdges(edges))
	}
	return queueRev(rev, consumer, added, removed), nil
}

// ownerChanges records what a write did to the owner index: owner →
// child → added (true) or removed (false), the last change winning.
type ownerChanges map[converge.ID]map[converge.ID]bool

func (c ownerChanges) set(owner, child converge.ID, added bool) {
	if c[owner] == nil {
		c[owner] = map[converge.ID]bool{}
	}
	c[owner][child] = added
}

func (c ownerChanges) add(w *wtx, owner, child converge.ID) {
	w.put(ownerKey(owner, child), []byte{})
	c.set(owner, child, true)
}

func (c ownerChanges) remove(w *wtx, owner, child converge.ID) {
	w.del(ownerKey(owner, child))
	c.set(owner, child, false)
}

// checkDeleted refuses the write if a deleted resource still owns one
// after it: a child added in this write, or a stored one it does not
// remove. The stored index is read once per deleted resource, a few at
// once.
func (c ownerChanges) checkDeleted(w *wtx, deleted []converge.ID) error {
	owns := make([]converge.ID, len(deleted))
	err := parallel(max(1, len(deleted)), readWidth, func(i int) error {
		if len(deleted) == 0 {
			return nil
		}
		id := deleted[i]
		removed := 0
		for child, added := range c[id] {
			if added {
				owns[i] = child
				return nil
			}
			removed++
		}
		p := w.s.p + ownerPrefix(id)
		resp, err := w.s.cli.Get(w.ctx, p, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(removed+1)))
		if err != nil {
			return fmt.Errorf("read owner index of %s: %w", id, err)
		}
		for _, kv := range resp.Kvs {
			child := converge.ID(kv.Key[len(p):])
			if added, ok := c[id][child]; !ok || added {
				owns[i] = child
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, child := range owns {
		if child != "" {
			return fmt.Errorf("delete %s: it still owns %s (delete the children first or in the same batch)", deleted[i], child)
		}
	}
	return nil
}

// appendEvents numbers evs, stores them as one chunk keyed by the first
// Seq, updates the events meta and trims the oldest chunks beyond
// MaxEvents, as the bbolt store does.
func (s *Store) appendEvents(w *wtx, evs []converge.Event) error {
	mv, err := w.get(mEvents)
	if err != nil {
		return err
	}
	lastSeq, count := eventsMeta(mv)
	for i := range evs {
		e := &evs[i]
		if e.Seq == 0 {
			e.Seq = lastSeq + 1
		} else if e.Seq <= lastSeq {
			return fmt.Errorf("event %d (%s %s): seq %d not above %d", i, e.Resource, e.Type, e.Seq, lastSeq)
		}
		lastSeq = e.Seq
	}
	fresh, err := encodeChunks(evs, s.opts.MaxTxnBytes/4)
	if err != nil {
		return fmt.Errorf("events: encode: %w", err)
	}
	for _, ck := range fresh {
		w.put(ck.key, ck.val)
	}
	count += uint64(len(evs))

	limit := uint64(s.opts.MaxEvents)
	var queue []chunkKV // stored chunks, oldest first, not yet trimmed
	from := s.p + kEvents
	storedDone := false
	for count > limit {
		if len(queue) == 0 && !storedDone {
			resp, err := s.cli.Get(w.ctx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(s.p+kEvents)), clientv3.WithLimit(64))
			if err != nil {
				return fmt.Errorf("events: read: %w", err)
			}
			for _, kv := range resp.Kvs {
				queue = append(queue, chunkKV{key: string(kv.Key[len(s.p):]), val: kv.Value})
			}
			if len(resp.Kvs) > 0 {
				from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
			}
			if !resp.More {
				storedDone = true
			}
		}
		var ck chunkKV
		switch {
		case len(queue) > 0:
			ck, queue = queue[0], queue[1:]
		case len(fresh) > 0: // this batch's own chunks, once the stored ones are gone
			ck, fresh = fresh[0], fresh[1:]
		default:
			return fmt.Errorf("events: %d counted, no chunk holds them", count)
		}
		n, err := codec.ChunkLen(ck.val)
		if err != nil {
			return fmt.Errorf("events: chunk %s: %w", ck.key, err)
		}
		if count-uint64(n) >= limit {
			w.del(ck.key)
			count -= uint64(n)
			continue
		}
		old, err := codec.DecodeChunk(ck.val)
		if err != nil {
			return fmt.Errorf("events: chunk %s: %w", ck.key, err)
		}
		keep := old[count-limit:]
		nv, err := codec.EncodeChunk(keep)
		if err != nil {
			return fmt.Errorf("events: encode: %w", err)
		}
		w.del(ck.key)
		w.put(eventKey(keep[0].Seq), nv)
		count = limit
	}
	w.put(mEvents, binary.BigEndian.AppendUint64(u64(lastSeq), count))
	return nil
}

type chunkKV struct {
	key string
	val []byte
}

// encodeChunks encodes evs as event chunks of at most max bytes each
// (one event bigger than that gets a chunk of its own): one etcd value
// must fit one request, and a batch may carry thousands of events. The
// bbolt store writes a batch's events as one chunk; the format is the
// same, keyed by each chunk's first Seq.
func encodeChunks(evs []converge.Event, max int) ([]chunkKV, error) {
	v, err := codec.EncodeChunk(evs)
	if err != nil {
		return nil, err
	}
	if len(v) <= max || len(evs) == 1 {
		return []chunkKV{{key: eventKey(evs[0].Seq), val: v}}, nil
	}
	half := len(evs) / 2
	a, err := encodeChunks(evs[:half], max)
	if err != nil {
		return nil, err
	}
	b, err := encodeChunks(evs[half:], max)
	if err != nil {
		return nil, err
	}
	return append(a, b...), nil
}

// eventsMeta decodes the events meta value: last Seq and count.
func eventsMeta(v []byte) (lastSeq, count uint64) {
	if len(v) != 16 {
		return 0, 0
	}
	return binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])
}
