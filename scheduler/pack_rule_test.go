package scheduler

import (
	"testing"

	"github.com/convergehq/converge"
)

// TestWaitingTeardownPacks: a teardown that waits for its consumers or
// children is packable while its new reason waits for the next batch
// (mReasonDirty): buildBatch reads the row again. At 1M one pump step
// considered a wave of the cascade (the 333,000 VPCs freed by their
// routes) and kept each decoded until the batch: 190 MB of heap, the
// delete's peak. One whose teardown failed stays decoded (its reason
// reads its attempts), and so does one whose rollup waits.
func TestWaitingTeardownPacks(t *testing.T) {
	owner := &node{id: "classicbom/org"}
	mk := func(attempts int, marks nodeMarks) *node {
		n := &node{id: "vpc/fd-01-team-001", owner: owner, marks: marks, rs: &refState{}}
		n.r = &converge.Resource{Kind: "vpc", KindVersion: 1, Name: "fd-01-team-001", Owner: owner.id,
			Phase: converge.PhaseDeleting, Deleting: true, Attempts: attempts, Reason: "deleting: its owner is deleted"}
		return n
	}
	for _, tc := range []struct {
		name     string
		n        *node
		packable bool
	}{
		{"waiting, reason due", mk(0, mReasonDirty), true},
		{"waiting", mk(0, 0), true},
		{"failed once", mk(1, mReasonDirty), false},
		{"rollup due", mk(0, mRollupDirty), false},
	} {
		if got := packable(tc.n); got != tc.packable {
			t.Errorf("%s: packable = %v, want %v", tc.name, got, tc.packable)
		}
	}
	n := mk(0, mReasonDirty)
	n.pack()
	if n.r != nil || !n.deleting() || n.phase() != converge.PhaseDeleting {
		t.Fatalf("a waiting teardown packed: decoded %v, deleting %v, phase %s", n.r != nil, n.deleting(), n.phase())
	}
	if r := n.res(); r.Reason != "deleting: its owner is deleted" || !r.Deleting {
		t.Errorf("unpacked: reason %q, deleting %v", r.Reason, r.Deleting)
	}
}
