package scheduler

import (
	"testing"
	"unsafe"
)

func TestNodeTransitions(t *testing.T) {
	waits := []nodeState{stateParked, stateBlocked, stateBackoff}
	for _, w := range waits {
		if !legalTransition(stateFree, w) || !legalTransition(w, stateFree) {
			t.Errorf("free <-> %s must be legal", w)
		}
		for _, x := range append(waits, stateRemoved) {
			if x != w && legalTransition(w, x) {
				t.Errorf("%s -> %s is legal; a waiting node must be freed first", w, x)
			}
		}
		if legalTransition(stateRemoved, w) {
			t.Errorf("removed -> %s is legal; removal is final", w)
		}
	}
	if !legalTransition(stateFree, stateRemoved) || legalTransition(stateRemoved, stateFree) || legalTransition(stateFree, stateFree) {
		t.Error("free -> removed must be the only way to removed, and removed final")
	}
}

func TestNodeToPanicsOnIllegalTransition(t *testing.T) {
	n := &node{id: "vpc/a"}
	n.to(stateParked)
	n.leave(stateBlocked) // not blocked: stays parked
	if !n.is(stateParked) {
		t.Fatalf("leave(blocked) changed a parked node to %s", n.state)
	}
	defer func() {
		if recover() == nil {
			t.Error("parked -> backoff did not panic")
		}
	}()
	n.to(stateBackoff)
}

func TestNodeMarksAreIndependent(t *testing.T) {
	n := &node{}
	n.set(mDirty | mStored)
	n.setTo(mQueued, true)
	n.unset(mStored)
	n.setTo(mPending, false)
	if !n.has(mDirty) || !n.has(mQueued) || n.has(mStored) || n.has(mPending) || n.has(mDirty|mStored) {
		t.Fatalf("marks %b", n.marks)
	}
	n.to(stateBackoff)
	if !n.has(mDirty|mQueued) || !n.is(stateBackoff) {
		t.Fatalf("a state change touched the marks: %b, %s", n.marks, n.state)
	}
}

// TestNodeSize guards the per-resource memory of the 1M gate: a node is
// one of a million, and 144 bytes is its size class. It holds its edges
// (adjacency, 48 bytes), which two graph-wide maps of edge lists by ID
// held before, at ~90 bytes a resource in map slots; it was 96 bytes
// without them (104, class 112, with a bool per flag).
func TestNodeSize(t *testing.T) {
	if sz := unsafe.Sizeof(node{}); sz > 128 {
		t.Errorf("node is %d bytes, over its 128-byte size class", sz)
	}
}
