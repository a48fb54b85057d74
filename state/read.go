package state

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/convergehq/converge"
	bolt "go.etcd.io/bbolt"
)

// Load returns everything the scheduler needs, read in one transaction:
// resources sorted by ID, edges sorted by consumer then producer, kinds,
// configs, bindings, deliveries, the applied revision and the last event
// Seq. It implements the scheduler's Store port.
func (s *Store) Load() (*converge.Snapshot, error) {
	snap := new(converge.Snapshot)
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		if snap.Resources, err = scanResources(tx.Bucket(bResources).Cursor(), nil, decodeResource, nil, 0); err != nil {
			return err
		}
		if snap.Edges, err = scanEdges(tx.Bucket(bResources)); err != nil {
			return err
		}
		if snap.Kinds, err = scanJSON[converge.Kind](tx.Bucket(bKinds)); err != nil {
			return err
		}
		if snap.Configs, err = scanJSON[converge.ProviderConfig](tx.Bucket(bConfigs)); err != nil {
			return err
		}
		if snap.Bindings, err = scanJSON[converge.Binding](tx.Bucket(bBindings)); err != nil {
			return err
		}
		if snap.Deliveries, err = scanJSON[converge.Delivery](tx.Bucket(bDeliveries)); err != nil {
			return err
		}
		if snap.Applied, err = applied(tx); err != nil {
			return err
		}
		snap.LastEventSeq, _ = eventsMeta(tx.Bucket(bMeta))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load state: %w", err)
	}
	releaseMapped(s.db, 0) // a whole-store scan touched every page
	return snap, nil
}

// Resource returns the resource id, or converge.ErrNotFound (wrapped).
func (s *Store) Resource(id converge.ID) (*converge.Resource, error) {
	var r *converge.Resource
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bResources).Get([]byte(id))
		if v == nil {
			return converge.ErrNotFound
		}
		var err error
		r, err = decodeResource(v)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get resource %s: %w", id, err)
	}
	return r, nil
}

// ResourcesByID returns the resources ids name, in ids' order, read in
// one transaction: nil for an id the store does not hold. Sorted ids read
// fastest (the cursor moves forward through the same pages).
func (s *Store) ResourcesByID(ids []converge.ID) ([]*converge.Resource, error) {
	out := make([]*converge.Resource, len(ids))
	err := s.view(func(tx *bolt.Tx) error {
		res := tx.Bucket(bResources)
		for i, id := range ids {
			v := res.Get([]byte(id))
			if v == nil {
				continue
			}
			r, err := decodeResource(v)
			if err != nil {
				return fmt.Errorf("resource %s: %w", id, err)
			}
			out[i] = r
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("get resources: %w", err)
	}
	return out, nil
}

// Filter selects resources. Zero fields match everything.
type Filter struct {
	Kind  string
	Phase converge.Phase
	// Owner selects the direct children of Owner.
	Owner converge.ID
	// RootsOnly selects resources without an owner.
	RootsOnly bool
	// Limit caps the result; 0 means no cap.
	Limit int
	// Head leaves out each resource's Declared, Spec and Status (nil),
	// for callers that do not show them: they are checked but not
	// copied, and a root's spec can be megabytes.
	Head bool
}

// Resources returns the resources matching f, sorted by ID.
func (s *Store) Resources(f Filter) ([]*converge.Resource, error) {
	match := func(r *converge.Resource) bool {
		return (f.Kind == "" || r.Kind == f.Kind) &&
			(f.Phase == "" || r.Phase == f.Phase) &&
			(!f.RootsOnly || r.Owner == "") &&
			(f.Owner == "" || r.Owner == f.Owner)
	}
	decode := decodeResource
	if f.Head {
		decode = decodeResourceHead
	}
	var out []*converge.Resource
	err := s.view(func(tx *bolt.Tx) error {
		res := tx.Bucket(bResources)
		if f.Owner != "" || f.RootsOnly {
			// The owner index lists the roots under the empty owner.
			children, err := childrenOf(tx.Bucket(bOwners), f.Owner)
			if err != nil {
				return err
			}
			for _, child := range children {
				v := res.Get([]byte(child))
				if v == nil {
					return fmt.Errorf("owner index: %s → %s: child does not exist", f.Owner, child)
				}
				r, err := decode(v)
				if err != nil {
					return fmt.Errorf("resource %s: %w", child, err)
				}
				if match(r) {
					out = append(out, r)
					if f.Limit > 0 && len(out) >= f.Limit {
						break
					}
				}
			}
			return nil
		}
		var prefix []byte
		if f.Kind != "" {
			prefix = []byte(f.Kind + "/")
		}
		var err error
		out, err = scanResources(res.Cursor(), prefix, decode, match, f.Limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list resources: %w", err)
	}
	return out, nil
}

// ChildCount returns how many resources owner owns directly (the roots
// for ""), counting the owner index's entries without listing them.
func (s *Store) ChildCount(owner converge.ID) (int, error) {
	n := 0
	err := s.view(func(tx *bolt.Tx) error {
		p := prefixKey(owner)
		c := tx.Bucket(bOwners).Cursor()
		for k, v := c.Seek(p); k != nil && hasPrefix(k, p); k, v = c.Next() {
			if len(v) > 0 {
				n += bytes.Count(v, []byte{0}) + 1
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("count children of %s: %w", owner, err)
	}
	return n, nil
}

// Children returns the IDs of the resources owner owns directly, sorted.
func (s *Store) Children(owner converge.ID) ([]converge.ID, error) {
	var out []converge.ID
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		out, err = childrenOf(tx.Bucket(bOwners), owner)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list children of %s: %w", owner, err)
	}
	return out, nil
}

// Counts returns the phase counts of the resources owner owns directly.
func (s *Store) Counts(owner converge.ID) (converge.Counts, error) {
	rs, err := s.Resources(Filter{Owner: owner})
	if err != nil {
		return converge.Counts{}, err
	}
	var c converge.Counts
	for _, r := range rs {
		c.Add(r.Phase)
	}
	return c, nil
}

// EdgesOf returns the edges id consumes (id is their Consumer) and the
// edges it is produced for (id is their Producer), each sorted by the other
// endpoint. An unknown id has no edges; that is not an error.
func (s *Store) EdgesOf(id converge.ID) (consumes, producedFor []converge.Edge, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		res := tx.Bucket(bResources)
		var err error
		if consumes, err = rowEdges(res, id); err != nil {
			return err
		}
		for _, c := range pairsWithPrefix(tx.Bucket(bProducers), id) {
			es, err := rowEdges(res, c)
			if err != nil {
				return err
			}
			i := slices.IndexFunc(es, func(e converge.Edge) bool { return e.Producer == id })
			if i < 0 {
				return fmt.Errorf("reverse edge index: %s→%s: no such edge", c, id)
			}
			producedFor = append(producedFor, es[i])
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list edges of %s: %w", id, err)
	}
	return consumes, producedFor, nil
}

// Events returns the newest limit events of resource (all resources if
// resource is ""), oldest first. limit 0 returns every event kept. For
// one resource it decodes only the chunks that hold one of its events
// (a byte search finds them), so reading a resource's few events among
// MaxEvents costs a scan of the bytes, not a decode of every event.
func (s *Store) Events(resource converge.ID, limit int) ([]converge.Event, error) {
	var rev []converge.Event // newest first
	var needle []byte
	if resource != "" {
		needle = resourceNeedle(resource)
	}
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bEvents).Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			if needle != nil && !bytes.Contains(v, needle) {
				continue // no event of resource: skip decoding
			}
			evs, err := decodeChunk(v)
			if err != nil {
				return fmt.Errorf("chunk %d: %w", chunkSeq(k), err)
			}
			for i := len(evs) - 1; i >= 0; i-- {
				if resource != "" && evs[i].Resource != resource {
					continue
				}
				rev = append(rev, evs[i])
				if limit > 0 && len(rev) >= limit {
					return nil
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	slices.Reverse(rev)
	return rev, nil
}

// Kinds returns every kind, sorted by name then version.
func (s *Store) Kinds() ([]*converge.Kind, error) {
	return viewJSON[converge.Kind](s, bKinds, "list kinds")
}

// Configs returns every provider config, sorted by name.
func (s *Store) Configs() ([]*converge.ProviderConfig, error) {
	return viewJSON[converge.ProviderConfig](s, bConfigs, "list provider configs")
}

// Bindings returns every binding, sorted by name.
func (s *Store) Bindings() ([]*converge.Binding, error) {
	return viewJSON[converge.Binding](s, bBindings, "list bindings")
}

// Deliveries returns every reactor delivery, sorted by key.
func (s *Store) Deliveries() ([]*converge.Delivery, error) {
	return viewJSON[converge.Delivery](s, bDeliveries, "list deliveries")
}

// Applied returns the applied revision, or nil and no error if none was
// ever applied.
func (s *Store) Applied() (*converge.Revision, error) {
	var r *converge.Revision
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		r, err = applied(tx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get applied revision: %w", err)
	}
	return r, nil
}

// PutSource records where the applied revision came from, replacing what
// was recorded before.
func (s *Store) PutSource(src *converge.AppliedSource) error {
	if src == nil || src.Repo == "" {
		return fmt.Errorf("put source: no repository")
	}
	if err := s.update(func(w *writer) error { return putJSON(w, bMeta, mSource, src) }); err != nil {
		return fmt.Errorf("put source: %w", err)
	}
	return nil
}

// Source returns where the applied revision came from, or nil and no
// error if no revision was applied with its source recorded.
func (s *Store) Source() (*converge.AppliedSource, error) {
	var src *converge.AppliedSource
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bMeta).Get(mSource)
		if v == nil {
			return nil
		}
		src = new(converge.AppliedSource)
		return json.Unmarshal(v, src)
	})
	if err != nil {
		return nil, fmt.Errorf("get source: %w", err)
	}
	return src, nil
}

// PutControl records the operator's pin and suspensions, replacing what
// was recorded before; nil clears them.
func (s *Store) PutControl(c *converge.Control) error {
	if c == nil {
		c = &converge.Control{}
	}
	if err := s.update(func(w *writer) error { return putJSON(w, bMeta, mControl, c) }); err != nil {
		return fmt.Errorf("put control: %w", err)
	}
	return nil
}

// Control returns the operator's pin and suspensions: the zero Control
// if none were recorded.
func (s *Store) Control() (*converge.Control, error) {
	c := new(converge.Control)
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bMeta).Get(mControl)
		if v == nil {
			return nil
		}
		return json.Unmarshal(v, c)
	})
	if err != nil {
		return nil, fmt.Errorf("get control: %w", err)
	}
	return c, nil
}

// PutRevision stores rec, keyed by its Revision.Hash, in its own
// transaction, replacing any record of the same hash, and trims the
// records beyond Options.MaxRevisions in the same transaction.
func (s *Store) PutRevision(rec *converge.RevisionRecord) error {
	if rec == nil || rec.Revision.Hash == "" {
		return fmt.Errorf("put revision: empty hash")
	}
	err := s.update(func(w *writer) error {
		if err := putJSON(w, bRevisions, []byte(rec.Revision.Hash), rec); err != nil {
			return err
		}
		return s.trimRevisions(w)
	})
	if err != nil {
		return fmt.Errorf("put revision %s: %w", rec.Revision.Hash, err)
	}
	return nil
}

// Revision returns the record of hash, or converge.ErrNotFound (wrapped).
func (s *Store) Revision(hash string) (*converge.RevisionRecord, error) {
	rec := new(converge.RevisionRecord)
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bRevisions).Get([]byte(hash))
		if v == nil {
			return converge.ErrNotFound
		}
		return json.Unmarshal(v, rec)
	})
	if err != nil {
		return nil, fmt.Errorf("get revision %s: %w", hash, err)
	}
	return rec, nil
}

// Revisions returns the newest limit revision records by Seen (ties by
// hash), newest first; limit 0 returns all.
func (s *Store) Revisions(limit int) ([]*converge.RevisionRecord, error) {
	recs, err := viewJSON[converge.RevisionRecord](s, bRevisions, "list revisions")
	if err != nil {
		return nil, err
	}
	sort.SliceStable(recs, func(i, j int) bool {
		if !recs[i].Seen.Equal(recs[j].Seen) {
			return recs[i].Seen.After(recs[j].Seen)
		}
		return recs[i].Revision.Hash < recs[j].Revision.Hash
	})
	if limit > 0 && len(recs) > limit {
		recs = recs[:limit]
	}
	return recs, nil
}

// trimRevisions deletes the oldest revision records (by Seen, ties by
// hash, as Revisions orders them) beyond maxRevs, never the applied
// revision's. Counting keys decodes nothing, so a store under the limit
// pays one cursor walk.
func (s *Store) trimRevisions(w *writer) error {
	b := w.bucket(bRevisions)
	n := 0
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		n++
	}
	if n <= s.maxRevs {
		return nil
	}
	type seen struct {
		hash string
		at   time.Time
	}
	all := make([]seen, 0, n)
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var r struct {
			Seen time.Time `json:"seen"`
		}
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("revision %s: decode: %w", k, err)
		}
		all = append(all, seen{string(k), r.Seen})
	}
	slices.SortFunc(all, func(x, y seen) int {
		if c := y.at.Compare(x.at); c != 0 {
			return c
		}
		return strings.Compare(x.hash, y.hash)
	})
	app, err := applied(w.tx)
	if err != nil {
		return err
	}
	for _, r := range all[s.maxRevs:] {
		if app != nil && r.hash == app.Hash {
			continue
		}
		if err := w.del(bRevisions, []byte(r.hash)); err != nil {
			return err
		}
	}
	return nil
}

// scanResources decodes with decode the resources under prefix (all if
// nil) that keep accepts (all if nil), up to max (0: no limit).
func scanResources(c *bolt.Cursor, prefix []byte, decode func([]byte) (*converge.Resource, error), keep func(*converge.Resource) bool, max int) ([]*converge.Resource, error) {
	var out []*converge.Resource
	for k, v := c.Seek(prefix); k != nil && hasPrefix(k, prefix); k, v = c.Next() {
		r, err := decode(v)
		if err != nil {
			return nil, fmt.Errorf("resource %s: %w", k, err)
		}
		if keep != nil && !keep(r) {
			continue
		}
		out = append(out, r)
		if max > 0 && len(out) >= max {
			break
		}
	}
	return out, nil
}

// scanEdges returns every edge, from the rows of their consumers: sorted
// by consumer, then producer.
func scanEdges(res *bolt.Bucket) ([]converge.Edge, error) {
	var out []converge.Edge
	err := res.ForEach(func(k, v []byte) error {
		rw, err := splitRow(v)
		if err != nil {
			return fmt.Errorf("resource %s: %w", k, err)
		}
		if len(rw.Edges) == 0 {
			return nil
		}
		es, err := decodeEdges(rw.Edges)
		if err != nil {
			return fmt.Errorf("resource %s: %w", k, err)
		}
		for _, e := range es {
			out = append(out, converge.Edge{Consumer: converge.ID(k), Producer: e.Producer, Flows: e.Flows})
		}
		return nil
	})
	return out, err
}

// rowEdges returns the edges id consumes (none if id does not exist).
func rowEdges(res *bolt.Bucket, id converge.ID) ([]converge.Edge, error) {
	v := res.Get([]byte(id))
	if v == nil {
		return nil, nil
	}
	rw, err := splitRow(v)
	if err != nil {
		return nil, fmt.Errorf("resource %s: %w", id, err)
	}
	es, err := decodeEdges(rw.Edges)
	if err != nil {
		return nil, fmt.Errorf("resource %s: %w", id, err)
	}
	out := make([]converge.Edge, 0, len(es))
	for _, e := range es {
		out = append(out, converge.Edge{Consumer: id, Producer: e.Producer, Flows: e.Flows})
	}
	return out, nil
}

// pairsWithPrefix returns b for every key a\x00b of bucket.
func pairsWithPrefix(bucket *bolt.Bucket, a converge.ID) []converge.ID {
	var out []converge.ID
	p := prefixKey(a)
	c := bucket.Cursor()
	for k, _ := c.Seek(p); k != nil && hasPrefix(k, p); k, _ = c.Next() {
		out = append(out, converge.ID(k[len(p):]))
	}
	return out
}

func scanJSON[T any](b *bolt.Bucket) ([]*T, error) {
	var out []*T
	err := b.ForEach(func(k, v []byte) error {
		t := new(T)
		if err := json.Unmarshal(v, t); err != nil {
			return fmt.Errorf("%q: %w", k, err)
		}
		out = append(out, t)
		return nil
	})
	return out, err
}

func viewJSON[T any](s *Store, bucket []byte, op string) ([]*T, error) {
	var out []*T
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		out, err = scanJSON[T](tx.Bucket(bucket))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

func applied(tx *bolt.Tx) (*converge.Revision, error) {
	v := tx.Bucket(bMeta).Get(mApplied)
	if v == nil {
		return nil, nil
	}
	r := new(converge.Revision)
	if err := json.Unmarshal(v, r); err != nil {
		return nil, fmt.Errorf("applied revision: %w", err)
	}
	return r, nil
}

// eventsMeta returns the last event Seq and the number of events kept.
func eventsMeta(meta *bolt.Bucket) (lastSeq, count uint64) {
	v := meta.Get(mEvents)
	if len(v) != 16 {
		return 0, 0
	}
	return binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])
}

func hasPrefix(k, p []byte) bool { return bytes.HasPrefix(k, p) }
