package etcdstate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/internal/codec"
)

// pageSize is how many keys one range request of a scan returns.
const pageSize = 1000

// view is one read: every request it makes reads the same etcd
// revision, so a read is one consistent snapshot, like a bbolt read
// transaction.
type view struct {
	s   *Store
	ctx context.Context
	rev int64
}

// errStop ends a scan early without an error.
var errStop = errors.New("stop")

// view runs fn at one revision: the newest, or, while a batch journal
// is committed but not yet applied, the one before its commit marker
// (the state before that batch, whole). A revision compacted away
// meanwhile starts the read again.
func (s *Store) view(fn func(v *view) error) error {
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err := s.viewOnce(ctx, fn)
		cancel()
		if errors.Is(err, rpctypes.ErrCompacted) && try < 3 {
			continue
		}
		return err
	}
}

func (s *Store) viewOnce(ctx context.Context, fn func(v *view) error) error {
	resp, err := s.cli.Get(ctx, s.p+jCommit)
	if err != nil {
		return err
	}
	rev := resp.Header.Revision
	if len(resp.Kvs) > 0 {
		rev = resp.Kvs[0].CreateRevision - 1
	}
	return fn(&view{s: s, ctx: ctx, rev: rev})
}

// get returns key's value, or nil if it is absent.
func (v *view) get(key string) ([]byte, error) {
	resp, err := v.s.cli.Get(v.ctx, v.s.p+key, clientv3.WithRev(v.rev))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	if resp.Kvs[0].Value == nil {
		return []byte{}, nil
	}
	return resp.Kvs[0].Value, nil
}

// getMany returns the values of keys (nil for absent ones).
func (v *view) getMany(keys []string) ([][]byte, error) {
	out := make([][]byte, len(keys))
	n := v.s.opts.MaxTxnOps
	groups := (len(keys) + n - 1) / n
	if groups == 0 {
		return out, nil
	}
	err := parallel(groups, readWidth, func(g int) error {
		lo, hi := g*n, min(len(keys), (g+1)*n)
		gets := make([]clientv3.Op, 0, hi-lo)
		for _, k := range keys[lo:hi] {
			gets = append(gets, clientv3.OpGet(v.s.p+k, clientv3.WithRev(v.rev)))
		}
		resp, err := v.s.cli.Txn(v.ctx).Then(gets...).Commit()
		if err != nil {
			return err
		}
		for i, r := range resp.Responses {
			if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
				out[lo+i] = kvs[0].Value
				if out[lo+i] == nil {
					out[lo+i] = []byte{}
				}
			}
		}
		return nil
	})
	return out, err
}

// scan calls fn with every key under prefix from the first at or after
// from ("" for the start), in key order, with the key relative to the
// store's prefix. fn returning errStop ends the scan without error.
func (v *view) scan(prefix, from string, keysOnly bool, fn func(key string, val []byte) error) error {
	end := clientv3.GetPrefixRangeEnd(v.s.p + prefix)
	start := v.s.p + prefix
	if from != "" && v.s.p+from > start {
		start = v.s.p + from
	}
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(pageSize), clientv3.WithRev(v.rev)}
		if keysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		resp, err := v.s.cli.Get(v.ctx, start, opts...)
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			if err := fn(string(kv.Key[len(v.s.p):]), kv.Value); err != nil {
				if err == errStop {
					return nil
				}
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// scanDesc is scan from the last key to the first.
func (v *view) scanDesc(prefix string, fn func(key string, val []byte) error) error {
	start := v.s.p + prefix
	end := clientv3.GetPrefixRangeEnd(start)
	for {
		resp, err := v.s.cli.Get(v.ctx, start, clientv3.WithRange(end), clientv3.WithLimit(pageSize),
			clientv3.WithRev(v.rev), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			if err := fn(string(kv.Key[len(v.s.p):]), kv.Value); err != nil {
				if err == errStop {
					return nil
				}
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		end = string(resp.Kvs[len(resp.Kvs)-1].Key)
	}
}

// Load returns everything the scheduler needs, read at one revision:
// resources sorted by ID, edges sorted by consumer then producer,
// kinds, configs, bindings, deliveries, the applied revision and the
// last event Seq. It implements the scheduler's Store port.
func (s *Store) Load() (*converge.Snapshot, error) {
	snap := new(converge.Snapshot)
	err := s.view(func(v *view) error {
		*snap = converge.Snapshot{}
		err := v.scan(kResources, "", false, func(k string, val []byte) error {
			r, err := codec.DecodeResource(val)
			if err != nil {
				return fmt.Errorf("resource %s: %w", k[len(kResources):], err)
			}
			snap.Resources = append(snap.Resources, r)
			edges, err := rowEdges(converge.ID(k[len(kResources):]), val)
			if err != nil {
				return err
			}
			snap.Edges = append(snap.Edges, edges...)
			return nil
		})
		if err != nil {
			return err
		}
		if snap.Kinds, err = scanJSON[converge.Kind](v, kKinds); err != nil {
			return err
		}
		if snap.Configs, err = scanJSON[converge.ProviderConfig](v, kConfigs); err != nil {
			return err
		}
		if snap.Bindings, err = scanJSON[converge.Binding](v, kBindings); err != nil {
			return err
		}
		if snap.Deliveries, err = scanJSON[converge.Delivery](v, kDeliveries); err != nil {
			return err
		}
		if snap.Applied, err = applied(v); err != nil {
			return err
		}
		mv, err := v.get(mEvents)
		if err != nil {
			return err
		}
		snap.LastEventSeq, _ = eventsMeta(mv)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load state: %w", err)
	}
	return snap, nil
}

// rowEdges returns the edges the row of id consumes.
func rowEdges(id converge.ID, row []byte) ([]converge.Edge, error) {
	rw, err := codec.SplitRow(row)
	if err != nil {
		return nil, fmt.Errorf("resource %s: %w", id, err)
	}
	es, err := codec.DecodeEdges(rw.Edges)
	if err != nil {
		return nil, fmt.Errorf("resource %s: %w", id, err)
	}
	if len(es) == 0 {
		return nil, nil
	}
	out := make([]converge.Edge, len(es))
	for i, e := range es {
		out[i] = converge.Edge{Consumer: id, Producer: e.Producer, Flows: e.Flows}
	}
	return out, nil
}

func scanJSON[T any](v *view, prefix string) ([]*T, error) {
	var out []*T
	err := v.scan(prefix, "", false, func(k string, val []byte) error {
		t := new(T)
		if err := json.Unmarshal(val, t); err != nil {
			return fmt.Errorf("%q: %w", k, err)
		}
		out = append(out, t)
		return nil
	})
	return out, err
}

func viewJSON[T any](s *Store, prefix, op string) ([]*T, error) {
	var out []*T
	err := s.view(func(v *view) error {
		var err error
		out, err = scanJSON[T](v, prefix)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

func applied(v *view) (*converge.Revision, error) {
	val, err := v.get(mApplied)
	if err != nil || val == nil {
		return nil, err
	}
	r := new(converge.Revision)
	if err := json.Unmarshal(val, r); err != nil {
		return nil, fmt.Errorf("applied revision: %w", err)
	}
	return r, nil
}

// Resource returns the resource id, or converge.ErrNotFound (wrapped).
func (s *Store) Resource(id converge.ID) (*converge.Resource, error) {
	var r *converge.Resource
	err := s.view(func(v *view) error {
		val, err := v.get(resKey(id))
		if err != nil {
			return err
		}
		if val == nil {
			return converge.ErrNotFound
		}
		r, err = codec.DecodeResource(val)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get resource %s: %w", id, err)
	}
	return r, nil
}

// ResourcesByID returns the resources ids name, in ids' order, from one
// consistent view; nil for an id the store does not hold.
func (s *Store) ResourcesByID(ids []converge.ID) ([]*converge.Resource, error) {
	out := make([]*converge.Resource, len(ids))
	err := s.view(func(v *view) error {
		// Gets batched in transactions, not a round trip per id.
		keys := make([]string, len(ids))
		for i, id := range ids {
			keys[i] = resKey(id)
		}
		vals, err := v.getMany(keys)
		if err != nil {
			return err
		}
		for i, val := range vals {
			out[i] = nil
			if val == nil {
				continue
			}
			if out[i], err = codec.DecodeResource(val); err != nil {
				return fmt.Errorf("resource %s: %w", ids[i], err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("get resources: %w", err)
	}
	return out, nil
}

// ResourceHeadsAfter is ResourcesAfter without each resource's declared
// spec, spec and status.
func (s *Store) ResourceHeadsAfter(kind string, after converge.ID, limit int) ([]state.ResourceRow, error) {
	rows, err := s.ResourcesAfter(kind, after, limit)
	for _, r := range rows {
		r.Resource.Declared, r.Resource.Spec, r.Resource.Status = nil, nil, nil
	}
	return rows, err
}

// children returns owner's children from the owner index, sorted.
func (v *view) children(owner converge.ID) ([]converge.ID, error) {
	var out []converge.ID
	p := ownerPrefix(owner)
	err := v.scan(p, "", true, func(k string, _ []byte) error {
		out = append(out, converge.ID(k[len(p):]))
		return nil
	})
	return out, err
}

// Resources returns the resources matching f, sorted by ID.
func (s *Store) Resources(f state.Filter) ([]*converge.Resource, error) {
	match := func(r *converge.Resource) bool {
		return (f.Kind == "" || r.Kind == f.Kind) &&
			(f.Phase == "" || r.Phase == f.Phase) &&
			(!f.RootsOnly || r.Owner == "") &&
			(f.Owner == "" || r.Owner == f.Owner)
	}
	var out []*converge.Resource
	err := s.view(func(v *view) error {
		out = nil
		if f.Owner != "" || f.RootsOnly {
			kids, err := v.children(f.Owner)
			if err != nil {
				return err
			}
			for len(kids) > 0 {
				page := kids[:min(len(kids), pageSize)]
				kids = kids[len(page):]
				keys := make([]string, len(page))
				for i, c := range page {
					keys[i] = resKey(c)
				}
				vals, err := v.getMany(keys)
				if err != nil {
					return err
				}
				for i, val := range vals {
					if val == nil {
						return fmt.Errorf("owner index: %s → %s: child does not exist", f.Owner, page[i])
					}
					r, err := codec.DecodeResource(val)
					if err != nil {
						return fmt.Errorf("resource %s: %w", page[i], err)
					}
					if match(r) {
						out = append(out, r)
						if f.Limit > 0 && len(out) >= f.Limit {
							return nil
						}
					}
				}
			}
			return nil
		}
		prefix := kResources
		if f.Kind != "" {
			prefix += f.Kind + "/"
		}
		return v.scan(prefix, "", false, func(k string, val []byte) error {
			r, err := codec.DecodeResource(val)
			if err != nil {
				return fmt.Errorf("resource %s: %w", k[len(kResources):], err)
			}
			if match(r) {
				out = append(out, r)
				if f.Limit > 0 && len(out) >= f.Limit {
					return errStop
				}
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list resources: %w", err)
	}
	return out, nil
}

// ResourcesAfter returns up to limit resources (limit ≤ 0: no cap) of
// kind ("" for every kind) whose IDs sort after after, in ID order, each
// with the edges it consumes; see state.Store.ResourcesAfter.
func (s *Store) ResourcesAfter(kind string, after converge.ID, limit int) ([]state.ResourceRow, error) {
	prefix := kResources
	if kind != "" {
		prefix += kind + "/"
	}
	from := ""
	if after != "" {
		from = resKey(after) + "\x00"
	}
	var out []state.ResourceRow
	err := s.view(func(v *view) error {
		out = nil
		return v.scan(prefix, from, false, func(k string, val []byte) error {
			id := converge.ID(k[len(kResources):])
			r, err := codec.DecodeResource(val)
			if err != nil {
				return fmt.Errorf("resource %s: %w", id, err)
			}
			es, err := rowEdges(id, val)
			if err != nil {
				return err
			}
			out = append(out, state.ResourceRow{Resource: r, Consumes: es})
			if limit > 0 && len(out) >= limit {
				return errStop
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
// for ""), counting the owner index's keys without reading them.
func (s *Store) ChildCount(owner converge.ID) (int, error) {
	n := 0
	err := s.view(func(v *view) error {
		resp, err := s.cli.Get(v.ctx, s.p+ownerPrefix(owner), clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(v.rev))
		if err != nil {
			return err
		}
		n = int(resp.Count)
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
	err := s.view(func(v *view) error {
		var err error
		out, err = v.children(owner)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list children of %s: %w", owner, err)
	}
	return out, nil
}

// Counts returns the phase counts of the resources owner owns directly.
func (s *Store) Counts(owner converge.ID) (converge.Counts, error) {
	rs, err := s.Resources(state.Filter{Owner: owner})
	if err != nil {
		return converge.Counts{}, err
	}
	var c converge.Counts
	for _, r := range rs {
		c.Add(r.Phase)
	}
	return c, nil
}

// EdgesOf returns the edges id consumes and the edges it is produced
// for, each sorted by the other endpoint.
func (s *Store) EdgesOf(id converge.ID) (consumes, producedFor []converge.Edge, err error) {
	err = s.view(func(v *view) error {
		consumes, producedFor = nil, nil
		val, err := v.get(resKey(id))
		if err != nil {
			return err
		}
		if val != nil {
			if consumes, err = rowEdges(id, val); err != nil {
				return err
			}
		}
		p := kProducers + string(codec.PrefixKey(id))
		var cs []converge.ID
		if err := v.scan(p, "", true, func(k string, _ []byte) error {
			cs = append(cs, converge.ID(k[len(p):]))
			return nil
		}); err != nil {
			return err
		}
		keys := make([]string, len(cs))
		for i, c := range cs {
			keys[i] = resKey(c)
		}
		vals, err := v.getMany(keys)
		if err != nil {
			return err
		}
		for i, c := range cs {
			var es []converge.Edge
			if vals[i] != nil {
				if es, err = rowEdges(c, vals[i]); err != nil {
					return err
				}
			}
			j := slices.IndexFunc(es, func(e converge.Edge) bool { return e.Producer == id })
			if j < 0 {
				return fmt.Errorf("reverse edge index: %s→%s: no such edge", c, id)
			}
			producedFor = append(producedFor, es[j])
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list edges of %s: %w", id, err)
	}
	return consumes, producedFor, nil
}

// Events returns the newest limit events of resource (all resources if
// resource is ""), oldest first; limit 0 returns every event kept. Like
// the bbolt store it decodes only the chunks holding one of resource's
// events.
func (s *Store) Events(resource converge.ID, limit int) ([]converge.Event, error) {
	var needle []byte
	if resource != "" {
		needle = codec.ResourceNeedle(resource)
	}
	var rev []converge.Event // newest first
	err := s.view(func(v *view) error {
		rev = nil
		return v.scanDesc(kEvents, func(k string, val []byte) error {
			if needle != nil && !bytes.Contains(val, needle) {
				return nil
			}
			evs, err := codec.DecodeChunk(val)
			if err != nil {
				return fmt.Errorf("chunk %d: %w", codec.ChunkSeq([]byte(k[len(kEvents):])), err)
			}
			for i := len(evs) - 1; i >= 0; i-- {
				if resource != "" && evs[i].Resource != resource {
					continue
				}
				rev = append(rev, evs[i])
				if limit > 0 && len(rev) >= limit {
					return errStop
				}
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
func (s *Store) Kinds() ([]*converge.Kind, error) {
	return viewJSON[converge.Kind](s, kKinds, "list kinds")
}

// Configs returns every provider config, sorted by name.
func (s *Store) Configs() ([]*converge.ProviderConfig, error) {
	return viewJSON[converge.ProviderConfig](s, kConfigs, "list provider configs")
}

// Bindings returns every binding, sorted by name.
func (s *Store) Bindings() ([]*converge.Binding, error) {
	return viewJSON[converge.Binding](s, kBindings, "list bindings")
}

// Deliveries returns every reactor delivery, sorted by key.
func (s *Store) Deliveries() ([]*converge.Delivery, error) {
	return viewJSON[converge.Delivery](s, kDeliveries, "list deliveries")
}

// Applied returns the applied revision, or nil and no error if none was
// ever applied.
func (s *Store) Applied() (*converge.Revision, error) {
	var r *converge.Revision
	err := s.view(func(v *view) error {
		var err error
		r, err = applied(v)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get applied revision: %w", err)
	}
	return r, nil
}

// PutSource records where the applied revision came from.
func (s *Store) PutSource(src *converge.AppliedSource) error {
	if src == nil || src.Repo == "" {
		return fmt.Errorf("put source: no repository")
	}
	if err := s.update(func(w *wtx) error { return w.putJSON(mSource, src) }); err != nil {
		return fmt.Errorf("put source: %w", err)
	}
	return nil
}

// Source returns where the applied revision came from, or nil and no
// error if none was recorded.
func (s *Store) Source() (*converge.AppliedSource, error) {
	var src *converge.AppliedSource
	err := s.view(func(v *view) error {
		val, err := v.get(mSource)
		if err != nil || val == nil {
			return err
		}
		src = new(converge.AppliedSource)
		return json.Unmarshal(val, src)
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
	if err := s.update(func(w *wtx) error { return w.putJSON(mControl, c) }); err != nil {
		return fmt.Errorf("put control: %w", err)
	}
	return nil
}

// Control returns the operator's pin and suspensions: the zero Control
// if none were recorded.
func (s *Store) Control() (*converge.Control, error) {
	c := new(converge.Control)
	err := s.view(func(v *view) error {
		val, err := v.get(mControl)
		if err != nil || val == nil {
			return err
		}
		return json.Unmarshal(val, c)
	})
	if err != nil {
		return nil, fmt.Errorf("get control: %w", err)
	}
	return c, nil
}

// PutRevision stores rec, keyed by its Revision.Hash, and trims the
// records beyond Options.MaxRevisions in the same write.
func (s *Store) PutRevision(rec *converge.RevisionRecord) error {
	if rec == nil || rec.Revision.Hash == "" {
		return fmt.Errorf("put revision: empty hash")
	}
	err := s.update(func(w *wtx) error {
		if err := w.putJSON(kRevisions+rec.Revision.Hash, rec); err != nil {
			return err
		}
		return s.trimRevisions(w)
	})
	if err != nil {
		return fmt.Errorf("put revision %s: %w", rec.Revision.Hash, err)
	}
	return nil
}

// trimRevisions deletes the oldest revision records beyond MaxRevisions
// (by Seen, ties by hash), never the applied revision's.
func (s *Store) trimRevisions(w *wtx) error {
	// Counting keys reads no value: a store under the limit pays that.
	n, err := s.cli.Get(w.ctx, s.p+kRevisions, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("count revisions: %w", err)
	}
	if int(n.Count)+1 <= s.opts.MaxRevisions {
		return nil
	}
	resp, err := s.cli.Get(w.ctx, s.p+kRevisions, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("read revisions: %w", err)
	}
	type seen struct {
		hash string
		at   time.Time
	}
	var all []seen
	stored := map[string]bool{}
	for _, kv := range resp.Kvs {
		hash := string(kv.Key[len(s.p)+len(kRevisions):])
		stored[hash] = true
		val := kv.Value
		if op, ok := w.ops[kRevisions+hash]; ok {
			val = op.val
		}
		var r struct {
			Seen time.Time `json:"seen"`
		}
		if err := json.Unmarshal(val, &r); err != nil {
			return fmt.Errorf("revision %s: decode: %w", hash, err)
		}
		all = append(all, seen{hash, r.Seen})
	}
	for key, op := range w.ops {
		hash, ok := strings.CutPrefix(key, kRevisions)
		if !ok || stored[hash] || op.del {
			continue
		}
		var r struct {
			Seen time.Time `json:"seen"`
		}
		if err := json.Unmarshal(op.val, &r); err != nil {
			return fmt.Errorf("revision %s: decode: %w", hash, err)
		}
		all = append(all, seen{hash, r.Seen})
	}
	if len(all) <= s.opts.MaxRevisions {
		return nil
	}
	sort.SliceStable(all, func(i, j int) bool {
		if !all[i].at.Equal(all[j].at) {
			return all[i].at.After(all[j].at)
		}
		return all[i].hash < all[j].hash
	})
	av, err := w.get(mApplied)
	if err != nil {
		return err
	}
	var app converge.Revision
	if av != nil {
		if err := json.Unmarshal(av, &app); err != nil {
			return fmt.Errorf("applied revision: %w", err)
		}
	}
	for _, r := range all[s.opts.MaxRevisions:] {
		if av != nil && r.hash == app.Hash {
			continue
		}
		w.del(kRevisions + r.hash)
	}
	return nil
}

// Revision returns the record of hash, or converge.ErrNotFound (wrapped).
func (s *Store) Revision(hash string) (*converge.RevisionRecord, error) {
	rec := new(converge.RevisionRecord)
	err := s.view(func(v *view) error {
		val, err := v.get(kRevisions + hash)
		if err != nil {
			return err
		}
		if val == nil {
			return converge.ErrNotFound
		}
		return json.Unmarshal(val, rec)
	})
	if err != nil {
		return nil, fmt.Errorf("get revision %s: %w", hash, err)
	}
	return rec, nil
}

// Revisions returns the newest limit revision records by Seen (ties by
// hash), newest first; limit 0 returns all.
func (s *Store) Revisions(limit int) ([]*converge.RevisionRecord, error) {
	recs, err := viewJSON[converge.RevisionRecord](s, kRevisions, "list revisions")
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
