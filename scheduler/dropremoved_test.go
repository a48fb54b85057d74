package scheduler

import (
	"slices"
	"strconv"
	"testing"

	"github.com/convergehq/converge"
)

// TestDropRemovedQueued: the removed nodes in the queues of rows to write
// are dropped once they are half of them (at least 1,024), in place,
// keeping the order of the others; fewer are left for liveHead.
func TestDropRemovedQueued(t *testing.T) {
	mk := func(n int) (q []*node, live []*node) {
		for i := range n {
			x := &node{id: converge.ID("vpc/t" + strconv.Itoa(i)), marks: mDirty}
			if i%3 != 0 {
				x.state = stateRemoved
			} else {
				live = append(live, x)
			}
			q = append(q, x)
		}
		return q, live
	}
	var b batcher
	dirty, liveD := mk(3000)
	updated, liveU := mk(900)
	all := slices.Concat(dirty, updated) // the queues are compacted in place
	b.dirty, b.updated, b.goneQueued = dirty, updated, 2600
	b.dropRemoved()
	if !slices.Equal(b.dirty, liveD) || !slices.Equal(b.updated, liveU) {
		t.Fatalf("after dropRemoved: %d dirty, %d updated; want the %d and %d live ones in order", len(b.dirty), len(b.updated), len(liveD), len(liveU))
	}
	if b.goneQueued != 0 {
		t.Errorf("goneQueued = %d after the drop, want 0", b.goneQueued)
	}
	for _, x := range all {
		if x.is(stateRemoved) && x.has(mDirty) {
			t.Fatalf("removed %s dropped but still marked dirty", x.id)
		}
	}

	// Fewer than half, or fewer than 1,024: left to liveHead.
	for _, gone := range []int{1000, 1400} {
		q, _ := mk(3000)
		b = batcher{dirty: q, goneQueued: gone}
		b.dropRemoved()
		if len(b.dirty) != 3000 {
			t.Errorf("with %d of 3000 removed counted, dropRemoved left %d, want all", gone, len(b.dirty))
		}
	}
}
