package state

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/convergehq/converge"
	bolt "go.etcd.io/bbolt"
)

// The owner index maps an owner to its children as chunks: key
// owner\x00bound, value the chunk's child IDs sorted and joined by NUL.
// An owner's first chunk has the empty bound; every other chunk's bound
// is its first child, and a chunk holds the children from its bound up
// to the next chunk's bound. A batch rewrites each chunk it changes once,
// so creating 500 children of one owner costs a handful of puts, not 500.

// maxChunk is the most children a chunk holds before it splits.
const maxChunk = 128

// chunk is one owners value in memory.
type chunk struct {
	key   []byte // as stored; nil for a chunk not yet stored
	bound converge.ID
	kids  []converge.ID
	dirty bool
}

// ownerIndex is the owner index of one write transaction: the chunks it
// touched, each read on first touch (a cursor seek finds the chunk that
// holds a child), written by flush. Only those chunks are read: an owner
// of a million children has ~8,000 chunks, and a batch that adds a few
// thousand children must not read them all (every batch of a big
// composition's commits did, which made them slower as the owner grew).
type ownerIndex struct {
	w      *writer
	owners map[converge.ID]map[converge.ID]*chunk // owner → bound → chunk
}

func newOwnerIndex(w *writer) *ownerIndex {
	return &ownerIndex{w: w, owners: map[converge.ID]map[converge.ID]*chunk{}}
}

// holder returns the chunk of owner that holds (or would hold) child:
// the one with the greatest bound not above child, read on first use. An
// owner with no chunk gets its first (bound "") in memory.
func (x *ownerIndex) holder(owner, child converge.ID) (*chunk, error) {
	loaded := x.owners[owner]
	if loaded == nil {
		loaded = map[converge.ID]*chunk{}
		x.owners[owner] = loaded
	}
	p := prefixKey(owner)
	c := x.w.bucket(bOwners).Cursor()
	seek := append(append([]byte(nil), p...), child...)
	k, v := c.Seek(seek)
	if k == nil || !bytes.Equal(k, seek) {
		if k == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
	}
	bound := converge.ID("")
	stored := k != nil && hasPrefix(k, p)
	if stored {
		bound = converge.ID(k[len(p):])
	}
	if ch := loaded[bound]; ch != nil {
		return ch, nil
	}
	ch := &chunk{bound: bound}
	if stored {
		ch.key, ch.kids = append([]byte(nil), k...), splitIDs(v)
	} else if bound != "" {
		return nil, fmt.Errorf("owner index: %s: no first chunk", owner)
	}
	loaded[bound] = ch
	return ch, nil
}

func (x *ownerIndex) add(owner, child converge.ID) error {
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

func (x *ownerIndex) remove(owner, child converge.ID) error {
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

// firstChild returns one child of owner, or "" if it owns nothing, as
// the index will be once flushed.
func (x *ownerIndex) firstChild(owner converge.ID) (converge.ID, error) {
	loaded := x.owners[owner]
	if ch := loaded[""]; ch != nil && ch.key == nil && len(ch.kids) > 0 {
		return ch.kids[0], nil // a first chunk not stored yet
	}
	p := prefixKey(owner)
	c := x.w.bucket(bOwners).Cursor()
	for k, v := c.Seek(p); k != nil && hasPrefix(k, p); k, v = c.Next() {
		if ch := loaded[converge.ID(k[len(p):])]; ch != nil {
			if len(ch.kids) > 0 {
				return ch.kids[0], nil
			}
			continue
		}
		if len(v) > 0 {
			i := bytes.IndexByte(v, 0)
			if i < 0 {
				i = len(v)
			}
			return converge.ID(v[:i]), nil
		}
	}
	return "", nil
}

// flush writes every changed chunk, owners and bounds in key order:
// oversized ones split, empty ones deleted; when the first chunk (bound
// "") empties, the next one takes its place.
func (x *ownerIndex) flush() error {
	owners := make([]converge.ID, 0, len(x.owners))
	for o := range x.owners {
		owners = append(owners, o)
	}
	slices.Sort(owners)
	for _, o := range owners {
		loaded := x.owners[o]
		bounds := make([]converge.ID, 0, len(loaded))
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
					if err := x.w.del(bOwners, c.key); err != nil {
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
				key := chunkKey(o, c.bound)
				if err := x.w.put(bOwners, key, joinIDs(head)); err != nil {
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
func (x *ownerIndex) promoteFirst(owner converge.ID) error {
	p := prefixKey(owner)
	k, v := x.w.bucket(bOwners).Cursor().Seek(p)
	if k == nil || !hasPrefix(k, p) || len(k) == len(p) {
		return nil // it owns nothing now, or the first is in place
	}
	old, val := append([]byte(nil), k...), append([]byte(nil), v...)
	if err := x.w.del(bOwners, old); err != nil {
		return err
	}
	if err := x.w.put(bOwners, chunkKey(owner, ""), val); err != nil {
		return err
	}
	delete(x.owners[owner], converge.ID(old[len(p):]))
	return nil
}

func chunkKey(owner, bound converge.ID) []byte { return pairKey(owner, bound) }

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

// readChunks reads every chunk of owner, in bound order.
func readChunks(b *bolt.Bucket, owner converge.ID) ([]*chunk, error) {
	var cs []*chunk
	p := prefixKey(owner)
	c := b.Cursor()
	for k, v := c.Seek(p); k != nil && hasPrefix(k, p); k, v = c.Next() {
		cs = append(cs, &chunk{
			key:   append([]byte(nil), k...),
			bound: converge.ID(k[len(p):]),
			kids:  splitIDs(v),
		})
	}
	if len(cs) > 0 && cs[0].bound != "" {
		return nil, fmt.Errorf("owner index: %s: first chunk has bound %q", owner, cs[0].bound)
	}
	return cs, nil
}

// childrenOf returns owner's children from the stored index, sorted.
func childrenOf(b *bolt.Bucket, owner converge.ID) ([]converge.ID, error) {
	cs, err := readChunks(b, owner)
	if err != nil {
		return nil, err
	}
	var out []converge.ID
	for _, c := range cs {
		out = append(out, c.kids...)
	}
	return out, nil
}
