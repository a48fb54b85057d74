package rules

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/internal/codec"
)

// pageSize is how many rows a read asks for at once (GetMany).
const pageSize = 1000

// Load returns everything the scheduler needs, read from one snapshot:
// resources sorted by ID, edges sorted by consumer then producer, kinds,
// configs, bindings, deliveries, the applied revision and the last event
// Seq. It implements the scheduler's Store port.
func (s *Store) Load(ctx context.Context) (*converge.Snapshot, error) {
	var rows []*converge.Resource
	snap, err := s.LoadStream(ctx, func(_ *converge.Snapshot, n int) error {
		rows = nil
		if n > 0 {
			rows = make([]*converge.Resource, 0, n)
		}
		return nil
	}, func(r *converge.Resource) error {
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	snap.Resources = rows
	return snap, nil
}

// LoadStream is Load handing the resources to each one at a time, in ID
// order, instead of in the snapshot: a reader that keeps them in its own
// form (the scheduler packs them) never holds a million decoded rows at
// once. begin is called first, with the snapshot holding all but the
// resources and edges and with how many resources follow; the snapshot
// returned holds the edges too. begin and each run inside the read, and
// an error of theirs ends it. A read retried from the start (etcd's, when
// its revision is compacted under it) calls begin again.
func (s *Store) LoadStream(ctx context.Context, begin func(*converge.Snapshot, int) error, each func(*converge.Resource) error) (*converge.Snapshot, error) {
	snap := new(converge.Snapshot)
	err := s.view(ctx, func(r Reader) error {
		*snap = converge.Snapshot{}
		var err error
		if snap.Kinds, err = scanJSON[converge.Kind](r, Kinds); err != nil {
			return err
		}
		if snap.Configs, err = scanJSON[converge.ProviderConfig](r, Configs); err != nil {
			return err
		}
		if snap.Bindings, err = scanJSON[converge.Binding](r, Bindings); err != nil {
			return err
		}
		if snap.Deliveries, err = scanJSON[converge.Delivery](r, Deliveries); err != nil {
			return err
		}
		if snap.Applied, err = applied(r); err != nil {
			return err
		}
		if snap.LastEventSeq, _, err = eventsMeta(r); err != nil {
			return err
		}
		n, err := r.Count(Resources, nil)
		if err != nil {
			return err
		}
		if err := begin(snap, n); err != nil {
			return err
		}
		return r.Scan(Resources, Range{}, func(k, v []byte) error {
			res, err := decodeFull(r, k, v)
			if err != nil {
				return fmt.Errorf("resource %s: %w", k, err)
			}
			if snap.Edges, err = appendRowEdges(snap.Edges, converge.ID(k), v); err != nil {
				return err
			}
			return each(res)
		})
	})
	if err != nil {
		return nil, fmt.Errorf("load state: %w", err)
	}
	return snap, nil
}

// Resource returns the resource id, or converge.ErrNotFound (wrapped).
func (s *Store) Resource(ctx context.Context, id converge.ID) (*converge.Resource, error) {
	return s.resource(ctx, id, decodeFull)
}

// ResourceHead is Resource without the declared spec, spec and status
// (nil; see Filter.Head): what a poll for a resource's existence, phase
// or UID needs, without copying a root's megabytes of spec.
func (s *Store) ResourceHead(ctx context.Context, id converge.ID) (*converge.Resource, error) {
	return s.resource(ctx, id, decodeHead)
}

// resource reads the row of id and decodes it with decode.
func (s *Store) resource(ctx context.Context, id converge.ID, decode decoder) (*converge.Resource, error) {
	var res *converge.Resource
	err := s.view(ctx, func(r Reader) error {
		v, err := r.Get(Resources, []byte(id))
		if err != nil {
			return err
		}
		if v == nil {
			return converge.ErrNotFound
		}
		res, err = decode(r, []byte(id), v)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get resource %s: %w", id, err)
	}
	return res, nil
}

// ResourcesByID returns the resources ids name, in ids' order, read from
// one snapshot: nil for an id the store does not hold.
func (s *Store) ResourcesByID(ctx context.Context, ids []converge.ID) ([]*converge.Resource, error) {
	out := make([]*converge.Resource, len(ids))
	err := s.view(ctx, func(r Reader) error {
		clear(out)
		return byID(r, ids, decodeFull, func(i int, res *converge.Resource) error {
			out[i] = res
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("get resources: %w", err)
	}
	return out, nil
}

// decoder decodes the row v of key k read through r.
type decoder func(r Reader, k, v []byte) (*converge.Resource, error)

// decodeFull decodes a whole row, its declared spec read from Specs (and
// copied) when the row keeps it apart.
func decodeFull(r Reader, k, v []byte) (*converge.Resource, error) {
	rw, err := codec.SplitRow(v)
	if err != nil {
		return nil, err
	}
	var declared []byte
	if rw.Apart != nil {
		b, err := r.Get(Specs, k)
		if err != nil {
			return nil, err
		}
		if b == nil {
			return nil, errors.New("declared spec stored apart: missing")
		}
		declared = bytes.Clone(b)
	}
	return codec.DecodeResourceWith(v, declared)
}

// decodeHead decodes a row without its declared spec, spec and status.
func decodeHead(_ Reader, _, v []byte) (*converge.Resource, error) {
	return codec.DecodeResourceHead(v)
}

// byID reads the rows of ids a page at a time and calls fn with each
// one decoded (nil for an absent id) until fn returns an error.
func byID(r Reader, ids []converge.ID, decode decoder, fn func(i int, res *converge.Resource) error) error {
	return rowsByID(r, ids, func(i int, v []byte) error {
		var res *converge.Resource
		if v != nil {
			var err error
			if res, err = decode(r, []byte(ids[i]), v); err != nil {
				return fmt.Errorf("resource %s: %w", ids[i], err)
			}
		}
		return fn(i, res)
	})
}

// rowsByID reads the rows of ids a page at a time and calls fn with
// each one (nil for an absent id) until fn returns an error.
func rowsByID(r Reader, ids []converge.ID, fn func(i int, row []byte) error) error {
	for lo := 0; lo < len(ids); lo += pageSize {
		page := ids[lo:min(len(ids), lo+pageSize)]
		keys := make([][]byte, len(page))
		for i, id := range page {
			keys[i] = []byte(id)
		}
		vals, err := r.GetMany(Resources, keys)
		if err != nil {
			return err
		}
		for i, v := range vals {
			if err := fn(lo+i, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// Resources returns the resources matching f, sorted by ID.
func (s *Store) Resources(ctx context.Context, f Filter) ([]*converge.Resource, error) {
	match := func(r *converge.Resource) bool {
		return (f.Kind == "" || r.Kind == f.Kind) &&
			(f.Phase == "" || r.Phase == f.Phase) &&
			(!f.RootsOnly || r.Owner == "") &&
			(f.Owner == "" || r.Owner == f.Owner)
	}
	decode := decoder(decodeFull)
	if f.Head {
		decode = decodeHead
	}
	var out []*converge.Resource
	err := s.view(ctx, func(r Reader) error {
		out = nil
		keep := func(res *converge.Resource) error {
			if match(res) {
				out = append(out, res)
				if f.Limit > 0 && len(out) >= f.Limit {
					return ErrStop
				}
			}
			return nil
		}
		if f.Owner != "" || f.RootsOnly {
			// The owner index lists the roots under the empty owner.
			kids, err := s.o.Owners.children(r, f.Owner)
			if err != nil {
				return err
			}
			err = byID(r, kids, decode, func(i int, res *converge.Resource) error {
				if res == nil {
					return fmt.Errorf("owner index: %s → %s: child does not exist", f.Owner, kids[i])
				}
				return keep(res)
			})
			if err == ErrStop {
				return nil
			}
			return err
		}
		var prefix []byte
		if f.Kind != "" {
			prefix = []byte(f.Kind + "/")
		}
		return r.Scan(Resources, Range{Prefix: prefix}, func(k, v []byte) error {
			res, err := decode(r, k, v)
			if err != nil {
				return fmt.Errorf("resource %s: %w", k, err)
			}
			return keep(res)
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list resources: %w", err)
	}
	return out, nil
}

// ResourcesAfter returns up to limit resources (limit ≤ 0: no cap) of kind
// ("" for every kind) whose IDs sort after after ("" to start at the
// first), in ID order, each with the edges it consumes. It pages through a
// big store in short reads: pass the last ID returned as after to get the
// next page; a page shorter than limit is the last. Pages are separate
// reads, so a scan that runs while the store is written may see some
// resources before and others after a commit.
func (s *Store) ResourcesAfter(ctx context.Context, kind string, after converge.ID, limit int) ([]ResourceRow, error) {
	return s.resourcesAfter(ctx, kind, after, limit, decodeFull)
}

// ResourceHeadsAfter is ResourcesAfter without each resource's declared
// spec, spec and status (nil; see Filter.Head): a scan that needs none of
// them copies none of them.
func (s *Store) ResourceHeadsAfter(ctx context.Context, kind string, after converge.ID, limit int) ([]ResourceRow, error) {
	return s.resourcesAfter(ctx, kind, after, limit, decodeHead)
}

func (s *Store) resourcesAfter(ctx context.Context, kind string, after converge.ID, limit int, decode decoder) ([]ResourceRow, error) {
	var prefix, from []byte
	if kind != "" {
		prefix = []byte(kind + "/")
	}
	if after != "" {
		from = append([]byte(after), 0) // the first ID after it
	}
	var out []ResourceRow
	err := s.view(ctx, func(r Reader) error {
		out = nil
		return r.Scan(Resources, Range{Prefix: prefix, From: from}, func(k, v []byte) error {
			res, err := decode(r, k, v)
			if err != nil {
				return fmt.Errorf("resource %s: %w", k, err)
			}
			es, err := rowEdges(converge.ID(k), v)
			if err != nil {
				return err
			}
			out = append(out, ResourceRow{Resource: res, Consumes: es})
			if limit > 0 && len(out) >= limit {
				return ErrStop
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("scan resources: %w", err)
	}
	return out, nil
}

// ChildCount returns how many resources owner owns directly (the roots
// for ""), counting the owner index's entries without listing them.
func (s *Store) ChildCount(ctx context.Context, owner converge.ID) (int, error) {
	n := 0
	err := s.view(ctx, func(r Reader) error {
		var err error
		n, err = s.o.Owners.count(r, owner)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("count children of %s: %w", owner, err)
	}
	return n, nil
}

// Children returns the IDs of the resources owner owns directly, sorted.
func (s *Store) Children(ctx context.Context, owner converge.ID) ([]converge.ID, error) {
	var out []converge.ID
	err := s.view(ctx, func(r Reader) error {
		var err error
		out, err = s.o.Owners.children(r, owner)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list children of %s: %w", owner, err)
	}
	return out, nil
}

// Counts returns the phase counts of the resources owner owns directly.
func (s *Store) Counts(ctx context.Context, owner converge.ID) (converge.Counts, error) {
	rs, err := s.Resources(ctx, Filter{Owner: owner})
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
func (s *Store) EdgesOf(ctx context.Context, id converge.ID) (consumes, producedFor []converge.Edge, err error) {
	err = s.view(ctx, func(r Reader) error {
		consumes, producedFor = nil, nil
		v, err := r.Get(Resources, []byte(id))
		if err != nil {
			return err
		}
		if v != nil {
			// Non-nil for a resource that exists: it consumes none.
			if consumes, err = appendRowEdges([]converge.Edge{}, id, v); err != nil {
				return err
			}
		}
		p := codec.PrefixKey(id)
		var cs []converge.ID
		err = r.Scan(Producers, Range{Prefix: p, KeysOnly: true}, func(k, _ []byte) error {
			cs = append(cs, converge.ID(k[len(p):]))
			return nil
		})
		if err != nil {
			return err
		}
		return rowsByID(r, cs, func(i int, v []byte) error {
			c := cs[i]
			es, err := rowEdges(c, v)
			if err != nil {
				return err
			}
			j := slices.IndexFunc(es, func(e converge.Edge) bool { return e.Producer == id })
			if j < 0 {
				return fmt.Errorf("reverse edge index: %s→%s: no such edge", c, id)
			}
			producedFor = append(producedFor, es[j])
			return nil
		})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list edges of %s: %w", id, err)
	}
	return consumes, producedFor, nil
}

// Events returns the newest limit events of resource (all resources if
// resource is ""), oldest first, among the newest MaxEvents stored (the
// store keeps whole chunks, so up to one chunk more). limit 0 returns
// every event kept. For one resource it decodes only the chunks that hold
// one of its events (a byte search finds them), so reading a resource's
// few events among MaxEvents costs a scan of the bytes, not a decode of
// every event.
func (s *Store) Events(ctx context.Context, resource converge.ID, limit int) ([]converge.Event, error) {
	var needle []byte
	if resource != "" {
		needle = codec.ResourceNeedle(resource)
	}
	keep := s.o.MaxEvents    // the window: the newest keep events
	var rev []converge.Event // newest first
	err := s.view(ctx, func(r Reader) error {
		rev = nil
		seen := 0 // events in the chunks scanned so far
		return r.Scan(Events, Range{Desc: true}, func(k, v []byte) error {
			n, err := codec.ChunkLen(v)
			if err != nil {
				return fmt.Errorf("chunk %d: %w", codec.ChunkSeq(k), err)
			}
			older := 0 // this chunk's oldest events outside the window
			if keep > 0 && seen+n > keep {
				older = seen + n - keep
			}
			seen += n
			last := keep > 0 && seen >= keep
			if needle != nil && !bytes.Contains(v, needle) {
				if last {
					return ErrStop
				}
				return nil // no event of resource: skip decoding
			}
			evs, err := codec.DecodeChunk(v)
			if err != nil {
				return fmt.Errorf("chunk %d: %w", codec.ChunkSeq(k), err)
			}
			for i := len(evs) - 1; i >= older; i-- {
				if resource != "" && evs[i].Resource != resource {
					continue
				}
				rev = append(rev, evs[i])
				if limit > 0 && len(rev) >= limit {
					return ErrStop
				}
			}
			if last {
				return ErrStop
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	slices.Reverse(rev)
	return rev, nil
}

// Kinds returns every kind, sorted by name then version.
func (s *Store) Kinds(ctx context.Context) ([]*converge.Kind, error) {
	return viewJSON[converge.Kind](ctx, s, Kinds, "list kinds")
}

// Configs returns every provider config, sorted by name.
func (s *Store) Configs(ctx context.Context) ([]*converge.ProviderConfig, error) {
	return viewJSON[converge.ProviderConfig](ctx, s, Configs, "list provider configs")
}

// Bindings returns every binding, sorted by name.
func (s *Store) Bindings(ctx context.Context) ([]*converge.Binding, error) {
	return viewJSON[converge.Binding](ctx, s, Bindings, "list bindings")
}

// Deliveries returns every reactor delivery, sorted by key.
func (s *Store) Deliveries(ctx context.Context) ([]*converge.Delivery, error) {
	return viewJSON[converge.Delivery](ctx, s, Deliveries, "list deliveries")
}

// Applied returns the applied revision, or nil and no error if none was
// ever applied.
func (s *Store) Applied(ctx context.Context) (*converge.Revision, error) {
	var rev *converge.Revision
	err := s.view(ctx, func(r Reader) error {
		var err error
		rev, err = applied(r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get applied revision: %w", err)
	}
	return rev, nil
}

// PutSource records where the applied revision came from, replacing what
// was recorded before.
func (s *Store) PutSource(ctx context.Context, src *converge.AppliedSource) error {
	if src == nil || src.Repo == "" {
		return fmt.Errorf("put source: no repository")
	}
	if err := s.update(ctx, func(w Writer) error { return putJSON(w, Meta, MetaSource, src) }); err != nil {
		return fmt.Errorf("put source: %w", err)
	}
	return nil
}

// Source returns where the applied revision came from, or nil and no
// error if no revision was applied with its source recorded.
func (s *Store) Source(ctx context.Context) (*converge.AppliedSource, error) {
	var src *converge.AppliedSource
	err := s.view(ctx, func(r Reader) error {
		src = new(converge.AppliedSource)
		ok, err := getJSON(r, Meta, MetaSource, src)
		if !ok {
			src = nil
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get source: %w", err)
	}
	return src, nil
}

// PutControl records the operator's pin and suspensions, replacing what
// was recorded before; nil clears them.
func (s *Store) PutControl(ctx context.Context, c *converge.Control) error {
	if c == nil {
		c = &converge.Control{}
	}
	if err := s.update(ctx, func(w Writer) error { return putJSON(w, Meta, MetaControl, c) }); err != nil {
		return fmt.Errorf("put control: %w", err)
	}
	return nil
}

// Control returns the operator's pin and suspensions: the zero Control
// if none were recorded.
func (s *Store) Control(ctx context.Context) (*converge.Control, error) {
	var c *converge.Control
	err := s.view(ctx, func(r Reader) error {
		c = new(converge.Control)
		_, err := getJSON(r, Meta, MetaControl, c)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get control: %w", err)
	}
	return c, nil
}

// PutRevision stores rec, keyed by its Revision.Hash, in its own
// transaction, replacing any record of the same hash, and trims the
// records beyond Options.MaxRevisions in the same transaction.
func (s *Store) PutRevision(ctx context.Context, rec *converge.RevisionRecord) error {
	if rec == nil || rec.Revision.Hash == "" {
		return fmt.Errorf("put revision: empty hash")
	}
	err := s.update(ctx, func(w Writer) error {
		if err := putJSON(w, Revisions, []byte(rec.Revision.Hash), rec); err != nil {
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
func (s *Store) Revision(ctx context.Context, hash string) (*converge.RevisionRecord, error) {
	var rec *converge.RevisionRecord
	err := s.view(ctx, func(r Reader) error {
		rec = new(converge.RevisionRecord)
		ok, err := getJSON(r, Revisions, []byte(hash), rec)
		if err == nil && !ok {
			return converge.ErrNotFound
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get revision %s: %w", hash, err)
	}
	return rec, nil
}

// Revisions returns the newest limit revision records by Seen (ties by
// hash), newest first; limit 0 returns all.
func (s *Store) Revisions(ctx context.Context, limit int) ([]*converge.RevisionRecord, error) {
	recs, err := viewJSON[converge.RevisionRecord](ctx, s, Revisions, "list revisions")
	if err != nil {
		return nil, err
	}
	sort.SliceStable(recs, func(i, j int) bool {
		return newer(recs[i].Seen, recs[i].Revision.Hash, recs[j].Seen, recs[j].Revision.Hash) < 0
	})
	if limit > 0 && len(recs) > limit {
		recs = recs[:limit]
	}
	return recs, nil
}

// rowEdges returns the edges the row of id consumes (none for a nil row).
func rowEdges(id converge.ID, row []byte) ([]converge.Edge, error) {
	if row == nil {
		return nil, nil
	}
	return appendRowEdges(nil, id, row)
}

// appendRowEdges appends the edges the row of id consumes to out.
func appendRowEdges(out []converge.Edge, id converge.ID, row []byte) ([]converge.Edge, error) {
	rw, err := codec.SplitRow(row)
	if err != nil {
		return out, fmt.Errorf("resource %s: %w", id, err)
	}
	if len(rw.Edges) == 0 {
		return out, nil
	}
	es, err := codec.DecodeEdges(rw.Edges)
	if err != nil {
		return out, fmt.Errorf("resource %s: %w", id, err)
	}
	if out == nil {
		out = make([]converge.Edge, 0, len(es))
	}
	for _, e := range es {
		out = append(out, converge.Edge{Consumer: id, Producer: e.Producer, Flows: e.Flows})
	}
	return out, nil
}

func scanJSON[T any](r Reader, b Bucket) ([]*T, error) {
	var out []*T
	err := r.Scan(b, Range{}, func(k, v []byte) error {
		t := new(T)
		if err := json.Unmarshal(v, t); err != nil {
			return fmt.Errorf("%q: %w", k, err)
		}
		out = append(out, t)
		return nil
	})
	return out, err
}

func viewJSON[T any](ctx context.Context, s *Store, b Bucket, op string) ([]*T, error) {
	var out []*T
	err := s.view(ctx, func(r Reader) error {
		var err error
		out, err = scanJSON[T](r, b)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}
