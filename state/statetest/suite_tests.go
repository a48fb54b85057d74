package statetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
)

func testRoundTrip(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	b := FullBatch()
	commit(t, s, b)
	snap := load(t, s)

	t.Run("resources", func(t *testing.T) {
		want := []*converge.Resource{b.Resources[1], b.Resources[0], b.Resources[2]} // by ID
		if got, want := mustJSON(t, snap.Resources), mustJSON(t, want); got != want {
			t.Errorf("Load().Resources =\n%s\nwant\n%s", got, want)
		}
		if !reflect.DeepEqual(snap.Resources, want) {
			t.Errorf("Load().Resources not deeply equal to what was committed")
		}
		got, err := s.Resource(context.Background(), "vpc/team-a")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, b.Resources[2]) {
			t.Errorf("Resource(vpc/team-a) = %s, want %s", mustJSON(t, got), mustJSON(t, b.Resources[2]))
		}
		if _, err := s.Resource(context.Background(), "vpc/nope"); !errors.Is(err, converge.ErrNotFound) {
			t.Errorf("Resource(vpc/nope) error = %v, want ErrNotFound", err)
		}
	})
	t.Run("edges", func(t *testing.T) {
		want := []converge.Edge{b.Edges[1], b.Edges[0]}
		if !reflect.DeepEqual(snap.Edges, want) {
			t.Errorf("Load().Edges = %v, want %v", snap.Edges, want)
		}
		consumes, producedFor, err := s.EdgesOf(context.Background(), "account/team-a")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := consumes, []converge.Edge{b.Edges[1]}; !reflect.DeepEqual(got, want) {
			t.Errorf("EdgesOf consumes = %v, want %v", got, want)
		}
		if got, want := producedFor, []converge.Edge{b.Edges[0]}; !reflect.DeepEqual(got, want) {
			t.Errorf("EdgesOf producedFor = %v, want %v", got, want)
		}
	})
	t.Run("children", func(t *testing.T) {
		got, err := s.Children(context.Background(), "bom/classic")
		if err != nil {
			t.Fatal(err)
		}
		if want := []converge.ID{"account/team-a", "vpc/team-a"}; !reflect.DeepEqual(got, want) {
			t.Errorf("Children = %v, want %v", got, want)
		}
		c, err := s.Counts(context.Background(), "bom/classic")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := c, (converge.Counts{Total: 2, Pending: 1, Running: 1}); got != want {
			t.Errorf("Counts = %+v, want %+v", got, want)
		}
	})
	t.Run("kinds", func(t *testing.T) {
		want := []*converge.Kind{b.Kinds[1], b.Kinds[0]} // version order
		if !reflect.DeepEqual(snap.Kinds, want) {
			t.Errorf("Load().Kinds = %s, want %s", mustJSON(t, snap.Kinds), mustJSON(t, want))
		}
		got, err := s.Kinds(context.Background())
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Kinds() = %s, %v; want %s", mustJSON(t, got), err, mustJSON(t, want))
		}
	})
	t.Run("configs bindings deliveries", func(t *testing.T) {
		if !reflect.DeepEqual(snap.Configs, b.Configs) || !reflect.DeepEqual(snap.Bindings, b.Bindings) || !reflect.DeepEqual(snap.Deliveries, b.Deliveries) {
			t.Errorf("Load() configs/bindings/deliveries = %s %s %s", mustJSON(t, snap.Configs), mustJSON(t, snap.Bindings), mustJSON(t, snap.Deliveries))
		}
		cs, err1 := s.Configs(context.Background())
		bs, err2 := s.Bindings(context.Background())
		ds, err3 := s.Deliveries(context.Background())
		if err := errors.Join(err1, err2, err3); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cs, b.Configs) || !reflect.DeepEqual(bs, b.Bindings) || !reflect.DeepEqual(ds, b.Deliveries) {
			t.Errorf("Configs/Bindings/Deliveries differ from what was committed")
		}
	})
	t.Run("applied", func(t *testing.T) {
		got, err := s.Applied(context.Background())
		if err != nil || !reflect.DeepEqual(got, b.Applied) || !reflect.DeepEqual(snap.Applied, b.Applied) {
			t.Errorf("Applied() = %v, %v; Load().Applied = %v; want %v", got, err, snap.Applied, b.Applied)
		}
		rec, err := s.Revision(context.Background(), b.Applied.Hash)
		if err != nil || !reflect.DeepEqual(rec, b.Record) {
			t.Errorf("Revision(%s) = %s, %v; want the batch's record %s", b.Applied.Hash, mustJSON(t, rec), err, mustJSON(t, b.Record))
		}
	})
	t.Run("events", func(t *testing.T) {
		if got, want := snap.LastEventSeq, uint64(2); got != want {
			t.Errorf("LastEventSeq = %d, want %d", got, want)
		}
		if got, want := b.Events[1].Seq, uint64(2); got != want {
			t.Errorf("Commit set Seq %d, want %d", got, want)
		}
		got, err := s.Events(context.Background(), "", 0)
		if err != nil || !reflect.DeepEqual(got, b.Events) {
			t.Errorf("Events() = %v, %v; want %v", got, err, b.Events)
		}
	})
}

func testEmptyStore(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	snap := load(t, s)
	if !reflect.DeepEqual(snap, &converge.Snapshot{}) {
		t.Errorf("Load() of an empty store = %+v, want zero", snap)
	}
	if a, err := s.Applied(context.Background()); a != nil || err != nil {
		t.Errorf("Applied() = %v, %v; want nil, nil", a, err)
	}
	if err := s.Commit(context.Background(), &converge.Batch{}); err != nil {
		t.Errorf("Commit(empty) = %v", err)
	}
	if got, want := s.Stats().Commits, uint64(0); got != want {
		t.Errorf("Commits after an empty batch = %d, want %d", got, want)
	}
}

func testRevisions(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	if a, err := s.Applied(context.Background()); a != nil || err != nil {
		t.Fatalf("Applied() = %v, %v; want nil, nil", a, err)
	}
	var recs []*converge.RevisionRecord
	for i, h := range []string{"c3", "a1", "b2"} {
		r := &converge.RevisionRecord{
			Revision: converge.Revision{Ref: "main", Hash: h},
			Statuses: []converge.CommitStatus{{Context: converge.ContextValidate, State: converge.StateSuccess, Time: t0}},
			Errors:   []converge.Finding{{File: "a.cue", Line: 1, Column: 2, Path: "spec.x", Rule: "TYPE_CHANGED", Message: "m"}},
			Seen:     t0.Add(time.Duration(i) * time.Second),
		}
		recs = append(recs, r)
		if err := s.PutRevision(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Revisions(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []*converge.RevisionRecord{recs[2], recs[1]}; !reflect.DeepEqual(got, want) {
		t.Errorf("Revisions(2) = %s, want %s", mustJSON(t, got), mustJSON(t, want))
	}
	one, err := s.Revision(context.Background(), "a1")
	if err != nil || !reflect.DeepEqual(one, recs[1]) {
		t.Errorf("Revision(a1) = %v, %v; want %v", one, err, recs[1])
	}
	if _, err := s.Revision(context.Background(), "zz"); !errors.Is(err, converge.ErrNotFound) {
		t.Errorf("Revision(zz) error = %v, want ErrNotFound", err)
	}
	if err := s.PutRevision(context.Background(), &converge.RevisionRecord{}); err == nil {
		t.Errorf("PutRevision with no hash: no error")
	}
}

func testRevisionsTrimmed(t *testing.T, open Opener) {
	tests := []struct {
		name       string
		applied    string // the applied revision's hash, or ""
		put        int    // records put, r0 the oldest
		wantHashes []string
	}{
		{name: "under the limit", put: 3, wantHashes: []string{"r2", "r1", "r0"}},
		{name: "newest kept", put: 6, wantHashes: []string{"r5", "r4", "r3"}},
		{name: "applied kept besides", applied: "r1", put: 6, wantHashes: []string{"r5", "r4", "r3", "r1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t, state.Options{MaxRevisions: 3})
			if tt.applied != "" {
				commit(t, s, &converge.Batch{Applied: &converge.Revision{Ref: "main", Hash: tt.applied}})
			}
			for i := range tt.put {
				r := &converge.RevisionRecord{Revision: converge.Revision{Ref: "main", Hash: fmt.Sprint("r", i)}, Seen: t0.Add(time.Duration(i) * time.Minute)}
				if err := s.PutRevision(context.Background(), r); err != nil {
					t.Fatal(err)
				}
			}
			recs, err := s.Revisions(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range recs {
				got = append(got, r.Revision.Hash)
			}
			if !slices.Equal(got, tt.wantHashes) {
				t.Errorf("revisions kept = %v, want %v", got, tt.wantHashes)
			}
		})
	}
}

func testResourcesFilter(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	root := res("bom", "classic", "")
	other := res("bom", "other", "")
	a := res("account", "a", "bom/classic")
	a.Phase = converge.PhaseReady
	v1 := res("vpc", "a", "bom/classic")
	v2 := res("vpc", "b", "bom/other")
	v2.Phase = converge.PhaseReady
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{root, other, a, v1, v2}})
	tests := []struct {
		name    string
		filter  state.Filter
		wantIDs string
	}{
		{name: "all", wantIDs: "account/a bom/classic bom/other vpc/a vpc/b"},
		{name: "kind", filter: state.Filter{Kind: "vpc"}, wantIDs: "vpc/a vpc/b"},
		{name: "kind prefix is not a kind", filter: state.Filter{Kind: "vp"}, wantIDs: ""},
		{name: "phase", filter: state.Filter{Phase: converge.PhaseReady}, wantIDs: "account/a vpc/b"},
		{name: "owner", filter: state.Filter{Owner: "bom/classic"}, wantIDs: "account/a vpc/a"},
		{name: "owner and phase", filter: state.Filter{Owner: "bom/classic", Phase: converge.PhasePending}, wantIDs: "vpc/a"},
		{name: "roots", filter: state.Filter{RootsOnly: true}, wantIDs: "bom/classic bom/other"},
		{name: "limit", filter: state.Filter{Limit: 2}, wantIDs: "account/a bom/classic"},
		{name: "owner limit", filter: state.Filter{Owner: "bom/classic", Limit: 1}, wantIDs: "account/a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := s.Resources(context.Background(), tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range rs {
				ids = append(ids, string(r.ID()))
			}
			if got := strings.Join(ids, " "); got != tt.wantIDs {
				t.Errorf("Resources(%+v) = %q, want %q", tt.filter, got, tt.wantIDs)
			}
		})
	}
}

func testCommitRejects(t *testing.T, open Opener) {
	tests := []struct {
		name    string
		batch   *converge.Batch
		wantErr string
	}{
		{name: "empty kind", batch: &converge.Batch{Resources: []*converge.Resource{res("", "x", "")}}, wantErr: "empty kind"},
		{name: "empty name", batch: &converge.Batch{Resources: []*converge.Resource{res("vpc", "", "")}}, wantErr: "empty name"},
		{name: "slash in name", batch: &converge.Batch{Resources: []*converge.Resource{res("vpc", "a/b", "")}}, wantErr: `name "a/b" contains`},
		{name: "NUL in kind", batch: &converge.Batch{Resources: []*converge.Resource{res("v\x00pc", "a", "")}}, wantErr: "contains"},
		{name: "nil resource", batch: &converge.Batch{Resources: []*converge.Resource{nil}}, wantErr: "resource 1: nil"},
		{name: "put and delete", batch: &converge.Batch{Resources: []*converge.Resource{res("vpc", "new", "")}, DeletedResources: []converge.ID{"vpc/new"}}, wantErr: "both put and deleted"},
		{name: "owner missing", batch: &converge.Batch{Resources: []*converge.Resource{res("vpc", "new", "bom/nope")}}, wantErr: "owner bom/nope does not exist"},
		{name: "owns itself", batch: &converge.Batch{Resources: []*converge.Resource{res("vpc", "new", "vpc/new")}}, wantErr: "owns itself"},
		{name: "delete an owner", batch: &converge.Batch{DeletedResources: []converge.ID{"bom/root"}}, wantErr: "still owns account/kept"},
		{name: "edge consumer missing", batch: &converge.Batch{Edges: []converge.Edge{edge("vpc/nope", "account/kept")}}, wantErr: "consumer vpc/nope does not exist"},
		{name: "edge to itself", batch: &converge.Batch{Edges: []converge.Edge{edge("account/kept", "account/kept")}}, wantErr: "depends on itself"},
		{name: "edge malformed", batch: &converge.Batch{Edges: []converge.Edge{edge("account", "bom/root")}}, wantErr: "want KIND/NAME"},
		{name: "edge put and delete", batch: &converge.Batch{Edges: []converge.Edge{edge("account/kept", "bom/root")}, DeletedEdges: []converge.Edge{edge("account/kept", "bom/root")}}, wantErr: "both put and deleted"},
		{name: "event seq not increasing", batch: &converge.Batch{Events: []converge.Event{{Seq: 1, Type: "x"}}}, wantErr: "seq 1 not above 1"},
		{name: "kind without name", batch: &converge.Batch{Kinds: []*converge.Kind{{Version: 1}}}, wantErr: "kind 0: empty name"},
		{name: "delivery without key", batch: &converge.Batch{Deliveries: []*converge.Delivery{{}}}, wantErr: "delivery 0: empty key"},
		{name: "delivery put and delete", batch: &converge.Batch{Deliveries: []*converge.Delivery{{Key: "b/u/1/synced"}}, DeletedDeliveries: []string{"b/u/1/synced"}}, wantErr: "delivery b/u/1/synced: both put and deleted"},
		{name: "record without hash", batch: &converge.Batch{Record: &converge.RevisionRecord{}}, wantErr: "revision record: empty hash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t, state.Options{})
			commit(t, s, &converge.Batch{
				Resources: []*converge.Resource{res("bom", "root", ""), res("account", "kept", "bom/root")},
				Events:    []converge.Event{{Resource: "bom/root", Type: "Created"}},
			})
			before, stats := mustJSON(t, load(t, s)), s.Stats()
			// Valid changes ride along: none of them may survive.
			tt.batch.Resources = append([]*converge.Resource{res("vpc", "rider", "")}, tt.batch.Resources...)
			tt.batch.Events = append(tt.batch.Events, converge.Event{Resource: "vpc/rider", Type: "Created"})
			tt.batch.Configs = []*converge.ProviderConfig{{Name: "rider"}}
			rider := converge.Revision{Ref: "main", Hash: "rider"}
			tt.batch.Applied = &rider
			if tt.batch.Record == nil {
				tt.batch.Record = &converge.RevisionRecord{Revision: rider, Applied: true}
			}
			err := s.Commit(context.Background(), tt.batch)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Commit error = %v, want one containing %q", err, tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "commit: ") {
				t.Errorf("Commit error %q does not start with \"commit: \"", err)
			}
			if got := mustJSON(t, load(t, s)); got != before {
				t.Errorf("a rejected batch changed the store:\n%s\nwant\n%s", got, before)
			}
			if got, want := s.Stats(), stats; got != want {
				t.Errorf("Stats after a rejected batch = %+v, want %+v", got, want)
			}
			if rec, err := s.Revision(context.Background(), rider.Hash); !errors.Is(err, converge.ErrNotFound) {
				t.Errorf("a rejected batch stored its revision record: %v, %v", rec, err)
			}
		})
	}
}

// testAppliedWithRecord: a batch's revision record is stored with its
// applied revision in one write, replacing the record of its hash, and
// the records are trimmed as PutRevision trims them (the applied one
// kept).
func testAppliedWithRecord(t *testing.T, open Opener) {
	s := open(t, state.Options{MaxRevisions: 2})
	ctx := context.Background()
	for i := range 3 {
		r := &converge.RevisionRecord{Revision: converge.Revision{Ref: "main", Hash: fmt.Sprint("r", i)}, Seen: t0.Add(time.Duration(i+1) * time.Minute)}
		if err := s.PutRevision(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// r0, the oldest, is applied with its record again: kept past the
	// limit, its record replaced.
	rev := converge.Revision{Ref: "main", Hash: "r0"}
	rec := &converge.RevisionRecord{Revision: rev, Applied: true, Seen: t0.Add(time.Minute),
		Statuses: []converge.CommitStatus{{Context: converge.ContextSync, State: converge.StatePending, Description: "applied, converging", Time: t0}}}
	commit(t, s, &converge.Batch{Applied: &rev, Record: rec})
	if got, err := s.Applied(ctx); err != nil || !reflect.DeepEqual(got, &rev) {
		t.Errorf("Applied() = %v, %v; want %v", got, err, rev)
	}
	if got, err := s.Revision(ctx, "r0"); err != nil || !reflect.DeepEqual(got, rec) {
		t.Errorf("Revision(r0) = %s, %v; want %s", mustJSON(t, got), err, mustJSON(t, rec))
	}
	recs, err := s.Revisions(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Revision.Hash)
	}
	if want := []string{"r2", "r1", "r0"}; !slices.Equal(got, want) {
		t.Errorf("revisions kept = %v, want %v (the newest two and the applied one)", got, want)
	}
	// A newer one applied: the old applied record is trimmed now.
	rev3 := converge.Revision{Ref: "main", Hash: "r3"}
	commit(t, s, &converge.Batch{Applied: &rev3, Record: &converge.RevisionRecord{Revision: rev3, Applied: true, Seen: t0.Add(4 * time.Minute)}})
	recs, err = s.Revisions(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, r := range recs {
		got = append(got, r.Revision.Hash)
	}
	if want := []string{"r3", "r2"}; !slices.Equal(got, want) {
		t.Errorf("revisions kept = %v, want %v", got, want)
	}
}

func testDeletedDeliveries(t *testing.T, open Opener) {
	deliv := func(gen int64, done bool) *converge.Delivery {
		return &converge.Delivery{Key: "notify/u/" + fmt.Sprint(gen) + "/synced", Binding: "notify", Done: done,
			Subject: converge.Subject{Resource: "vpc/a", UID: "u", Generation: gen, Transition: "synced"}, Created: t0}
	}
	tests := []struct {
		name     string
		del      []string
		wantKeys []string
		wantDels uint64
	}{
		{name: "one", del: []string{"notify/u/1/synced"}, wantKeys: []string{"notify/u/2/synced"}, wantDels: 1},
		{name: "both, out of order", del: []string{"notify/u/2/synced", "notify/u/1/synced"}, wantDels: 2},
		{name: "absent is a no-op", del: []string{"notify/u/9/synced"}, wantKeys: []string{"notify/u/1/synced", "notify/u/2/synced"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t, state.Options{})
			commit(t, s, &converge.Batch{Deliveries: []*converge.Delivery{deliv(1, true), deliv(2, false)}})
			before := s.Stats()
			commit(t, s, &converge.Batch{DeletedDeliveries: tt.del})
			var got []string
			for _, d := range load(t, s).Deliveries {
				got = append(got, d.Key)
			}
			if !slices.Equal(got, tt.wantKeys) {
				t.Errorf("deliveries after deleting %v = %v, want %v", tt.del, got, tt.wantKeys)
			}
			if got, want := s.Stats().Deletes-before.Deletes, tt.wantDels; got != want {
				t.Errorf("deletes = %d, want %d", got, want)
			}
		})
	}
}

func testDeleteCascade(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	commit(t, s, &converge.Batch{
		Resources: []*converge.Resource{res("bom", "r", ""), res("account", "a", "bom/r"), res("vpc", "a", "bom/r"), res("route", "a", "bom/r")},
		Edges:     []converge.Edge{edge("vpc/a", "account/a"), edge("route/a", "vpc/a"), edge("route/a", "tgw/x")},
	})
	// Delete the vpc: the edges it consumes go, without DeletedEdges; the
	// route's edge to it stays, naming a producer that is gone.
	commit(t, s, &converge.Batch{DeletedResources: []converge.ID{"vpc/a"}})
	snap := load(t, s)
	if got, want := snap.Edges, []converge.Edge{edge("route/a", "tgw/x"), edge("route/a", "vpc/a")}; !reflect.DeepEqual(got, want) {
		t.Errorf("edges after deleting vpc/a = %v, want %v", got, want)
	}
	commit(t, s, &converge.Batch{DeletedEdges: []converge.Edge{edge("route/a", "vpc/a")}})
	if got, err := s.Children(context.Background(), "bom/r"); err != nil || !reflect.DeepEqual(got, []converge.ID{"account/a", "route/a"}) {
		t.Errorf("Children(bom/r) = %v, %v; want [account/a route/a]", got, err)
	}
	for _, id := range []converge.ID{"account/a", "vpc/a"} {
		c, p, err := s.EdgesOf(context.Background(), id)
		if err != nil || len(c)+len(p) != 0 {
			t.Errorf("EdgesOf(%s) = %v, %v, %v; want none", id, c, p, err)
		}
	}
	// Deleting again, and deleting edges that are gone, is a no-op.
	stats := s.Stats()
	commit(t, s, &converge.Batch{DeletedResources: []converge.ID{"vpc/a"}, DeletedEdges: []converge.Edge{edge("vpc/a", "account/a")}})
	if got, want := s.Stats().Deletes, stats.Deletes; got != want {
		t.Errorf("Deletes after an idempotent delete = %d, want %d", got, want)
	}
	// A whole tree goes in one batch, owner included.
	commit(t, s, &converge.Batch{DeletedResources: []converge.ID{"bom/r", "account/a", "route/a"}})
	if snap := load(t, s); len(snap.Resources)+len(snap.Edges) != 0 {
		t.Errorf("after deleting the tree: %d resources, %d edges; want none", len(snap.Resources), len(snap.Edges))
	}
}

func testReparentMovesOwnerIndex(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("bom", "a", ""), res("bom", "b", ""), res("vpc", "x", "bom/a")}})
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("vpc", "x", "bom/b")}})
	for owner, want := range map[converge.ID]int{"bom/a": 0, "bom/b": 1} {
		if got, err := s.Children(context.Background(), owner); err != nil || len(got) != want {
			t.Errorf("Children(%s) = %v, %v; want %d", owner, got, err, want)
		}
	}
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("vpc", "x", "")}})
	if got, _ := s.Children(context.Background(), "bom/b"); len(got) != 0 {
		t.Errorf("Children(bom/b) after orphaning on purpose = %v, want none", got)
	}
}

func testEventsTrimmed(t *testing.T, open Opener) {
	s := open(t, state.Options{MaxEvents: 10})
	for i := range 5 {
		var evs []converge.Event
		for j := range 3 {
			evs = append(evs, converge.Event{Time: t0, Resource: converge.ID(fmt.Sprintf("vpc/%d", j)), Type: "T", Message: fmt.Sprint(i)})
		}
		commit(t, s, &converge.Batch{Events: evs})
	}
	all, err := s.Events(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, e := range all {
		seqs = append(seqs, e.Seq)
	}
	if got, want := fmt.Sprint(seqs), "[6 7 8 9 10 11 12 13 14 15]"; got != want {
		t.Errorf("kept seqs = %s, want %s", got, want)
	}
	tests := []struct {
		name     string
		resource converge.ID
		limit    int
		wantSeqs string
	}{
		{name: "one resource", resource: "vpc/0", wantSeqs: "[7 10 13]"},
		{name: "one resource newest 2", resource: "vpc/0", limit: 2, wantSeqs: "[10 13]"},
		{name: "all newest 4", limit: 4, wantSeqs: "[12 13 14 15]"},
		{name: "unknown", resource: "vpc/9", wantSeqs: "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := s.Events(context.Background(), tt.resource, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			seqs := []uint64{}
			for _, e := range evs {
				seqs = append(seqs, e.Seq)
			}
			if got := fmt.Sprint(seqs); got != tt.wantSeqs {
				t.Errorf("Events(%q, %d) seqs = %s, want %s", tt.resource, tt.limit, got, tt.wantSeqs)
			}
		})
	}
	if got, want := load(t, s).LastEventSeq, uint64(15); got != want {
		t.Errorf("LastEventSeq = %d, want %d", got, want)
	}
	// A batch larger than MaxEvents keeps only its newest MaxEvents.
	var big []converge.Event
	for range 25 {
		big = append(big, converge.Event{Type: "T"})
	}
	commit(t, s, &converge.Batch{Events: big})
	all, _ = s.Events(context.Background(), "", 0)
	if got, want := len(all), 10; got != want || all[0].Seq != 31 {
		t.Errorf("after a 25-event batch: %d events from seq %d, want %d from 31", got, all[0].Seq, want)
	}
}

// TestConcurrentCommitsAndReads commits from several goroutines while
// others read: every read sees whole batches only (each batch adds a
// resource, its edge and its event together).
func testConcurrentCommitsAndReads(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("bom", "r", "")}})
	const writers, perWriter = 3, 30
	errc := make(chan error, writers+2)
	done := make(chan struct{})
	for w := range writers {
		go func() {
			for i := range perWriter {
				name := fmt.Sprintf("w%d-%03d", w, i)
				id := converge.NewID("vpc", name)
				err := s.Commit(context.Background(), &converge.Batch{
					Resources: []*converge.Resource{res("vpc", name, "bom/r")},
					Edges:     []converge.Edge{edge(id, "account/shared")},
					Events:    []converge.Event{{Resource: id, Type: "Created"}},
				})
				if err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range 2 {
		go func() {
			for {
				select {
				case <-done:
					errc <- nil
					return
				default:
				}
				snap, err := s.Load(context.Background())
				if err != nil {
					errc <- err
					return
				}
				if n := len(snap.Resources) - 1; n != len(snap.Edges) || uint64(n) != snap.LastEventSeq {
					errc <- fmt.Errorf("torn read: %d resources, %d edges, last seq %d", n, len(snap.Edges), snap.LastEventSeq)
					return
				}
			}
		}()
	}
	for range writers {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if got, want := s.Stats().Commits, uint64(1+writers*perWriter); got != want {
		t.Errorf("Commits = %d, want %d", got, want)
	}
	if _, producedFor, err := s.EdgesOf(context.Background(), "account/shared"); err != nil || len(producedFor) != writers*perWriter {
		t.Errorf("EdgesOf(account/shared) producedFor = %d edges, %v; want %d", len(producedFor), err, writers*perWriter)
	}
}

// TestFailedCommitLeavesSeqs: a rejected batch's events keep Seq 0, so the
// same events commit later after other batches, numbered then.
func testFailedCommitLeavesSeqs(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	bad := &converge.Batch{
		Resources: []*converge.Resource{res("vpc", "a", "bom/missing")},
		Events:    []converge.Event{{Resource: "vpc/a", Type: "Created"}},
	}
	if err := s.Commit(context.Background(), bad); err == nil {
		t.Fatal("Commit of an orphan: no error")
	}
	if got := bad.Events[0].Seq; got != 0 {
		t.Errorf("Seq after a failed Commit = %d, want 0", got)
	}
	commit(t, s, &converge.Batch{Events: []converge.Event{{Type: "Other"}}})
	bad.Resources[0].Owner = ""
	commit(t, s, bad)
	if got, want := bad.Events[0].Seq, uint64(2); got != want {
		t.Errorf("Seq after the retry = %d, want %d", got, want)
	}
}

// TestCommitRejectedRows: every refused resource of a batch comes back in
// one RejectedError, nothing is committed, and the batch without them
// commits.
func testCommitRejectedRows(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("bom", "root", "")}})
	badStatus := res("vpc", "bad-status", "bom/root")
	badStatus.Status = json.RawMessage(`{"vpc_id":`)
	orphan := res("vpc", "orphan", "bom/gone")
	badName := res("vpc", "a\x00b", "")
	good := res("vpc", "good", "bom/root")
	b := &converge.Batch{Resources: []*converge.Resource{badStatus, good, orphan, badName}}

	err := s.Commit(context.Background(), b)
	var rej *converge.RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("Commit error = %v, want a RejectedError", err)
	}
	// The name is refused before the transaction; the other two in it.
	if got, want := len(rej.Rows), 1; got != want {
		t.Fatalf("refused rows before the transaction = %v, want %d", rej.Rows, want)
	}
	if got, want := rej.Rows[0].ID, badName.ID(); got != want {
		t.Errorf("refused %s, want %s", got, want)
	}
	b.Resources = []*converge.Resource{badStatus, good, orphan}
	err = s.Commit(context.Background(), b)
	if !errors.As(err, &rej) {
		t.Fatalf("Commit error = %v, want a RejectedError", err)
	}
	got := map[converge.ID]string{}
	for _, r := range rej.Rows {
		got[r.ID] = r.Err.Error()
	}
	if len(got) != 2 || !strings.Contains(got["vpc/bad-status"], "status: invalid JSON") ||
		!strings.Contains(got["vpc/orphan"], "owner bom/gone does not exist") {
		t.Errorf("refused rows = %v, want vpc/bad-status (status) and vpc/orphan (owner)", got)
	}
	if _, err := s.Resource(context.Background(), "vpc/good"); !errors.Is(err, converge.ErrNotFound) {
		t.Errorf("a refused batch stored vpc/good (err %v)", err)
	}
	b.Resources = []*converge.Resource{good}
	commit(t, s, b)
	if _, err := s.Resource(context.Background(), "vpc/good"); err != nil {
		t.Errorf("vpc/good after the batch without the refused rows: %v", err)
	}
}

// TestEventsOfOneResource: a resource's events among many chunks, some
// chunks holding none of them, newest limit first.
func testEventsOfOneResource(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	for c := range 50 {
		var b converge.Batch
		for i := range 20 {
			id := converge.NewID("vpc", fmt.Sprintf("v%02d", i))
			if c%10 == 3 && i == 7 {
				id = "vpc/v07<x>" // escaped by encoding/json
			}
			b.Events = append(b.Events, converge.Event{Resource: id, Type: "T", Message: fmt.Sprint(c)})
		}
		commit(t, s, &b)
	}
	tests := []struct {
		name  string
		id    converge.ID
		limit int
		want  []string // messages
	}{
		{name: "all", id: "vpc/v07<x>", want: []string{"3", "13", "23", "33", "43"}},
		{name: "newest two", id: "vpc/v07<x>", limit: 2, want: []string{"33", "43"}},
		{name: "not a prefix match", id: "vpc/v0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := s.Events(context.Background(), tt.id, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range evs {
				if e.Resource != tt.id {
					t.Errorf("event of %s returned for %s", e.Resource, tt.id)
				}
				got = append(got, e.Message)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Events(%s, %d) messages = %v, want %v", tt.id, tt.limit, got, tt.want)
			}
		})
	}
}

// TestOwnerIndexFirstChunkEmptied empties an owner's first chunk while
// later chunks remain: the next chunk must take the empty bound.
func testOwnerIndexFirstChunkEmptied(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	b := &converge.Batch{Resources: []*converge.Resource{res("bom", "r", "")}}
	for i := range 300 {
		b.Resources = append(b.Resources, res("vpc", fmt.Sprintf("c%04d", i), "bom/r"))
	}
	commit(t, s, b)
	del := &converge.Batch{}
	for i := range 200 {
		del.DeletedResources = append(del.DeletedResources, converge.NewID("vpc", fmt.Sprintf("c%04d", i)))
	}
	commit(t, s, del)
	got, err := s.Children(context.Background(), "bom/r")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 100 || got[0] != "vpc/c0200" {
		t.Errorf("Children = %d ids from %v, want 100 from vpc/c0200", len(got), got[:min(1, len(got))])
	}
	// Statetest's cleanup Check verifies the chunk layout.
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("vpc", "a0000", "bom/r")}})
	if got, _ := s.Children(context.Background(), "bom/r"); len(got) != 101 || got[0] != "vpc/a0000" {
		t.Errorf("after adding vpc/a0000: %d ids from %v", len(got), got[:min(1, len(got))])
	}
}

// TestResourcesAfter pages through a store with every page size and kind
// filter and checks the pages put together are Resources(kind) in order,
// each with the edges EdgesOf says it consumes.
func testResourcesAfter(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	b := &converge.Batch{}
	for i := range 7 {
		acct := res("account", fmt.Sprintf("a%d", i), "")
		vpc := res("vpc", fmt.Sprintf("v%d", i), "")
		b.Resources = append(b.Resources, acct, vpc)
		b.Edges = append(b.Edges, edge(vpc.ID(), acct.ID(), converge.ValueFlow{From: "account_id", To: "account_id"}))
		if i > 0 {
			b.Edges = append(b.Edges, edge(vpc.ID(), converge.ID(fmt.Sprintf("vpc/v%d", i-1))))
		}
	}
	b.Resources = append(b.Resources, res("zone", "z", ""))
	commit(t, s, b)
	tests := []struct {
		name  string
		kind  string
		limit int
	}{
		{"all at once", "", 0},
		{"all by one", "", 1},
		{"all by four", "", 4},
		{"vpc by three", "vpc", 3},
		{"account by seven", "account", 7},
		{"zone by two", "zone", 2},
		{"absent kind", "bucket", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := s.Resources(context.Background(), state.Filter{Kind: tt.kind})
			if err != nil {
				t.Fatal(err)
			}
			var got []state.ResourceRow
			after := converge.ID("")
			for calls := 0; ; calls++ {
				if calls > len(want)+1 {
					t.Fatal("the scan does not end")
				}
				page, err := s.ResourcesAfter(context.Background(), tt.kind, after, tt.limit)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, page...)
				if tt.limit <= 0 || len(page) < tt.limit {
					break
				}
				after = page[len(page)-1].Resource.ID()
			}
			if g, w := len(got), len(want); g != w {
				t.Fatalf("scanned %d resources, want %d", g, w)
			}
			for i, row := range got {
				if g, w := row.Resource.ID(), want[i].ID(); g != w {
					t.Errorf("row %d = %s, want %s", i, g, w)
				}
				consumes, _, err := s.EdgesOf(context.Background(), row.Resource.ID())
				if err != nil {
					t.Fatal(err)
				}
				if len(consumes) == 0 {
					consumes = nil
				}
				if !reflect.DeepEqual(row.Consumes, consumes) {
					t.Errorf("%s consumes %v, want %v", row.Resource.ID(), row.Consumes, consumes)
				}
			}
		})
	}
	// A start outside the kind: before it is its first page, after it
	// the end.
	starts := []struct {
		kind    string
		after   converge.ID
		wantIDs string
	}{
		{kind: "vpc", after: "account/a3", wantIDs: "vpc/v0 vpc/v1 vpc/v2 vpc/v3 vpc/v4 vpc/v5 vpc/v6"},
		{kind: "account", after: "vpc/v0", wantIDs: ""},
		{kind: "zone", after: "zone/z", wantIDs: ""},
		{kind: "", after: "vpc/v5", wantIDs: "vpc/v6 zone/z"},
		{kind: "", after: "zz/0", wantIDs: ""},
	}
	for _, st := range starts {
		page, err := s.ResourcesAfter(context.Background(), st.kind, st.after, 0)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, row := range page {
			ids = append(ids, string(row.Resource.ID()))
		}
		if got := strings.Join(ids, " "); got != st.wantIDs {
			t.Errorf("ResourcesAfter(%q, %q) = %q, want %q", st.kind, st.after, got, st.wantIDs)
		}
	}
}

// testSource: no source before one is put, a source without a
// repository is refused, and a later one replaces the first.
func testSource(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	if got, err := s.Source(context.Background()); got != nil || err != nil {
		t.Fatalf("Source() of an empty store = %v, %v; want nil, nil", got, err)
	}
	if err := s.PutSource(context.Background(), &converge.AppliedSource{}); err == nil {
		t.Error("PutSource with no repository: no error")
	}
	first := &converge.AppliedSource{Repo: "/src/infra", Path: "examples/classic", Ref: "main",
		Revision: converge.Revision{Ref: "main", Hash: "a1"},
		Workers:  []converge.WorkerSpec{{Name: "classic", Builtin: "classic", Replicas: 2}}}
	second := &converge.AppliedSource{Repo: "https://git.example/infra.git", Remote: true, Ref: "main",
		Revision: converge.Revision{Ref: "main", Hash: "b2"}}
	for _, want := range []*converge.AppliedSource{first, second} {
		if err := s.PutSource(context.Background(), want); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Source(context.Background()); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Source() = %+v, %v; want %+v", got, err, want)
		}
	}
}

// testControl: the zero Control before one is put, a later one replaces
// the first, and nil clears it.
func testControl(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	if got, err := s.Control(context.Background()); err != nil || !reflect.DeepEqual(got, &converge.Control{}) {
		t.Fatalf("Control() of an empty store = %+v, %v; want the zero Control", got, err)
	}
	pinned := &converge.Control{Pin: &converge.Pin{Revision: converge.Revision{Ref: "main", Hash: "a1"}, By: "ops", At: t0, From: "b2"}}
	suspended := &converge.Control{Suspended: []converge.Suspension{{Root: "bom/classic", By: "ops", At: t0}, {At: t0}}}
	for _, want := range []*converge.Control{pinned, suspended} {
		if err := s.PutControl(context.Background(), want); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Control(context.Background()); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Control() = %+v, %v; want %+v", got, err, want)
		}
	}
	if err := s.PutControl(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Control(context.Background()); err != nil || !reflect.DeepEqual(got, &converge.Control{}) {
		t.Errorf("Control() after PutControl(nil) = %+v, %v; want the zero Control", got, err)
	}
}

// testBigBatch commits batches far larger than one etcd transaction may
// be (128 operations by default): a tree of 1,500 resources with edges,
// events and deliveries, then a refused batch of the same size (its last
// row an orphan) that must leave nothing behind, then the whole tree's
// deletion in one batch.
func testBigBatch(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	const n = 1500
	b := &converge.Batch{Resources: []*converge.Resource{res("bom", "big", "")}}
	for i := range n - 1 {
		r := res("vpc", fmt.Sprintf("v%04d", i), "bom/big")
		b.Resources = append(b.Resources, r)
		if i > 0 {
			b.Edges = append(b.Edges, edge(r.ID(), converge.NewID("vpc", fmt.Sprintf("v%04d", i-1)), converge.ValueFlow{From: "id", To: "prev"}))
		}
		b.Events = append(b.Events, converge.Event{Time: t0, Resource: r.ID(), Type: "Created"})
		if i%5 == 0 {
			b.Deliveries = append(b.Deliveries, &converge.Delivery{Key: fmt.Sprintf("notify/%s/1/synced", r.UID), Binding: "notify", Created: t0})
		}
	}
	b.Applied = &converge.Revision{Ref: "main", Hash: "big1"}
	commit(t, s, b)
	snap := load(t, s)
	if got, want := len(snap.Resources), n; got != want {
		t.Fatalf("resources after the big batch = %d, want %d", got, want)
	}
	if got, want := len(snap.Edges), n-2; got != want {
		t.Errorf("edges = %d, want %d", got, want)
	}
	if got, want := snap.LastEventSeq, uint64(n-1); got != want {
		t.Errorf("LastEventSeq = %d, want %d", got, want)
	}
	if got, want := len(snap.Deliveries), (n-1+4)/5; got != want {
		t.Errorf("deliveries = %d, want %d", got, want)
	}
	if snap.Applied == nil || snap.Applied.Hash != "big1" {
		t.Errorf("applied = %v, want big1", snap.Applied)
	}
	if got, err := s.ChildCount(context.Background(), "bom/big"); err != nil || got != n-1 {
		t.Errorf("ChildCount(bom/big) = %d, %v; want %d", got, err, n-1)
	}
	if err := s.Check(context.Background()); err != nil {
		t.Fatal(err)
	}

	before := mustJSON(t, load(t, s))
	bad := &converge.Batch{}
	for i := range n {
		r := res("route", fmt.Sprintf("r%04d", i), "bom/big")
		r.Phase = converge.PhaseReady
		bad.Resources = append(bad.Resources, r)
	}
	bad.Resources = append(bad.Resources, res("route", "orphan", "bom/gone"))
	bad.Events = []converge.Event{{Resource: "route/orphan", Type: "Created"}}
	if err := s.Commit(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "owner bom/gone does not exist") {
		t.Fatalf("Commit of a big batch with an orphan: error = %v, want the orphan refused", err)
	}
	if got := mustJSON(t, load(t, s)); got != before {
		t.Error("a refused big batch changed the store")
	}

	del := &converge.Batch{Applied: &converge.Revision{Ref: "main", Hash: "big2"}}
	for _, r := range snap.Resources {
		del.DeletedResources = append(del.DeletedResources, r.ID())
	}
	for _, d := range snap.Deliveries {
		del.DeletedDeliveries = append(del.DeletedDeliveries, d.Key)
	}
	commit(t, s, del)
	snap = load(t, s)
	if len(snap.Resources)+len(snap.Edges)+len(snap.Deliveries) != 0 || snap.Applied.Hash != "big2" {
		t.Errorf("after deleting the tree: %d resources, %d edges, %d deliveries, applied %v; want none and big2",
			len(snap.Resources), len(snap.Edges), len(snap.Deliveries), snap.Applied)
	}
	if got, err := s.Children(context.Background(), ""); err != nil || len(got) != 0 {
		t.Errorf("roots after deleting the tree = %v, %v; want none", got, err)
	}
}

// testManyEvents commits the events of a batch as big as the scheduler
// makes them (8,192, here ~3 MB of them) and one bigger than
// MaxEvents: every event is kept in Seq order, or the newest MaxEvents.
func testManyEvents(t *testing.T, open Opener) {
	msg := strings.Repeat("m", 300)
	batch := func(n int) *converge.Batch {
		b := &converge.Batch{}
		for i := range n {
			b.Events = append(b.Events, converge.Event{Time: t0, Resource: converge.NewID("vpc", fmt.Sprintf("v%04d", i)), Type: "T", Message: msg})
		}
		return b
	}
	s := open(t, state.Options{})
	commit(t, s, batch(8192))
	evs, err := s.Events(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 8192 || evs[0].Seq != 1 || evs[8191].Seq != 8192 || evs[8191].Resource != "vpc/v8191" {
		t.Fatalf("Events after an 8,192-event batch: %d events", len(evs))
	}
	if got, want := load(t, s).LastEventSeq, uint64(8192); got != want {
		t.Errorf("LastEventSeq = %d, want %d", got, want)
	}
	one, err := s.Events(context.Background(), "vpc/v4000", 0)
	if err != nil || len(one) != 1 || one[0].Seq != 4001 {
		t.Errorf("Events(vpc/v4000) = %v, %v; want the one with seq 4001", one, err)
	}

	small := open(t, state.Options{MaxEvents: 1000})
	commit(t, small, batch(3000))
	commit(t, small, batch(5000))
	evs, err = small.Events(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1000 || evs[0].Seq != 7001 || evs[999].Seq != 8000 {
		t.Errorf("with MaxEvents 1000, after 3,000 then 5,000 events: %d events, seqs %d…%d; want 1000, 7001…8000",
			len(evs), evs[0].Seq, evs[len(evs)-1].Seq)
	}
}

// testResourceHeadsAfter: a scan of heads is the scan of resources less
// their declared spec, spec and status.
func testResourceHeadsAfter(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	acct, vpc := res("account", "a", ""), res("vpc", "v", "")
	acct.Status = []byte(`{"id":"1"}`)
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{acct, vpc},
		Edges: []converge.Edge{edge(vpc.ID(), acct.ID(), converge.ValueFlow{From: "id", To: "account_id"})}})
	full, err := s.ResourcesAfter(context.Background(), "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	heads, err := s.ResourceHeadsAfter(context.Background(), "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(full) != 2 || len(heads) != len(full) {
		t.Fatalf("%d heads, %d resources; want 2 of each", len(heads), len(full))
	}
	for i, row := range full {
		want := *row.Resource
		want.Declared, want.Spec, want.Status = nil, nil, nil
		if !reflect.DeepEqual(heads[i].Resource, &want) || !reflect.DeepEqual(heads[i].Consumes, row.Consumes) {
			t.Errorf("head %d = %+v consuming %v, want %+v consuming %v", i, heads[i].Resource, heads[i].Consumes, &want, row.Consumes)
		}
		one, err := s.ResourceHead(context.Background(), want.ID())
		if err != nil || !reflect.DeepEqual(one, &want) {
			t.Errorf("ResourceHead(%s) = %+v, %v; want %+v", want.ID(), one, err, &want)
		}
	}
	if _, err := s.ResourceHead(context.Background(), "vpc/nope"); !errors.Is(err, converge.ErrNotFound) {
		t.Errorf("ResourceHead of an absent resource: %v, want ErrNotFound", err)
	}
}

// testResourcesByID: resources by ID in the asked order, nil for an
// absent one.
func testResourcesByID(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	a, b := res("vpc", "a", ""), res("vpc", "b", "")
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{a, b}})
	got, err := s.ResourcesByID(context.Background(), []converge.ID{"vpc/b", "vpc/missing", "vpc/a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0] == nil || got[0].ID() != "vpc/b" || got[1] != nil || got[2] == nil || got[2].ID() != "vpc/a" {
		t.Fatalf("ResourcesByID(vpc/b, vpc/missing, vpc/a) = %v, want vpc/b, nil, vpc/a", got)
	}
	if !reflect.DeepEqual(got[2], a) {
		t.Errorf("ResourcesByID: vpc/a =\n%+v\nwant\n%+v", got[2], a)
	}
}

// testVerify: a store that holds what it committed verifies, before and
// after a commit (what breaks it is each backend's own: a replaced file,
// a lost lock; their tests show those).
func testVerify(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	if err := s.Verify(context.Background()); err != nil {
		t.Fatalf("Verify of a fresh store: %v", err)
	}
	if err := s.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{res("bom", "a", "")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(context.Background()); err != nil {
		t.Errorf("Verify after a commit: %v", err)
	}
}

// bigSpec returns a JSON spec of about n bytes, different for each tag:
// a list of teams, as a big BOM's.
func bigSpec(n int, tag string) json.RawMessage {
	var b strings.Builder
	b.WriteString(`{"teams":[`)
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"%s-team-%07d","cidr":"10.%d.%d.0/24"}`, tag, i, i/256%256, i%256)
	}
	b.WriteString(`]}`)
	return json.RawMessage(b.String())
}

// testBigRow stores rows far bigger than one etcd request may carry (1.5
// MiB by default): a root whose declared spec and spec are 3 MB each,
// beside a child, read back whole by every read; then a different big
// spec, the same one again with only its phase changed, a small one, a
// big one again, and the root's deletion. The store checks consistent
// after each step (on etcd: no part of a replaced value left behind).
func testBigRow(t *testing.T, open Opener) {
	s := open(t, state.Options{})
	ctx := context.Background()
	root := res("bom", "huge", "")
	root.Declared, root.Spec = bigSpec(3<<20, "a"), bigSpec(3<<20, "a")
	child := res("vpc", "c", "bom/huge")
	step := func(what string, b *converge.Batch, want *converge.Resource) {
		t.Helper()
		commit(t, s, b)
		got, err := s.ResourcesByID(ctx, []converge.ID{"bom/huge"})
		if err != nil {
			t.Fatalf("%s: ResourcesByID: %v", what, err)
		}
		if want == nil {
			if got[0] != nil {
				t.Fatalf("%s: bom/huge is still stored", what)
			}
		} else if got[0] == nil || !reflect.DeepEqual(got[0], want) {
			t.Fatalf("%s: ResourcesByID(bom/huge) is not the row committed (got %d bytes of spec, want %d)", what, len(specOf(got[0])), len(want.Spec))
		}
		snap := load(t, s)
		found := false
		for _, r := range snap.Resources {
			if r.ID() == "bom/huge" {
				found = true
				if !reflect.DeepEqual(r, want) {
					t.Fatalf("%s: Load's bom/huge is not the row committed", what)
				}
			}
		}
		if found != (want != nil) {
			t.Fatalf("%s: Load holds bom/huge: %v, want %v", what, found, want != nil)
		}
		if err := s.Check(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	step("a 6 MB root", &converge.Batch{Resources: []*converge.Resource{root, child}}, root)

	next := *root
	next.Declared, next.Spec, next.Generation = bigSpec(2<<20, "b"), bigSpec(2<<20, "b"), 2
	step("another big spec", &converge.Batch{Resources: []*converge.Resource{&next}}, &next)

	ready := next
	ready.Phase = converge.PhaseReady
	step("the same spec, Ready", &converge.Batch{Resources: []*converge.Resource{&ready}}, &ready)

	small := ready
	small.Declared, small.Spec, small.Generation = json.RawMessage(`{"teams":[]}`), json.RawMessage(`{"teams":[]}`), 3
	step("a small spec", &converge.Batch{Resources: []*converge.Resource{&small}}, &small)

	again := small
	again.Declared, again.Spec, again.Generation = bigSpec(4<<20, "c"), bigSpec(4<<20, "c"), 4
	step("big again", &converge.Batch{Resources: []*converge.Resource{&again}}, &again)

	// A spec that is not the declared spec (a value flowed in) is kept
	// beside it, however big either is.
	flowed := again
	flowed.Spec, flowed.Generation = bigSpec(1<<20, "d"), 5
	step("a big spec beside a big declared spec", &converge.Batch{Resources: []*converge.Resource{&flowed}}, &flowed)
	if got, err := s.Resource(ctx, "bom/huge"); err != nil || !reflect.DeepEqual(got, &flowed) {
		t.Fatalf("Resource(bom/huge) is not the row committed: %v", err)
	}
	if got, err := s.Resources(ctx, state.Filter{Kind: "bom"}); err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], &flowed) {
		t.Fatalf("Resources(kind bom) does not hold the row committed: %v", err)
	}

	step("deleted", &converge.Batch{DeletedResources: []converge.ID{"vpc/c", "bom/huge"}}, nil)
}

func specOf(r *converge.Resource) json.RawMessage {
	if r == nil {
		return nil
	}
	return r.Spec
}
