package state

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

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

// ownerIndex is the owner index of one write transaction: the chunks of
// every owner it touched, loaded whole on first touch, written by flush.
type ownerIndex struct {
	w      *writer
	owners map[converge.ID][]*chunk
}

func newOwnerIndex(w *writer) *ownerIndex {
	return &ownerIndex{w: w, owners: map[converge.ID][]*chunk{}}
}

// load returns owner's chunks, reading them on first use.
func (x *ownerIndex) load(owner converge.ID) ([]*chunk, error) {
	if cs, ok := x.owners[owner]; ok {
		return cs, nil
	}
	cs, err := readChunks(x.w.bucket(bOwners), owner)
	if err != nil {
		return nil, err
	}
	x.owners[owner] = cs
	return cs, nil
}

// find returns the index of the chunk of cs that holds (or would hold)
// child.
func find(cs []*chunk, child converge.ID) int {
	i, _ := slices.BinarySearchFunc(cs, child, func(c *chunk, id converge.ID) int {
		return strings.Compare(string(c.bound), string(id))
	})
	// cs[i].bound >= child; the holder is the last chunk with bound <= child.
	if i < len(cs) && cs[i].bound == child {
		return i
	}
	return i - 1
}

func (x *ownerIndex) add(owner, child converge.ID) error {
	cs, err := x.load(owner)
	if err != nil {
		return err
	}
	if len(cs) == 0 {
		cs = []*chunk{{}}
		x.owners[owner] = cs
	}
	c := cs[find(cs, child)]
	if i, ok := slices.BinarySearch(c.kids, child); !ok {
		c.kids = slices.Insert(c.kids, i, child)
		c.dirty = true
	}
	return nil
}

func (x *ownerIndex) remove(owner, child converge.ID) error {
	cs, err := x.load(owner)
	if err != nil || len(cs) == 0 {
		return err
	}
	c := cs[find(cs, child)]
	if i, ok := slices.BinarySearch(c.kids, child); ok {
		c.kids = slices.Delete(c.kids, i, i+1)
		c.dirty = true
	}
	return nil
}

// firstChild returns one child of owner, or "" if it owns nothing.
func (x *ownerIndex) firstChild(owner converge.ID) (converge.ID, error) {
	cs, err := x.load(owner)
	if err != nil {
		return "", err
	}
	for _, c := range cs {
		if len(c.kids) > 0 {
			return c.kids[0], nil
		}
	}
	return "", nil
}

// flush writes every changed chunk: oversized ones split, empty ones
// deleted, and the first chunk keeps the empty bound.
func (x *ownerIndex) flush() error {
	owners := make([]converge.ID, 0, len(x.owners))
	for o := range x.owners {
		owners = append(owners, o)
	}
	slices.Sort(owners)
	for _, o := range owners {
		cs := x.owners[o]
		if !slices.ContainsFunc(cs, func(c *chunk) bool { return c.dirty }) {
			continue
		}
		// Split and drop, then fix the first bound.
		var out []*chunk
		for _, c := range cs {
			if len(c.kids) == 0 {
				if c.key != nil {
					if err := x.w.del(bOwners, c.key); err != nil {
						return err
					}
				}
				continue
			}
			for len(c.kids) > maxChunk {
				// No copy: each split-off head is capped at maxChunk, so
				// the chunks share one array without overlapping (cloning
				// the rest at every split was quadratic: 600 MB of copies
				// for one owner of 99,000 children).
				rest := &chunk{bound: c.kids[maxChunk], kids: c.kids[maxChunk:], dirty: true}
				c.kids = c.kids[:maxChunk:maxChunk]
				c.dirty = true
				out = append(out, c)
				c = rest
			}
			out = append(out, c)
		}
		if len(out) > 0 && out[0].bound != "" {
			first := out[0]
			if first.key != nil {
				if err := x.w.del(bOwners, first.key); err != nil {
					return err
				}
				first.key = nil
			}
			first.bound, first.dirty = "", true
		}
		for _, c := range out {
			if !c.dirty {
				continue
			}
			key := chunkKey(o, c.bound)
			if c.key != nil && !bytes.Equal(c.key, key) {
				if err := x.w.del(bOwners, c.key); err != nil {
					return err
				}
			}
			if err := x.w.put(bOwners, key, joinIDs(c.kids)); err != nil {
				return err
			}
			c.key, c.dirty = key, false
		}
		x.owners[o] = out
	}
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
