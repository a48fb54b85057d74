package rules

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/internal/codec"
)

// OwnerLayout is how a backend lays out the owner index (bucket Owners),
// the map from an owner to its children (roots under the empty owner).
// The rules that keep it (Commit), read it (Children, ChildCount,
// Resources by owner) and check it (Check) are the same for every
// layout; Chunked and PerChild are the two there are.
type OwnerLayout interface {
	// begin starts the index's changes of one write transaction.
	begin(w Writer) ownerTx
	// children returns owner's children, sorted.
	children(r Reader, owner converge.ID) ([]converge.ID, error)
	// count returns how many children owner has.
	count(r Reader, owner converge.ID) (int, error)
	// entries calls fn with every owner and child the index lists, and
	// reports what is malformed.
	entries(r Reader, report reportFunc, fn func(owner, child converge.ID)) error
}

// ownerTx is what one write transaction does to the owner index.
type ownerTx interface {
	add(owner, child converge.ID) error
	remove(owner, child converge.ID) error
	// firstChildren returns a child of each owner, or "" for one that
	// owns nothing, as the index is after this transaction.
	firstChildren(owners []converge.ID) ([]converge.ID, error)
	// flush writes what add and remove changed.
	flush() error
}

// The owner index's layouts.
var (
	// Chunked keeps an owner's children as chunks: key owner\x00bound,
	// value the chunk's child IDs sorted and joined by NUL. An owner's
	// first chunk has the empty bound; every other chunk's bound is its
	// first child, and a chunk holds the children from its bound up to
	// the next chunk's bound. A batch rewrites each chunk it changes
	// once, so creating 500 children of one owner costs a handful of
	// puts, not 500 (bbolt, where a put costs pages).
	Chunked OwnerLayout = chunked{}
	// PerChild keeps one key per child, owner\x00child → empty (etcd,
	// which counts a prefix's keys without reading them, and whose
	// writes are counted in operations, not pages).
	PerChild OwnerLayout = perChild{}
)

// maxChunk is the most children a chunk holds before it splits.
const maxChunk = 128

type chunked struct{}

// chunk is one owners value in memory.
type chunk struct {
	key   []byte // as stored; nil for a chunk not yet stored
	bound converge.ID
	kids  []converge.ID
	dirty bool
}

// chunkTx is the owner index of one write transaction: the chunks it
// touched, each read on first touch (a seek finds the chunk that holds
// a child), written by flush. Only those chunks are read: an owner of a
// million children has ~8,000 chunks, and a batch that adds a few
// thousand children must not read them all (every batch of a big
// composition's commits did, which made them slower as the owner grew).
type chunkTx struct {
	w      Writer
	owners map[converge.ID]map[converge.ID]*chunk // owner → bound → chunk
	// holder's scratch: the key it seeks (owner\x00child, the owner's
	// prefix first), the chunks of that owner, the chunk its scan found
	// and the scan's callback, bound once.
	buf     []byte
	plen    int
	loaded  map[converge.ID]*chunk
	found   *chunk
	onChunk func(k, v []byte) error
}

func (chunked) begin(w Writer) ownerTx {
	x := &chunkTx{w: w, owners: map[converge.ID]map[converge.ID]*chunk{}}
	x.onChunk = x.foundChunk
	return x
}

// holder returns the chunk of owner that holds (or would hold) child:
// the one with the greatest bound not above child, read on first use. An
// owner with no chunk gets its first (bound "") in memory.
func (x *chunkTx) holder(owner, child converge.ID) (*chunk, error) {
	loaded := x.owners[owner]
	if loaded == nil {
		loaded = map[converge.ID]*chunk{}
		x.owners[owner] = loaded
	}
	x.buf = append(append(x.buf[:0], owner...), 0)
	x.plen = len(x.buf)
	x.buf = append(x.buf, child...)
	x.loaded, x.found = loaded, nil
	err := x.w.Scan(Owners, Range{Prefix: x.buf[:x.plen], From: x.buf, Desc: true}, x.onChunk)
	if err != nil {
		return nil, err
	}
	ch := x.found
	if ch == nil { // the owner has no chunk stored
		if ch = loaded[""]; ch == nil {
			ch = &chunk{}
			loaded[""] = ch
		}
	}
	return ch, nil
}

// foundChunk is holder's scan callback: the chunk at k, loaded now
// unless it was before.
func (x *chunkTx) foundChunk(k, v []byte) error {
	if ch := x.loaded[converge.ID(k[x.plen:])]; ch != nil {
		x.found = ch
		return ErrStop
	}
	ch := &chunk{key: bytes.Clone(k), bound: converge.ID(k[x.plen:]), kids: splitIDs(v)}
	x.loaded[ch.bound] = ch
	x.found = ch
	return ErrStop
}

func (x *chunkTx) add(owner, child converge.ID) error {
	c, err := x.holder(owner, child)
	if err != nil {
		return err
	}
	if i, ok := slices.BinarySearch(c.kids, child); !ok {
		c.kids = slices.Insert(c.kids, i, child)
		c.dirty = true
	}
	return nil
}

func (x *chunkTx) remove(owner, child converge.ID) error {
	c, err := x.holder(owner, child)
	if err != nil {
		return err
	}
	if i, ok := slices.BinarySearch(c.kids, child); ok {
		c.kids = slices.Delete(c.kids, i, i+1)
		c.dirty = true
	}
	return nil
}

func (x *chunkTx) firstChildren(owners []converge.ID) ([]converge.ID, error) {
	out := make([]converge.ID, len(owners))
	for i, o := range owners {
		var err error
		if out[i], err = x.firstChild(o); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// firstChild returns one child of owner, or "" if it owns nothing, as
// the index will be once flushed.
func (x *chunkTx) firstChild(owner converge.ID) (converge.ID, error) {
	loaded := x.owners[owner]
	if ch := loaded[""]; ch != nil && ch.key == nil && len(ch.kids) > 0 {
		return ch.kids[0], nil // a first chunk not stored yet
	}
	p := codec.PrefixKey(owner)
	var first converge.ID
	err := x.w.Scan(Owners, Range{Prefix: p}, func(k, v []byte) error {
		if ch := loaded[converge.ID(k[len(p):])]; ch != nil {
			if len(ch.kids) > 0 {
				first = ch.kids[0]
				return ErrStop
			}
			return nil
		}
		if len(v) > 0 {
			i := bytes.IndexByte(v, 0)
			if i < 0 {
				i = len(v)
			}
			first = converge.ID(v[:i])
			return ErrStop
		}
		return nil
	})
	return first, err
}

// flush writes every changed chunk, owners and bounds in key order:
// oversized ones split, empty ones deleted; when the first chunk (bound
// "") empties, the next one takes its place.
func (x *chunkTx) flush() error {
	for _, o := range slices.Sorted(mapKeys(x.owners)) {
		loaded := x.owners[o]
		var bounds []converge.ID
		for b, c := range loaded {
			if c.dirty {
				bounds = append(bounds, b)
			}
		}
		slices.Sort(bounds)
		firstGone := false
		for _, b := range bounds {
			c := loaded[b]
			if len(c.kids) == 0 {
				if c.key != nil {
					if err := x.w.Delete(Owners, c.key); err != nil {
						return err
					}
				}
				delete(loaded, b)
				firstGone = firstGone || b == ""
				continue
			}
			// No copy: each split-off head is capped at maxChunk, so the
			// chunks share one array without overlapping.
			for {
				head := c.kids
				var rest *chunk
				if len(head) > maxChunk {
					rest = &chunk{bound: head[maxChunk], kids: head[maxChunk:]}
					head = head[:maxChunk:maxChunk]
				}
				key := codec.PairKey(o, c.bound)
				if err := x.w.Put(Owners, key, joinIDs(head)); err != nil {
					return err
				}
				c.key, c.kids, c.dirty = key, head, false
				if rest == nil {
					break
				}
				loaded[rest.bound] = rest
				c = rest
			}
		}
		if firstGone {
			if err := x.promoteFirst(o); err != nil {
				return err
			}
		}
	}
	return nil
}

// promoteFirst gives owner's lowest remaining chunk the empty bound, after
// its first chunk was deleted.
func (x *chunkTx) promoteFirst(owner converge.ID) error {
	p := codec.PrefixKey(owner)
	var old, val []byte
	err := x.w.Scan(Owners, Range{Prefix: p}, func(k, v []byte) error {
		old, val = bytes.Clone(k), bytes.Clone(v)
		return ErrStop
	})
	if err != nil || old == nil || len(old) == len(p) {
		return err // it owns nothing now, or the first is in place
	}
	if err := x.w.Delete(Owners, old); err != nil {
		return err
	}
	if err := x.w.Put(Owners, codec.PairKey(owner, ""), val); err != nil {
		return err
	}
	delete(x.owners[owner], converge.ID(old[len(p):]))
	return nil
}

func joinIDs(ids []converge.ID) []byte {
	n := len(ids)
	for _, id := range ids {
		n += len(id)
	}
	b := make([]byte, 0, n)
	for i, id := range ids {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, id...)
	}
	return b
}

func splitIDs(v []byte) []converge.ID {
	if len(v) == 0 {
		return nil
	}
	parts := bytes.Split(v, []byte{0})
	out := make([]converge.ID, len(parts))
	for i, p := range parts {
		out[i] = converge.ID(p)
	}
	return out
}

// children returns owner's children from its chunks, in bound order.
func (chunked) children(r Reader, owner converge.ID) ([]converge.ID, error) {
	var out []converge.ID
	p := codec.PrefixKey(owner)
	first := true
	err := r.Scan(Owners, Range{Prefix: p}, func(k, v []byte) error {
		if first && len(k) != len(p) {
			return fmt.Errorf("owner index: %s: first chunk has bound %q", owner, k[len(p):])
		}
		first = false
		out = append(out, splitIDs(v)...)
		return nil
	})
	return out, err
}

func (chunked) count(r Reader, owner converge.ID) (int, error) {
	n := 0
	err := r.Scan(Owners, Range{Prefix: codec.PrefixKey(owner)}, func(_, v []byte) error {
		if len(v) > 0 {
			n += bytes.Count(v, []byte{0}) + 1
		}
		return nil
	})
	return n, err
}

// entries checks the chunks' shape (first bound empty, bounds and
// children increasing, none empty) as it lists them.
func (chunked) entries(r Reader, report reportFunc, fn func(owner, child converge.ID)) error {
	var prevOwner, prevBound, prevLast converge.ID
	first := true
	return r.Scan(Owners, Range{}, func(k, v []byte) error {
		owner, bound, ok := codec.SplitPair(k)
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
			fn(owner, c)
		}
		prevOwner, prevBound = owner, bound
		if len(kids) > 0 {
			prevLast = kids[len(kids)-1]
		}
		return nil
	})
}

type perChild struct{}

// perChildTx writes each change as it comes: there is nothing to gather.
type perChildTx struct{ w Writer }

func (perChild) begin(w Writer) ownerTx { return perChildTx{w} }

func (x perChildTx) add(owner, child converge.ID) error {
	return x.w.Put(Owners, codec.PairKey(owner, child), empty)
}

func (x perChildTx) remove(owner, child converge.ID) error {
	return x.w.Delete(Owners, codec.PairKey(owner, child))
}

func (x perChildTx) firstChildren(owners []converge.ID) ([]converge.ID, error) {
	ps := make([][]byte, len(owners))
	for i, o := range owners {
		ps[i] = codec.PrefixKey(o)
	}
	keys, err := x.w.FirstKeys(Owners, ps)
	if err != nil {
		return nil, fmt.Errorf("read owner index: %w", err)
	}
	out := make([]converge.ID, len(owners))
	for i, k := range keys {
		if k != nil {
			out[i] = converge.ID(k[len(ps[i]):])
		}
	}
	return out, nil
}

func (perChildTx) flush() error { return nil }

func (perChild) children(r Reader, owner converge.ID) ([]converge.ID, error) {
	var out []converge.ID
	p := codec.PrefixKey(owner)
	err := r.Scan(Owners, Range{Prefix: p, KeysOnly: true}, func(k, _ []byte) error {
		out = append(out, converge.ID(k[len(p):]))
		return nil
	})
	return out, err
}

func (perChild) count(r Reader, owner converge.ID) (int, error) {
	return r.Count(Owners, codec.PrefixKey(owner))
}

func (perChild) entries(r Reader, report reportFunc, fn func(owner, child converge.ID)) error {
	return r.Scan(Owners, Range{KeysOnly: true}, func(k, _ []byte) error {
		owner, child, ok := codec.SplitPair(k)
		if !ok {
			report("owner index: malformed key %q", k)
			return nil
		}
		fn(owner, child)
		return nil
	})
}

// IndexRoots adds every resource without an owner to the owner index,
// under the empty owner: bbolt's format 3, which indexed only children,
// migrated to 4.
func IndexRoots(w Writer, l OwnerLayout) error {
	var roots []converge.ID
	err := w.Scan(Resources, Range{}, func(k, v []byte) error {
		rw, err := codec.SplitRow(v)
		if err != nil {
			return fmt.Errorf("resource %s: %w", k, err)
		}
		if rw.Owner == "" {
			roots = append(roots, converge.ID(k))
		}
		return nil
	})
	if err != nil {
		return err
	}
	idx := l.begin(w)
	for _, id := range roots {
		if err := idx.add("", id); err != nil {
			return err
		}
	}
	return idx.flush()
}
