package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/convergehq/converge"
	bolt "go.etcd.io/bbolt"
)

// maxCheckErrors caps how many problems Check reports.
const maxCheckErrors = 20

// Check runs a full consistency check in one read transaction and returns
// every problem found (up to 20, joined), or nil. It checks bbolt's own
// page structure (tx.Check) and converge's invariants:
//   - every resources key is its value's ID, with a well-formed owner prefix
//     equal to the JSON owner;
//   - the owner index's chunks are well formed (first bound empty, bounds
//     and children increasing, none empty), every child listed exists and
//     is owned by that owner, and every resource is listed once (a root
//     under the empty owner);
//   - every resource's owner exists;
//   - the edges in consumers' rows and the producers index hold the same
//     pairs, edges sorted by producer (an edge's producer may not exist:
//     see the package doc);
//   - kinds, configs, bindings and deliveries are keyed by their content;
//   - event chunks are keyed by their first Seq, Seqs increase across all
//     chunks, and the meta event count and last Seq agree with them.
func (s *Store) Check() error {
	var errs []error
	report := func(format string, args ...any) {
		if len(errs) < maxCheckErrors {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	err := s.view(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			report("bbolt: %v", err)
		}
		for _, name := range allBuckets {
			if tx.Bucket(name) == nil {
				report("bucket %s: missing", name)
			}
		}
		if len(errs) > 0 {
			return nil
		}
		checkResources(tx, report)
		checkEdges(tx, report)
		checkKeyed(tx, report)
		checkEvents(tx, report)
		return nil
	})
	if err != nil {
		return fmt.Errorf("check state: %w", err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("check state: %s: %w", s.path, errors.Join(errs...))
	}
	return nil
}

type reportFunc func(format string, args ...any)

func checkResources(tx *bolt.Tx, report reportFunc) {
	res := tx.Bucket(bResources)
	owners := tx.Bucket(bOwners)

	// The owner index, chunk by chunk: child → owner.
	indexed := map[converge.ID]converge.ID{}
	var prevOwner, prevBound converge.ID
	var prevLast converge.ID
	first := true
	_ = owners.ForEach(func(k, v []byte) error {
		owner, bound, ok := splitPair(k)
		if !ok {
			report("owner index: malformed key %q", k)
			return nil
		}
		newOwner := first || owner != prevOwner
		first = false
		switch {
		case newOwner && bound != "":
			report("owner index: %s: first chunk has bound %q", owner, bound)
		case !newOwner && bound <= prevBound:
			report("owner index: %s: chunk bound %q not above %q", owner, bound, prevBound)
		case !newOwner && bound <= prevLast:
			report("owner index: %s: chunk %q starts at or below the previous chunk's %q", owner, bound, prevLast)
		}
		kids := splitIDs(v)
		if len(kids) == 0 {
			report("owner index: %s: chunk %q is empty", owner, bound)
		}
		for i, c := range kids {
			if c < bound || (i > 0 && c <= kids[i-1]) {
				report("owner index: %s: chunk %q: %s out of order", owner, bound, c)
			}
			if o, dup := indexed[c]; dup {
				report("owner index: %s listed under %s and %s", c, o, owner)
			}
			indexed[c] = owner
			v := res.Get([]byte(c))
			if v == nil {
				report("owner index: %s → %s: child does not exist", owner, c)
				continue
			}
			if rw, err := splitRow(v); err == nil && rw.Owner != owner {
				report("owner index: %s → %s: child's owner is %q", owner, c, rw.Owner)
			}
		}
		prevOwner, prevBound = owner, bound
		if len(kids) > 0 {
			prevLast = kids[len(kids)-1]
		}
		return nil
	})

	_ = res.ForEach(func(k, v []byte) error {
		rw, err := splitRow(v)
		if err != nil {
			report("resource %s: %v", k, err)
			return nil
		}
		owner := rw.Owner
		r, err := decodeResource(v)
		if err != nil {
			report("resource %s: %v", k, err)
			return nil
		}
		if id := r.ID(); string(id) != string(k) {
			report("resource %s: value is %s", k, id)
		}
		if r.Owner != owner {
			report("resource %s: owner prefix %q, JSON owner %q", k, owner, r.Owner)
		}
		if o, ok := indexed[converge.ID(k)]; !ok || o != r.Owner {
			if r.Owner == "" {
				report("resource %s: the roots index lacks it", k)
			} else {
				report("resource %s: owner index lacks %s → %s", k, r.Owner, k)
			}
		}
		if r.Owner != "" && !has(res, []byte(r.Owner)) {
			report("resource %s: owner %s does not exist", k, r.Owner)
		}
		return nil
	})
}

func checkEdges(tx *bolt.Tx, report reportFunc) {
	res := tx.Bucket(bResources)
	producers := tx.Bucket(bProducers)
	_ = res.ForEach(func(k, v []byte) error {
		rw, err := splitRow(v)
		if err != nil {
			return nil // reported by checkResources
		}
		es, err := decodeEdges(rw.Edges)
		if err != nil {
			report("resource %s: %v", k, err)
			return nil
		}
		for i, e := range es {
			if err := checkID(e.Producer); err != nil || e.Producer == converge.ID(k) {
				report("edge %s→%s: bad producer", k, e.Producer)
			}
			if i > 0 && es[i-1].Producer >= e.Producer {
				report("resource %s: edges not sorted by producer at %s", k, e.Producer)
			}
			if !has(producers, pairKey(e.Producer, converge.ID(k))) {
				report("edge %s→%s: missing from the reverse index", k, e.Producer)
			}
		}
		return nil
	})
	_ = producers.ForEach(func(k, _ []byte) error {
		p, c, ok := splitPair(k)
		if !ok {
			report("reverse edge index: malformed key %q", k)
			return nil
		}
		es, err := rowEdges(res, c)
		if err != nil {
			report("reverse edge index: %s→%s: %v", c, p, err)
			return nil
		}
		if !has(res, []byte(c)) {
			report("reverse edge index: %s→%s: consumer does not exist", c, p)
		} else if !slices.ContainsFunc(es, func(e converge.Edge) bool { return e.Producer == p }) {
			report("reverse edge index: %s→%s: no forward edge", c, p)
		}
		return nil
	})
}

func checkKeyed(tx *bolt.Tx, report reportFunc) {
	kinds, _ := scanJSON[converge.Kind](tx.Bucket(bKinds))
	n := 0
	_ = tx.Bucket(bKinds).ForEach(func(k, _ []byte) error {
		if n < len(kinds) && string(kindKey(kinds[n].Ref())) != string(k) {
			report("kind key %q: value is %s", k, kinds[n].Ref())
		}
		n++
		return nil
	})
	if n != len(kinds) {
		report("kinds: %d of %d values decode", len(kinds), n)
	}
	byName := func(bucket []byte, name func(i int) string, count int) {
		i := 0
		_ = tx.Bucket(bucket).ForEach(func(k, _ []byte) error {
			if i < count && name(i) != string(k) {
				report("%s key %q: value is %q", bucket, k, name(i))
			}
			i++
			return nil
		})
		if i != count {
			report("%s: %d of %d values decode", bucket, count, i)
		}
	}
	cs, _ := scanJSON[converge.ProviderConfig](tx.Bucket(bConfigs))
	byName(bConfigs, func(i int) string { return cs[i].Name }, len(cs))
	bs, _ := scanJSON[converge.Binding](tx.Bucket(bBindings))
	byName(bBindings, func(i int) string { return bs[i].Name }, len(bs))
	ds, _ := scanJSON[converge.Delivery](tx.Bucket(bDeliveries))
	byName(bDeliveries, func(i int) string { return ds[i].Key }, len(ds))
	rs, _ := scanJSON[converge.RevisionRecord](tx.Bucket(bRevisions))
	byName(bRevisions, func(i int) string { return rs[i].Revision.Hash }, len(rs))
	if _, err := applied(tx); err != nil {
		report("meta: %v", err)
	}
}

func checkEvents(tx *bolt.Tx, report reportFunc) {
	var prev, count uint64
	_ = tx.Bucket(bEvents).ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			report("event chunk key %x: want 8 bytes", k)
			return nil
		}
		first := binary.BigEndian.Uint64(k)
		evs, err := decodeChunk(v)
		if err != nil {
			report("event chunk %d: %v", first, err)
			return nil
		}
		if len(evs) == 0 {
			report("event chunk %d: empty", first)
			return nil
		}
		if evs[0].Seq != first {
			report("event chunk %d: first event has seq %d", first, evs[0].Seq)
		}
		for _, e := range evs {
			if e.Seq <= prev {
				report("event chunk %d: seq %d not above %d", first, e.Seq, prev)
			}
			prev = e.Seq
		}
		count += uint64(len(evs))
		return nil
	})
	lastSeq, n := eventsMeta(tx.Bucket(bMeta))
	if n != count {
		report("meta: %d events recorded, %d stored", n, count)
	}
	if prev > lastSeq {
		report("meta: last event seq %d below stored seq %d", lastSeq, prev)
	}
}
