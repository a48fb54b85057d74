package rules

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/internal/codec"
)

// Commit applies b in one write transaction, all of it or, on error,
// none of it. The rules it enforces are in state's package documentation
// ("Rules a Batch must follow"). Commit numbers each event of b whose
// Seq is 0 with the next sequence number and, once committed, sets those
// Seqs in b.Events (a failed Commit leaves them 0); nonzero Seqs must
// increase and exceed every stored one. An empty batch commits nothing.
func (s *Store) Commit(ctx context.Context, b *converge.Batch) error {
	if b == nil || b.Empty() {
		return nil
	}
	if err := codec.Validate(b); err != nil {
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
	if err := s.update(ctx, func(w Writer) error { return s.apply(w, b) }); err != nil {
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

// revOp is one pending change of the reverse edge index.
type revOp struct {
	key []byte // producer\x00consumer
	del bool
}

// tx is what one Commit's apply keeps while it writes.
type tx struct {
	s   *Store
	w   Writer
	idx ownerTx
	rev []revOp // reverse-index changes, written last, in key order
	// rejected are the rows refused so far: collected, not fatal at
	// once, so the caller learns every row to take out in one round.
	rejected []converge.RowError
	// arena holds the rows encoded so far (appended in its spare
	// capacity): a KV keeps a value it was given until the transaction
	// ends, so an arena is never reused, only replaced when full.
	arena []byte
}

// ApartSize is the size of a declared spec from which it is stored apart
// from its row (in Specs, under the row's ID), the row keeping its
// digest.
const ApartSize = 256 << 10

// arenaSize is the size of a commit's row buffers: a few hundred rows.
const arenaSize = 256 << 10

// encodeRow encodes r's row with edges into t's arena; apart is the
// digest of its declared spec when that is stored apart, else nil.
func (t *tx) encodeRow(r *converge.Resource, edges, apart []byte) ([]byte, error) {
	if cap(t.arena)-len(t.arena) < arenaSize/16 {
		t.arena = make([]byte, 0, arenaSize)
	}
	var v []byte
	var err error
	if apart != nil {
		v, err = codec.AppendResourceApart(t.arena, r, edges, apart)
	} else {
		v, err = codec.AppendResource(t.arena, r, edges)
	}
	if err != nil {
		return nil, err
	}
	if end := len(t.arena) + len(v); end <= cap(t.arena) && len(v) > 0 && &t.arena[:end][len(t.arena)] == &v[0] {
		t.arena = t.arena[:end]
	}
	return v[:len(v):len(v)], nil
}

// apply writes b through w. Order: resources (with the edges of the
// resources put), the edges of other consumers, deleted resources (with
// their index entries and edges), then the orphan checks, the owner and
// reverse indexes, then kinds, configs, bindings, deliveries (puts, then
// deletes), events and the applied revision. Writes go in key order
// within each bucket: a B-tree is walked once left to right instead of
// at random.
func (s *Store) apply(w Writer, b *converge.Batch) error {
	t := &tx{s: s, w: w, idx: s.o.Owners.begin(w)}
	ops := edgeOps(b)
	ids, order := putOrder(b)
	if err := t.prefetchRows(b, ids, order, ops); err != nil {
		return err
	}
	for _, i := range order {
		if err := t.putResource(b.Resources[i], ids[i], ops); err != nil {
			return err
		}
	}
	// Edges of consumers not put in this batch, in key order.
	for _, c := range slices.Sorted(mapKeys(ops)) {
		if err := t.rewriteEdges(c, ops[c]); err != nil {
			return err
		}
	}
	// Deleted resources, with their owner-index entry and all their edges.
	for _, id := range b.DeletedResources {
		if err := t.deleteResource(id); err != nil {
			return err
		}
	}
	if err := t.checkOwners(b, ids, order); err != nil {
		return err
	}
	if err := t.idx.flush(); err != nil {
		return err
	}
	if err := t.flushReverse(); err != nil {
		return err
	}
	return s.applyRest(w, b)
}

// edgeOps returns b's edge changes by consumer: puts, then deletes
// (Validate refused a pair in both).
func edgeOps(b *converge.Batch) map[converge.ID][]edgeOp {
	ops := make(map[converge.ID][]edgeOp)
	for _, e := range b.Edges {
		ops[e.Consumer] = append(ops[e.Consumer], edgeOp{producer: e.Producer, flows: e.Flows})
	}
	for _, e := range b.DeletedEdges {
		ops[e.Consumer] = append(ops[e.Consumer], edgeOp{producer: e.Producer, del: true})
	}
	return ops
}

// putOrder returns the IDs of b's resources and the indexes of those
// written: the last put of an ID wins, in key order.
func putOrder(b *converge.Batch) (ids []converge.ID, order []int) {
	ids = make([]converge.ID, len(b.Resources))
	last := make(map[converge.ID]int, len(b.Resources))
	for i, r := range b.Resources {
		ids[i] = r.ID()
		last[ids[i]] = i
	}
	order = make([]int, 0, len(last))
	for i, id := range ids {
		if last[id] == i {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(x, y int) int { return cmp.Compare(ids[x], ids[y]) })
	return ids, order
}

// prefetchRows announces every row the batch may read, at once. The
// keys share one buffer: a backend that does not prefetch pays two
// allocations, not two a row.
func (t *tx) prefetchRows(b *converge.Batch, ids []converge.ID, order []int, ops map[converge.ID][]edgeOp) error {
	var ks []converge.ID
	for _, i := range order {
		ks = append(ks, ids[i])
		if o := b.Resources[i].Owner; o != "" {
			ks = append(ks, o)
		}
	}
	for c := range ops {
		ks = append(ks, c)
	}
	ks = append(ks, b.DeletedResources...)
	n := 0
	for _, k := range ks {
		n += len(k)
	}
	buf := make([]byte, 0, n)
	keys := make([][]byte, len(ks))
	for i, k := range ks {
		buf = append(buf, k...)
		keys[i] = buf[len(buf)-len(k) : len(buf) : len(buf)]
	}
	return t.w.Prefetch(Resources, keys)
}

// putResource writes r's row (with its edge changes, which it takes out
// of ops), its reverse-index changes and its owner-index entry, or
// refuses the row.
func (t *tx) putResource(r *converge.Resource, id converge.ID, ops map[converge.ID][]edgeOp) error {
	key := []byte(id)
	old, err := t.w.Get(Resources, key)
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
	var added, removed []converge.ID
	if o, ok := ops[id]; ok {
		delete(ops, id)
		if edges, added, removed, err = applyEdgeOps(id, oldRow.Edges, o); err != nil {
			return err
		}
	}
	// A big declared spec (a BOM root's megabytes) is stored apart and
	// written only when it changes: a row rewritten for its rollup or
	// phase is then bytes, not megabytes.
	var apart []byte
	if len(r.Declared) >= ApartSize {
		apart = codec.SpecDigest(r.Declared)
		if !bytes.Equal(apart, oldRow.Apart) && !json.Valid(r.Declared) {
			t.rejected = append(t.rejected, converge.RowError{ID: id, Err: errors.New("encode: declared: invalid JSON")})
			return nil
		}
	}
	v, err := t.encodeRow(r, edges, apart)
	if err != nil {
		t.rejected = append(t.rejected, converge.RowError{ID: id, Err: fmt.Errorf("encode: %w", err)})
		return nil
	}
	if old == nil || string(old) != string(v) {
		if err := t.w.Put(Resources, key, v); err != nil {
			return err
		}
	}
	switch {
	case apart != nil && !bytes.Equal(apart, oldRow.Apart):
		if err := t.w.Put(Specs, key, r.Declared); err != nil {
			return err
		}
	case apart == nil && oldRow.Apart != nil:
		if err := t.w.Delete(Specs, key); err != nil {
			return err
		}
	}
	t.reverse(id, added, removed)
	if old != nil && oldRow.Owner == r.Owner {
		return nil
	}
	// Roots are indexed too, under the empty owner: listing them must
	// not scan every resource.
	if old != nil {
		if err := t.idx.remove(oldRow.Owner, id); err != nil {
			return err
		}
	}
	return t.idx.add(r.Owner, id)
}

// checkOwners refuses orphans: the owners of the resources put must
// exist after the batch (else their rows are refused, with every row
// refused before), and the resources deleted must own nothing.
func (t *tx) checkOwners(b *converge.Batch, ids []converge.ID, order []int) error {
	for _, i := range order {
		r := b.Resources[i]
		if r.Owner == "" {
			continue
		}
		v, err := t.w.Get(Resources, []byte(r.Owner))
		if err != nil {
			return err
		}
		if v == nil {
			t.rejected = append(t.rejected, converge.RowError{ID: ids[i], Err: fmt.Errorf("owner %s does not exist", r.Owner)})
		}
	}
	if len(t.rejected) > 0 {
		return &converge.RejectedError{Rows: t.rejected}
	}
	kids, err := t.idx.firstChildren(b.DeletedResources)
	if err != nil {
		return err
	}
	for i, child := range kids {
		if child != "" {
			return fmt.Errorf("delete %s: it still owns %s (delete the children first or in the same batch)", b.DeletedResources[i], child)
		}
	}
	return nil
}

// applyRest writes what a batch holds besides resources and edges:
// kinds, configs, bindings, deliveries (puts, then deletes, each in
// key order), events, the applied revision and a revision record. Every put reads what it
// replaces (an equal value is not written again): those reads are
// announced first.
func (s *Store) applyRest(w Writer, b *converge.Batch) error {
	delivs := slices.SortedFunc(slices.Values(b.Deliveries), func(x, y *converge.Delivery) int { return cmp.Compare(x.Key, y.Key) })
	var pre [NumBuckets][][]byte
	for _, k := range b.Kinds {
		pre[Kinds] = append(pre[Kinds], codec.KindKey(k.Ref()))
	}
	for _, c := range b.Configs {
		pre[Configs] = append(pre[Configs], []byte(c.Name))
	}
	for _, bd := range b.Bindings {
		pre[Bindings] = append(pre[Bindings], []byte(bd.Name))
	}
	for _, d := range delivs {
		pre[Deliveries] = append(pre[Deliveries], []byte(d.Key))
	}
	if b.Applied != nil {
		pre[Meta] = append(pre[Meta], MetaApplied)
	}
	if len(b.Events) > 0 {
		pre[Meta] = append(pre[Meta], MetaEvents)
	}
	if b.Record != nil {
		pre[Revisions] = append(pre[Revisions], []byte(b.Record.Revision.Hash))
	}
	for bk, keys := range pre {
		if len(keys) > 0 {
			if err := w.Prefetch(Bucket(bk), keys); err != nil {
				return err
			}
		}
	}
	for _, k := range b.Kinds {
		if err := putJSON(w, Kinds, codec.KindKey(k.Ref()), k); err != nil {
			return fmt.Errorf("kind %s: %w", k.Ref(), err)
		}
	}
	for _, ref := range b.DeletedKinds {
		if err := w.Delete(Kinds, codec.KindKey(ref)); err != nil {
			return err
		}
	}
	for _, c := range b.Configs {
		if err := putJSON(w, Configs, []byte(c.Name), c); err != nil {
			return fmt.Errorf("provider config %s: %w", c.Name, err)
		}
	}
	if err := deleteAll(w, Configs, b.DeletedConfigs); err != nil {
		return err
	}
	for _, bd := range b.Bindings {
		if err := putJSON(w, Bindings, []byte(bd.Name), bd); err != nil {
			return fmt.Errorf("binding %s: %w", bd.Name, err)
		}
	}
	if err := deleteAll(w, Bindings, b.DeletedBindings); err != nil {
		return err
	}
	for _, d := range delivs {
		if err := putJSON(w, Deliveries, []byte(d.Key), d); err != nil {
			return fmt.Errorf("delivery %s: %w", d.Key, err)
		}
	}
	if err := deleteAll(w, Deliveries, slices.Sorted(slices.Values(b.DeletedDeliveries))); err != nil {
		return err
	}
	if len(b.Events) > 0 {
		if err := s.appendEvents(w, b.Events); err != nil {
			return err
		}
	}
	if b.Applied != nil {
		if err := putJSON(w, Meta, MetaApplied, b.Applied); err != nil {
			return fmt.Errorf("applied revision: %w", err)
		}
	}
	if rec := b.Record; rec != nil {
		// After Applied: the trim keeps the applied revision's record,
		// and reads it from this write.
		if err := putJSON(w, Revisions, []byte(rec.Revision.Hash), rec); err != nil {
			return fmt.Errorf("revision %s: %w", rec.Revision.Hash, err)
		}
		if err := s.trimRevisions(w); err != nil {
			return err
		}
	}
	return nil
}

// deleteAll deletes keys from b.
func deleteAll(w Writer, b Bucket, keys []string) error {
	for _, k := range keys {
		if err := w.Delete(b, []byte(k)); err != nil {
			return err
		}
	}
	return nil
}

func mapKeys[K comparable, V any](m map[K]V) func(yield func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
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

// reverse queues the addition and removal of producer\x00consumer
// entries; flushReverse writes them.
func (t *tx) reverse(consumer converge.ID, added, removed []converge.ID) {
	for _, p := range added {
		t.rev = append(t.rev, revOp{key: codec.PairKey(p, consumer)})
	}
	for _, p := range removed {
		t.rev = append(t.rev, revOp{key: codec.PairKey(p, consumer), del: true})
	}
}

// flushReverse writes the queued reverse-index changes in key order.
// They arrive in consumer order, which is random in producer order; bbolt
// splits no leaf until commit, so random inserts into one transaction
// memmove a growing node on every put (quadratic in the batch). The last
// change of a key wins; an entry already stored is not put again.
func (t *tx) flushReverse() error {
	slices.SortStableFunc(t.rev, func(a, b revOp) int { return bytes.Compare(a.key, b.key) })
	var puts [][]byte
	for i, op := range t.rev {
		if !op.del && (i+1 == len(t.rev) || !bytes.Equal(op.key, t.rev[i+1].key)) {
			puts = append(puts, op.key)
		}
	}
	if err := t.w.Prefetch(Producers, puts); err != nil {
		return err
	}
	for i, op := range t.rev {
		if i+1 < len(t.rev) && bytes.Equal(op.key, t.rev[i+1].key) {
			continue
		}
		if op.del {
			if err := t.w.Delete(Producers, op.key); err != nil {
				return err
			}
			continue
		}
		v, err := t.w.Get(Producers, op.key)
		if err != nil {
			return err
		}
		if v == nil {
			if err := t.w.Put(Producers, op.key, empty); err != nil {
				return err
			}
		}
	}
	t.rev = t.rev[:0]
	return nil
}

// rewriteEdges applies ops to the stored row of consumer. A consumer that
// does not exist may only lose edges (a no-op but for stray reverse
// entries); giving it one is an error.
func (t *tx) rewriteEdges(consumer converge.ID, ops []edgeOp) error {
	key := []byte(consumer)
	old, err := t.w.Get(Resources, key)
	if err != nil {
		return err
	}
	if old == nil {
		for _, op := range ops {
			if !op.del {
				return fmt.Errorf("edge %s→%s: consumer %s does not exist", consumer, op.producer, consumer)
			}
			t.rev = append(t.rev, revOp{key: codec.PairKey(op.producer, consumer), del: true})
		}
		return nil
	}
	rw, err := codec.SplitRow(old)
	if err != nil {
		return fmt.Errorf("resource %s: stored: %w", consumer, err)
	}
	edges, added, removed, err := applyEdgeOps(consumer, rw.Edges, ops)
	if err != nil {
		return err
	}
	if len(added)+len(removed) > 0 || string(edges) != string(rw.Edges) {
		if err := t.w.Put(Resources, key, rw.WithEdges(edges)); err != nil {
			return err
		}
	}
	t.reverse(consumer, added, removed)
	return nil
}

// deleteResource removes id, its owner-index entry and the edges it
// consumes (with their reverse entries). Edges other resources consume
// from id stay: a consumer that still names id is gated until id exists
// again (a composer re-creates it), and a caller that wants those edges
// gone deletes them, or their consumers, in the batch.
func (t *tx) deleteResource(id converge.ID) error {
	key := []byte(id)
	old, err := t.w.Get(Resources, key)
	if err != nil || old == nil {
		return err
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
		t.rev = append(t.rev, revOp{key: codec.PairKey(e.Producer, id), del: true})
	}
	if err := t.w.Delete(Resources, key); err != nil {
		return err
	}
	if rw.Apart != nil {
		if err := t.w.Delete(Specs, key); err != nil {
			return err
		}
	}
	return t.idx.remove(rw.Owner, id)
}

// appendEvents numbers evs, stores them as chunks keyed by their first
// Seq (one chunk, or chunks of at most MaxChunk bytes), updates the
// events meta and drops the oldest whole chunks beyond MaxEvents.
func (s *Store) appendEvents(w Writer, evs []converge.Event) error {
	lastSeq, count, err := eventsMeta(w)
	if err != nil {
		return err
	}
	for i := range evs {
		e := &evs[i]
		if e.Seq == 0 {
			e.Seq = lastSeq + 1
		} else if e.Seq <= lastSeq {
			return fmt.Errorf("event %d (%s %s): seq %d not above %d", i, e.Resource, e.Type, e.Seq, lastSeq)
		}
		lastSeq = e.Seq
	}
	if err := putChunks(w, evs, s.o.MaxChunk); err != nil {
		return err
	}
	count += uint64(len(evs))

	// Trim whole chunks from the oldest while the rest still holds limit
	// events. A chunk is never cut: decoding and re-encoding the oldest
	// chunk at every commit past the limit was ~5% of a million-resource
	// converge's CPU. Up to one chunk more than limit stays stored, and
	// readers see the newest limit (Events). Collect first: writing under
	// a live cursor skips keys.
	limit := uint64(s.o.MaxEvents)
	var gone [][]byte
	if count > limit {
		err := w.Scan(Events, Range{}, func(k, v []byte) error {
			n, err := codec.ChunkLen(v)
			if err != nil {
				return fmt.Errorf("events: chunk %d: %w", codec.ChunkSeq(k), err)
			}
			if count-uint64(n) < limit || uint64(n) > count {
				return ErrStop
			}
			gone = append(gone, bytes.Clone(k))
			count -= uint64(n)
			if count == limit {
				return ErrStop
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	for _, k := range gone {
		if err := w.Delete(Events, k); err != nil {
			return err
		}
	}
	return w.Put(Meta, MetaEvents, binary.BigEndian.AppendUint64(U64(lastSeq), count))
}

// putChunks writes evs as event chunks of at most max bytes each (0: one
// chunk; one event bigger than max gets a chunk of its own).
func putChunks(w Writer, evs []converge.Event, max int) error {
	v, err := codec.EncodeChunk(evs)
	if err != nil {
		return fmt.Errorf("events: encode: %w", err)
	}
	if max <= 0 || len(v) <= max || len(evs) == 1 {
		return w.Put(Events, U64(evs[0].Seq), v)
	}
	half := len(evs) / 2
	if err := putChunks(w, evs[:half], max); err != nil {
		return err
	}
	return putChunks(w, evs[half:], max)
}

// newer orders revision records as Revisions lists them: newest Seen
// first, ties by hash.
func newer(at time.Time, hash string, at2 time.Time, hash2 string) int {
	if c := at2.Compare(at); c != 0 {
		return c
	}
	return strings.Compare(hash, hash2)
}

// trimRevisions deletes the oldest revision records (by Seen, ties by
// hash, as Revisions orders them) beyond MaxRevisions, never the applied
// revision's. Counting keys decodes nothing, so a store under the limit
// pays one count.
func (s *Store) trimRevisions(w Writer) error {
	n, err := w.Count(Revisions, nil)
	if err != nil {
		return fmt.Errorf("count revisions: %w", err)
	}
	if n <= s.o.MaxRevisions {
		return nil
	}
	type seen struct {
		hash string
		at   time.Time
	}
	all := make([]seen, 0, n)
	err = w.Scan(Revisions, Range{}, func(k, v []byte) error {
		var r struct {
			Seen time.Time `json:"seen"`
		}
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("revision %s: decode: %w", k, err)
		}
		all = append(all, seen{string(k), r.Seen})
		return nil
	})
	if err != nil {
		return err
	}
	if len(all) <= s.o.MaxRevisions {
		return nil
	}
	slices.SortFunc(all, func(x, y seen) int { return newer(x.at, x.hash, y.at, y.hash) })
	app, err := applied(w)
	if err != nil {
		return err
	}
	for _, r := range all[s.o.MaxRevisions:] {
		if app != nil && r.hash == app.Hash {
			continue
		}
		if err := w.Delete(Revisions, []byte(r.hash)); err != nil {
			return err
		}
	}
	return nil
}
