package rules_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/internal/rules"
	"github.com/convergehq/converge/state/statetest"
)

// The rules over a third KV, a map in memory, with either owner-index
// layout: the conformance suite holds whatever is below the KV to the
// same semantics, and each layout runs on a KV it was not written for
// (Chunked is bbolt's, PerChild etcd's).
func TestConformanceChunked(t *testing.T) { statetest.Run(t, memOpener(rules.Chunked, 0)) }

// PerChild with small event chunks: a batch's events are cut in many.
func TestConformancePerChild(t *testing.T) { statetest.Run(t, memOpener(rules.PerChild, 2048)) }

func memOpener(owners rules.OwnerLayout, maxChunk int) statetest.Opener {
	return func(t *testing.T, opts state.Options) state.Backend {
		if opts.MaxEvents <= 0 {
			opts.MaxEvents = 200000
		}
		if opts.MaxRevisions <= 0 {
			opts.MaxRevisions = 1000
		}
		kv := &memKV{}
		for b := range kv.data {
			kv.data[b] = map[string][]byte{}
		}
		s := memStore{rules.New(kv, rules.Options{Name: "memory", Owners: owners,
			MaxEvents: opts.MaxEvents, MaxRevisions: opts.MaxRevisions, MaxChunk: maxChunk}), kv}
		t.Cleanup(func() {
			if err := s.Check(context.Background()); err != nil {
				t.Errorf("state check after test: %v", err)
			}
		})
		return s
	}
}

// memStore is a state.Backend over memKV.
type memStore struct {
	*rules.Store
	kv *memKV
}

func (s memStore) Stats() state.Stats {
	s.kv.mu.RLock()
	defer s.kv.mu.RUnlock()
	return s.kv.stats
}

func (memStore) Verify(context.Context) error { return nil }
func (memStore) Close() error                 { return nil }

// memKV is a rules.KV in memory: a View holds the read lock, an Update
// the write lock and an overlay of its writes, applied when it returns
// nil.
type memKV struct {
	mu    sync.RWMutex // guards data and stats
	data  [rules.NumBuckets]map[string][]byte
	stats state.Stats
}

func (m *memKV) View(_ context.Context, fn func(rules.Reader) error) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return fn(&memTx{kv: m})
}

func (m *memKV) Update(_ context.Context, fn func(rules.Writer) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := &memTx{kv: m}
	for b := range w.ops {
		w.ops[b] = map[string]*[]byte{}
	}
	if err := fn(w); err != nil {
		return err
	}
	var st state.Stats
	for b, ops := range w.ops {
		for k, v := range ops {
			if v == nil {
				if _, ok := m.data[b][k]; ok {
					delete(m.data[b], k)
					st.Deletes++
				}
				continue
			}
			m.data[b][k] = *v
			st.Puts++
			st.Bytes += uint64(len(k) + len(*v))
		}
	}
	if st.Puts+st.Deletes > 0 {
		m.stats.Commits++
		m.stats.Puts += st.Puts
		m.stats.Deletes += st.Deletes
		m.stats.Bytes += st.Bytes
	}
	return nil
}

// memTx reads the store and, in an Update, its own writes (ops: key →
// value, nil for a delete).
type memTx struct {
	kv  *memKV
	ops [rules.NumBuckets]map[string]*[]byte
}

func (x *memTx) Get(b rules.Bucket, key []byte) ([]byte, error) {
	if v, ok := x.ops[b][string(key)]; ok {
		if v == nil {
			return nil, nil
		}
		return *v, nil
	}
	return x.kv.data[b][string(key)], nil
}

func (x *memTx) GetMany(b rules.Bucket, keys [][]byte) ([][]byte, error) {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i], _ = x.Get(b, k)
	}
	return out, nil
}

// keys returns the keys of b with prefix, sorted.
func (x *memTx) keys(b rules.Bucket, prefix []byte) []string {
	var ks []string
	for k := range x.kv.data[b] {
		if _, ok := x.ops[b][k]; !ok && hasPrefix(k, prefix) {
			ks = append(ks, k)
		}
	}
	for k, v := range x.ops[b] {
		if v != nil && hasPrefix(k, prefix) {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

func hasPrefix(k string, p []byte) bool { return len(k) >= len(p) && k[:len(p)] == string(p) }

func (x *memTx) Scan(b rules.Bucket, r rules.Range, fn func(k, v []byte) error) error {
	ks := x.keys(b, r.Prefix)
	if r.Desc {
		slices.Reverse(ks)
	}
	for _, k := range ks {
		if r.From != nil && (!r.Desc && k < string(r.From) || r.Desc && k > string(r.From)) {
			continue
		}
		var v []byte
		if !r.KeysOnly {
			v, _ = x.Get(b, []byte(k))
		}
		if err := fn([]byte(k), v); err != nil {
			if err == rules.ErrStop {
				return nil
			}
			return err
		}
	}
	return nil
}

func (x *memTx) Count(b rules.Bucket, prefix []byte) (int, error) {
	return len(x.keys(b, prefix)), nil
}

func (x *memTx) FirstKeys(b rules.Bucket, prefixes [][]byte) ([][]byte, error) {
	out := make([][]byte, len(prefixes))
	for i, p := range prefixes {
		if ks := x.keys(b, p); len(ks) > 0 {
			out[i] = []byte(ks[0])
		}
	}
	return out, nil
}

func (x *memTx) Put(b rules.Bucket, key, value []byte) error {
	v := slices.Clone(value)
	if v == nil {
		v = []byte{}
	}
	x.ops[b][string(key)] = &v
	return nil
}

func (x *memTx) Delete(b rules.Bucket, key []byte) error {
	x.ops[b][string(key)] = nil
	return nil
}

func (x *memTx) Prefetch(rules.Bucket, [][]byte) error { return nil }
