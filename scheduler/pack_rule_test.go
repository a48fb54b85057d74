package scheduler

import (
	"encoding/json"
	"strconv"
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

// TestHeadReadsPackedRows: a packed row's head (what a composition is
// checked against) is the decoded row's, read without decoding it,
// whatever precedes its fields: a spec apart from the declared one or
// equal to it, no declared spec, a reason, an unknown phase or origin.
func TestHeadReadsPackedRows(t *testing.T) {
	owner := &node{id: "classicbom/org"}
	rows := []*converge.Resource{
		{UID: "0123456789abcdef0123456789abcdef", KindVersion: 2, Declared: json.RawMessage(`{"cidr":"10.0.0.0/16"}`),
			Spec: json.RawMessage(`{"cidr":"10.0.0.0/16","account_id":"a-1"}`), Status: json.RawMessage(`{"vpc_id":"v-1"}`),
			Phase: converge.PhaseReady, Generation: 3, ObservedGeneration: 3, Origin: converge.OriginComposed,
			ProviderConfigRef: "eu-west", Owner: owner.id},
		{UID: "not-hex", KindVersion: 1, Declared: json.RawMessage(`{}`), Spec: json.RawMessage(`{}`),
			Phase: converge.PhaseDeleting, Reason: "deleting: pruned", Deleting: true, Origin: converge.OriginComposed, Owner: owner.id,
			Attempts: 0, LastError: "", Source: "resources/x.cue"},
		{UID: "u", KindVersion: 1, Phase: "Odd", Origin: "elsewhere", ProviderConfigRef: "p"},
	}
	for i, r := range rows {
		r.Kind, r.Name = "vpc", "t"+strconv.Itoa(i)
		n := &node{id: r.ID(), r: r, rs: &refState{ref: r.Ref()}}
		if r.Owner != "" {
			n.owner = owner
		}
		want := n.head()
		if want.Owner != r.Owner || want.Ref != r.Ref() || string(want.Declared) != string(r.Declared) ||
			want.ProviderConfigRef != r.ProviderConfigRef || want.Deleting != r.Deleting {
			t.Fatalf("row %d: decoded head %+v does not match its row", i, want)
		}
		n.packNow()
		got := n.head()
		if n.r != nil {
			t.Fatalf("row %d: head decoded the packed row", i)
		}
		if got.Owner != want.Owner || got.Ref != want.Ref || string(got.Declared) != string(want.Declared) ||
			(got.Declared == nil) != (want.Declared == nil) || got.ProviderConfigRef != want.ProviderConfigRef || got.Deleting != want.Deleting {
			t.Errorf("row %d: packed head %+v, want %+v", i, got, want)
		}
	}
}
