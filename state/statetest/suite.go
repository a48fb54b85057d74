package statetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
)

// Opener opens a fresh, empty store of one backend for t, honouring
// opts.MaxEvents and opts.MaxRevisions (other fields are the backend's
// business), and checks and closes it when t ends, as Open does.
type Opener func(t *testing.T, opts state.Options) state.Backend

// Bolt is the Opener of the bbolt backend: Open with opts.
func Bolt(t *testing.T, opts state.Options) state.Backend {
	t.Helper()
	opts.NoSync = true
	return OpenDir(t, t.TempDir(), opts)
}

// Run is the conformance suite every state backend passes: the same
// test bodies, run against the stores open returns. It covers the
// round trip of every kind of row, the batch rules and refusals (each
// refusal leaving nothing behind), the owner and reverse edge indexes,
// retention of events and revision records, concurrent commits and
// untorn reads, paging, batches bigger than one etcd transaction (rows
// and events), rows bigger than one etcd request, and a model-based test of random batches.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		body func(*testing.T, Opener)
	}{
		{"RoundTrip", testRoundTrip},
		{"EmptyStore", testEmptyStore},
		{"Revisions", testRevisions},
		{"RevisionsTrimmed", testRevisionsTrimmed},
		{"AppliedWithRecord", testAppliedWithRecord},
		{"ResourcesFilter", testResourcesFilter},
		{"CommitRejects", testCommitRejects},
		{"DeletedDeliveries", testDeletedDeliveries},
		{"DeleteCascade", testDeleteCascade},
		{"ReparentMovesOwnerIndex", testReparentMovesOwnerIndex},
		{"EventsTrimmed", testEventsTrimmed},
		{"ConcurrentCommitsAndReads", testConcurrentCommitsAndReads},
		{"FailedCommitLeavesSeqs", testFailedCommitLeavesSeqs},
		{"CommitRejectedRows", testCommitRejectedRows},
		{"EventsOfOneResource", testEventsOfOneResource},
		{"AgainstModel", testAgainstModel},
		{"OwnerIndexFirstChunkEmptied", testOwnerIndexFirstChunkEmptied},
		{"ResourcesAfter", testResourcesAfter},
		{"ResourceHeadsAfter", testResourceHeadsAfter},
		{"ResourcesByID", testResourcesByID},
		{"Source", testSource},
		{"Control", testControl},
		{"BigBatch", testBigBatch},
		{"BigRow", testBigRow},
		{"ManyEvents", testManyEvents},
		{"Verify", testVerify},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.body(t, open) })
	}
}

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// res returns a Pending resource kind/name owned by owner ("" for none).
func res(kind, name string, owner converge.ID) *converge.Resource {
	return &converge.Resource{
		UID: "uid-" + kind + "-" + name, Kind: kind, KindVersion: 1, Name: name,
		Declared: json.RawMessage(`{"cidr":"10.0.0.0/16"}`),
		Spec:     json.RawMessage(`{"cidr":"10.0.0.0/16"}`),
		Phase:    converge.PhasePending, Generation: 1, Owner: owner,
		Origin: converge.OriginComposed, CreatedAt: t0, UpdatedAt: t0,
	}
}

func edge(c, p converge.ID, flows ...converge.ValueFlow) converge.Edge {
	return converge.Edge{Consumer: c, Producer: p, Flows: flows}
}

func commit(t *testing.T, s state.Backend, b *converge.Batch) {
	t.Helper()
	if err := s.Commit(context.Background(), b); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func load(t *testing.T, s state.Backend) *converge.Snapshot {
	t.Helper()
	snap, err := s.Load(context.Background())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return snap
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
