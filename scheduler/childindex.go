package scheduler

import (
	"hash/maphash"

	"github.com/convergehq/converge"
)

// childIndex finds a composition's children by ID: an open-addressed
// table of their positions in ids, 4 bytes a slot and at least two slots
// a child. A map of a million child IDs to positions took 56 MB at a
// compose's peak; this takes 8 MB.
type childIndex struct {
	ids   []converge.ID
	slots []int32 // a position in ids plus one; 0 is an empty slot
	n     int     // positions added
	seed  maphash.Seed
}

// newChildIndex returns an empty index over ids, with room for all of
// them.
func newChildIndex(ids []converge.ID) *childIndex {
	size := 8
	for size < 2*len(ids) {
		size <<= 1
	}
	return &childIndex{ids: ids, slots: make([]int32, size), seed: maphash.MakeSeed()}
}

// slot returns where id is in the table, or the empty slot where it
// would go.
func (x *childIndex) slot(id converge.ID) int {
	mask := uint64(len(x.slots) - 1)
	for h := maphash.String(x.seed, string(id)) & mask; ; h = (h + 1) & mask {
		if s := x.slots[h]; s == 0 || x.ids[s-1] == id {
			return int(h)
		}
	}
}

// add indexes position i (ids[i]), unless its ID is indexed already:
// then it reports false.
func (x *childIndex) add(i int) bool {
	h := x.slot(x.ids[i])
	if x.slots[h] != 0 {
		return false
	}
	x.slots[h] = int32(i + 1)
	x.n++
	return true
}

// find returns the position of id, if indexed. A nil index holds
// nothing.
func (x *childIndex) find(id converge.ID) (int, bool) {
	if x == nil {
		return 0, false
	}
	if s := x.slots[x.slot(id)]; s != 0 {
		return int(s - 1), true
	}
	return 0, false
}

// has reports whether id is indexed.
func (x *childIndex) has(id converge.ID) bool {
	_, ok := x.find(id)
	return ok
}

// len returns how many positions are indexed.
func (x *childIndex) len() int {
	if x == nil {
		return 0
	}
	return x.n
}
