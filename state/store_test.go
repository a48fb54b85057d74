package state_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/statetest"
)

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

func commit(t *testing.T, s *state.Store, b *converge.Batch) {
	t.Helper()
	if err := s.Commit(b); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func load(t *testing.T, s *state.Store) *converge.Snapshot {
	t.Helper()
	snap, err := s.Load()
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

// fullBatch touches every bucket Commit writes.
func fullBatch() *converge.Batch {
	root := res("bom", "classic", "")
	root.Origin = converge.OriginGit
	root.Source = "resources/bom.cue:3"
	acct := res("account", "team-a", "bom/classic")
	vpc := res("vpc", "team-a", "bom/classic")
	vpc.Status = json.RawMessage(`{"vpc_id":"vpc-1"}`)
	vpc.Phase = converge.PhaseRunning
	vpc.Attempts = 2
	vpc.LastError = "throttled"
	vpc.NextAttempt = t0.Add(time.Minute)
	vpc.Lease = &converge.Lease{TaskID: "t1", Reaction: "reconcile", Worker: "w1", Expires: t0.Add(time.Hour)}
	return &converge.Batch{
		Resources: []*converge.Resource{root, acct, vpc},
		Edges: []converge.Edge{
			edge("vpc/team-a", "account/team-a", converge.ValueFlow{From: "account_id", To: "account_id"}),
			edge("account/team-a", "tgw/missing"),
		},
		Events: []converge.Event{
			{Time: t0, Resource: "bom/classic", Type: "Created", Message: "declared"},
			{Time: t0, Resource: "vpc/team-a", Type: "Created", Message: "composed"},
		},
		Kinds: []*converge.Kind{
			{Name: "vpc", Version: 2, Reactions: []string{"reconcile"}, SpecSchema: "{cidr: string}", ResyncInterval: time.Minute},
			{Name: "vpc", Version: 1, Reactions: []string{"reconcile", "teardown"}, Finalizer: true},
		},
		Configs:    []*converge.ProviderConfig{{Name: "aws", Kind: "vpc", KindVersion: 1, IsDefault: true, Config: json.RawMessage(`{"region":"eu"}`)}},
		Bindings:   []*converge.Binding{{Name: "notify", Kind: "vpc", Transition: converge.TransitionSynced, Reactor: "slack", ReactorVersion: 1}},
		Deliveries: []*converge.Delivery{{Key: "notify/uid/1/synced", Binding: "notify", Reactor: converge.KindRef{Kind: "slack", Version: 1}, Subject: converge.Subject{Resource: "vpc/team-a", UID: "u", Generation: 1, Transition: "synced"}, Created: t0}},
		Applied:    &converge.Revision{Ref: "main", Hash: "abc123", Time: t0, Subject: "first"},
	}
}

// TestResourcesHead checks that Filter.Head returns the very resources
// of the same filter without it, less their declared spec, spec and
// status, on both of Resources' paths (the owner index and the scan).
func TestResourcesHead(t *testing.T) {
	s := statetest.Open(t)
	root := res("bom", "classic", "")
	root.Status = json.RawMessage(`{"teams":3}`)
	a := res("account", "a", "bom/classic")
	a.Status = json.RawMessage(`{"id":"1"}`)
	a.Lease = &converge.Lease{TaskID: "t", Worker: "w", Expires: t0}
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{root, a}})
	for _, f := range []state.Filter{{}, {RootsOnly: true}, {Owner: "bom/classic"}, {Kind: "account"}} {
		full, err := s.Resources(f)
		if err != nil {
			t.Fatal(err)
		}
		f.Head = true
		head, err := s.Resources(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(full) == 0 || len(head) != len(full) {
			t.Fatalf("Resources(%+v): %d resources, without Head %d", f, len(head), len(full))
		}
		for i, r := range full {
			if r.Spec == nil || r.Declared == nil {
				t.Fatalf("Resources without Head: %s has no spec", r.ID())
			}
			want := *r
			want.Declared, want.Spec, want.Status = nil, nil, nil
			if !reflect.DeepEqual(head[i], &want) {
				t.Errorf("Resources(%+v)[%d] =\n%+v\nwant\n%+v", f, i, head[i], &want)
			}
		}
	}
}

func TestCommitRejects(t *testing.T) {
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := statetest.Open(t)
			commit(t, s, &converge.Batch{
				Resources: []*converge.Resource{res("bom", "root", ""), res("account", "kept", "bom/root")},
				Events:    []converge.Event{{Resource: "bom/root", Type: "Created"}},
			})
			before, stats := mustJSON(t, load(t, s)), s.Stats()
			// Valid changes ride along: none of them may survive.
			tt.batch.Resources = append([]*converge.Resource{res("vpc", "rider", "")}, tt.batch.Resources...)
			tt.batch.Events = append(tt.batch.Events, converge.Event{Resource: "vpc/rider", Type: "Created"})
			tt.batch.Configs = []*converge.ProviderConfig{{Name: "rider"}}
			err := s.Commit(tt.batch)
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
		})
	}
}

func TestDeletedDeliveries(t *testing.T) {
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
			s := statetest.Open(t)
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

func TestDeleteCascade(t *testing.T) {
	s := statetest.Open(t)
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
	if got, err := s.Children("bom/r"); err != nil || !reflect.DeepEqual(got, []converge.ID{"account/a", "route/a"}) {
		t.Errorf("Children(bom/r) = %v, %v; want [account/a route/a]", got, err)
	}
	for _, id := range []converge.ID{"account/a", "vpc/a"} {
		c, p, err := s.EdgesOf(id)
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

func TestReparentMovesOwnerIndex(t *testing.T) {
	s := statetest.Open(t)
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("bom", "a", ""), res("bom", "b", ""), res("vpc", "x", "bom/a")}})
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("vpc", "x", "bom/b")}})
	for owner, want := range map[converge.ID]int{"bom/a": 0, "bom/b": 1} {
		if got, err := s.Children(owner); err != nil || len(got) != want {
			t.Errorf("Children(%s) = %v, %v; want %d", owner, got, err, want)
		}
	}
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("vpc", "x", "")}})
	if got, _ := s.Children("bom/b"); len(got) != 0 {
		t.Errorf("Children(bom/b) after orphaning on purpose = %v, want none", got)
	}
}

// TestPutsPerResource pins the write cost of one resource's life:
// create (resource + owner index), dispatch, Ready: 4 puts, plus one event
// chunk and one events meta put per batch; a resend of what is stored is
// free.
func TestPutsPerResource(t *testing.T) {
	s := statetest.Open(t)
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("bom", "r", "")}})
	base := s.Stats()
	r := res("vpc", "a", "bom/r")
	ev := func() []converge.Event { return []converge.Event{{Resource: "vpc/a", Type: "x"}} }
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{r}, Events: ev()})
	r.Phase, r.Lease = converge.PhaseRunning, &converge.Lease{TaskID: "t", Worker: "w", Expires: t0}
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{r}, Events: ev()})
	r.Phase, r.Lease, r.ObservedGeneration = converge.PhaseReady, nil, 1
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{r, r}, Events: ev()}) // twice: written once
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{r}})                  // unchanged: no put
	got := s.Stats()
	if got, want := got.Puts-base.Puts, uint64(4+2*3); got != want {
		t.Errorf("puts for one resource's life = %d, want %d (4 resource/index + 2 per event batch)", got, want)
	}
	if got, want := got.Commits-base.Commits, uint64(3); got != want {
		t.Errorf("commits = %d, want %d (the unchanged batch commits nothing)", got, want)
	}
	if got.Bytes <= base.Bytes {
		t.Errorf("Bytes did not grow: %d → %d", base.Bytes, got.Bytes)
	}
}

// TestOpenWritesNothing checks that opening a store in the current
// format does not write to it: a read command would otherwise pay a
// write transaction's fsync.
func TestOpenWritesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s, err := state.Open(dir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, fullBatch())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, state.FileName)
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s, err = state.Open(dir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resources(state.Filter{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("opening and reading the store changed its file")
	}
}

func TestReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s, err := state.Open(dir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := fullBatch()
	commit(t, s, b)
	want := mustJSON(t, load(t, s))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for name, wantMode := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, filepath.Join(dir, state.FileName): 0o600} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode(); got != wantMode {
			t.Errorf("mode of %s = %v, want %v", name, got, wantMode)
		}
	}
	s2 := statetest.OpenDir(t, dir, state.Options{})
	if got := mustJSON(t, load(t, s2)); got != want {
		t.Errorf("Load after reopen =\n%s\nwant\n%s", got, want)
	}
	// Sequence numbers continue across the reopen.
	evs := []converge.Event{{Resource: "vpc/team-a", Type: "Ready"}}
	commit(t, s2, &converge.Batch{Events: evs})
	if got, want := evs[0].Seq, uint64(3); got != want {
		t.Errorf("first Seq after reopen = %d, want %d", got, want)
	}
}

func TestOtherFormatRefused(t *testing.T) {
	tests := []struct {
		name    string
		format  uint64
		wantErr error
	}{
		{name: "newer", format: state.FormatVersion + 1, wantErr: state.ErrNewerFormat},
		{name: "older", format: 2, wantErr: state.ErrOldFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := state.Open(dir, state.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.RawPut(state.BucketMeta, state.MetaFormat, state.U64(tt.format)); err != nil {
				t.Fatal(err)
			}
			s.Close()
			_, err = state.Open(dir, state.Options{})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Open of format %d: error = %v, want %v", tt.format, err, tt.wantErr)
			}
			if want := fmt.Sprintf("format %d", tt.format); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		})
	}
}

// TestMigrateFormat3: a format-3 store (roots not in the owner index)
// is migrated at Open: its roots are indexed, listing them uses the
// index, and the store checks clean.
func TestMigrateFormat3(t *testing.T) {
	dir := t.TempDir()
	s, err := state.Open(dir, state.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("bom", "a", ""), res("bom", "b", ""), res("account", "x", "bom/a")}})
	// What format 3 had: no entries under the empty owner.
	if err := s.RawDelete(state.BucketOwners, []byte("\x00")); err != nil {
		t.Fatal(err)
	}
	if err := s.RawPut(state.BucketMeta, state.MetaFormat, state.U64(3)); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err == nil {
		t.Fatal("Check of the format-3 layout passed; the test does not make one")
	}
	s.Close()
	s = statetest.OpenDir(t, dir, state.Options{NoSync: true})
	roots, err := s.Resources(state.Filter{RootsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ids(roots)); got != "[bom/a bom/b]" {
		t.Errorf("roots after migration = %s, want [bom/a bom/b]", got)
	}
	if n, err := s.ChildCount(""); err != nil || n != 2 {
		t.Errorf("ChildCount(\"\") = %d, %v; want 2", n, err)
	}
	if n, err := s.ChildCount("bom/a"); err != nil || n != 1 {
		t.Errorf("ChildCount(bom/a) = %d, %v; want 1", n, err)
	}
}

func ids(rs []*converge.Resource) []converge.ID {
	out := make([]converge.ID, len(rs))
	for i, r := range rs {
		out[i] = r.ID()
	}
	return out
}

func TestLocked(t *testing.T) {
	dir := t.TempDir()
	s := statetest.OpenDir(t, dir, state.Options{NoSync: true})
	_ = s
	start := time.Now()
	_, err := state.Open(dir, state.Options{LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, state.ErrLocked) {
		t.Fatalf("second Open in one process: error = %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), filepath.Join(dir, state.FileName)) {
		t.Errorf("error %q does not name the file", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("second Open took %v with a 100ms timeout", d)
	}

	// And from another process: this test binary, re-executed.
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelperProcess$")
	cmd.Env = append(os.Environ(), "STATE_LOCK_HELPER_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper process: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "locked: true") {
		t.Errorf("helper process output = %q, want it to report ErrLocked", out)
	}
}

// TestLockHelperProcess is not a test: TestLocked runs it in a second
// process to open a store the first process holds.
func TestLockHelperProcess(t *testing.T) {
	dir := os.Getenv("STATE_LOCK_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process for TestLocked; runs only when re-executed by it")
	}
	_, err := state.Open(dir, state.Options{LockTimeout: 100 * time.Millisecond})
	fmt.Printf("locked: %v (%v)\n", errors.Is(err, state.ErrLocked), err)
}

func TestCheckCatchesCorruption(t *testing.T) {
	k := state.PairKey
	tests := []struct {
		name    string
		corrupt func(s *state.Store) error
		wantErr string
	}{
		{name: "owner index entry missing", wantErr: "owner index lacks bom/r → vpc/a",
			corrupt: func(s *state.Store) error { return s.RawPut(state.BucketOwners, k("bom/r", ""), []byte("account/a")) }},
		{name: "owner index entry extra", wantErr: "owner index: bom/r → vpc/ghost: child does not exist",
			corrupt: func(s *state.Store) error {
				return s.RawPut(state.BucketOwners, k("bom/r", ""), []byte("account/a\x00vpc/a\x00vpc/ghost"))
			}},
		{name: "owner index wrong owner", wantErr: `child's owner is "bom/r"`,
			corrupt: func(s *state.Store) error { return s.RawPut(state.BucketOwners, k("account/a", ""), []byte("vpc/a")) }},
		{name: "owner index out of order", wantErr: "owner index: bom/r: chunk \"\": account/a out of order",
			corrupt: func(s *state.Store) error {
				return s.RawPut(state.BucketOwners, k("bom/r", ""), []byte("vpc/a\x00account/a"))
			}},
		{name: "owner index chunk without empty bound first", wantErr: `first chunk has bound "account/a"`,
			corrupt: func(s *state.Store) error {
				return errors.Join(s.RawDelete(state.BucketOwners, k("bom/r", "")), s.RawPut(state.BucketOwners, k("bom/r", "account/a"), []byte("account/a\x00vpc/a")))
			}},
		{name: "owner missing", wantErr: "owner bom/r does not exist",
			corrupt: func(s *state.Store) error { return s.RawDelete(state.BucketResources, []byte("bom/r")) }},
		{name: "reverse edge missing", wantErr: "vpc/a→account/a: missing from the reverse index",
			corrupt: func(s *state.Store) error { return s.RawDelete(state.BucketProducers, k("account/a", "vpc/a")) }},
		{name: "reverse entry without edge", wantErr: "reverse edge index: account/a→vpc/a: no forward edge",
			corrupt: func(s *state.Store) error { return s.RawPut(state.BucketProducers, k("vpc/a", "account/a"), nil) }},
		{name: "reverse entry without consumer", wantErr: "reverse edge index: route/x→vpc/a: consumer does not exist",
			corrupt: func(s *state.Store) error { return s.RawPut(state.BucketProducers, k("vpc/a", "route/x"), nil) }},
		{name: "resource under the wrong key", wantErr: "resource vpc/b: value is vpc/a",
			corrupt: func(s *state.Store) error { return copyKey(s, state.BucketResources, "vpc/a", "vpc/b") }},
		{name: "event chunk out of order", wantErr: "seq 1 not above 2",
			corrupt: func(s *state.Store) error {
				return copyKey(s, state.BucketEvents, string(state.U64(1)), string(state.U64(9)))
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := state.Open(t.TempDir(), state.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			commit(t, s, &converge.Batch{
				Resources: []*converge.Resource{res("bom", "r", ""), res("account", "a", "bom/r"), res("vpc", "a", "bom/r")},
				Edges:     []converge.Edge{edge("vpc/a", "account/a")},
				Events:    []converge.Event{{Type: "a"}, {Type: "b"}},
			})
			if err := s.Check(); err != nil {
				t.Fatalf("Check before corruption: %v", err)
			}
			if err := tt.corrupt(s); err != nil {
				t.Fatal(err)
			}
			err = s.Check()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Check() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// copyKey copies bucket[from] to bucket[to] through the raw hooks.
func copyKey(s *state.Store, bucket []byte, from, to string) error {
	snapVal, err := rawGet(s, bucket, from)
	if err != nil {
		return err
	}
	return s.RawPut(bucket, []byte(to), snapVal)
}

func rawGet(s *state.Store, bucket []byte, key string) ([]byte, error) {
	return s.RawGet(bucket, []byte(key))
}

func TestResourceJSONFields(t *testing.T) {
	tests := []struct {
		name       string
		change     func(r *converge.Resource)
		wantErr    string
		wantStatus string
	}{
		{name: "empty status is absent", change: func(r *converge.Resource) { r.Status = json.RawMessage{} }, wantStatus: ""},
		{name: "status kept", change: func(r *converge.Resource) { r.Status = json.RawMessage(`{"a": 1}`) }, wantStatus: `{"a":1}`},
		{name: "invalid spec named", change: func(r *converge.Resource) { r.Spec = json.RawMessage(`{"a":`) }, wantErr: "resource vpc/a: encode: spec: invalid JSON"},
		{name: "invalid status named", change: func(r *converge.Resource) { r.Status = json.RawMessage(`nope`) }, wantErr: "status: invalid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := statetest.Open(t)
			r := res("vpc", "a", "")
			tt.change(r)
			err := s.Commit(&converge.Batch{Resources: []*converge.Resource{r}})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Commit error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Resource("vpc/a")
			if err != nil {
				t.Fatal(err)
			}
			if got, want := string(got.Status), tt.wantStatus; got != want {
				t.Errorf("stored status = %q, want %q", got, want)
			}
		})
	}
}

// TestEdgeWrites pins what edges cost and that their flows round-trip
// through the consumer's row.
func TestEdgeWrites(t *testing.T) {
	s := statetest.Open(t)
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("account", "a", ""), res("tgw", "t", "")}})
	puts := func() uint64 { return s.Stats().Puts }
	flowA := converge.ValueFlow{From: "account_id", To: "account_id"}
	flowB := converge.ValueFlow{From: "tgw_id", To: "tgw_id"}
	tests := []struct {
		name         string
		batch        *converge.Batch
		wantPuts     uint64
		wantConsumes string
	}{
		{name: "created with its edge: row, reverse entry, roots index", wantPuts: 3, wantConsumes: "[{vpc/a account/a [{account_id account_id}]}]",
			batch: &converge.Batch{Resources: []*converge.Resource{res("vpc", "a", "")}, Edges: []converge.Edge{edge("vpc/a", "account/a", flowA)}}},
		{name: "same edge again: nothing", wantPuts: 0, wantConsumes: "[{vpc/a account/a [{account_id account_id}]}]",
			batch: &converge.Batch{Edges: []converge.Edge{edge("vpc/a", "account/a", flowA)}}},
		{name: "edge added to a stored consumer: row, reverse entry", wantPuts: 2, wantConsumes: "[{vpc/a account/a [{account_id account_id}]} {vpc/a tgw/t [{tgw_id tgw_id}]}]",
			batch: &converge.Batch{Edges: []converge.Edge{edge("vpc/a", "tgw/t", flowB)}}},
		{name: "flows changed: row only", wantPuts: 1, wantConsumes: "[{vpc/a account/a []} {vpc/a tgw/t [{tgw_id tgw_id}]}]",
			batch: &converge.Batch{Edges: []converge.Edge{edge("vpc/a", "account/a")}}},
		{name: "edge deleted: row", wantPuts: 1, wantConsumes: "[{vpc/a tgw/t [{tgw_id tgw_id}]}]",
			batch: &converge.Batch{DeletedEdges: []converge.Edge{edge("vpc/a", "account/a")}}},
		{name: "producer deleted: the consumer keeps its edge (roots index)", wantPuts: 1, wantConsumes: "[{vpc/a tgw/t [{tgw_id tgw_id}]}]",
			batch: &converge.Batch{DeletedResources: []converge.ID{"tgw/t"}}},
		{name: "edge to a gone producer deleted: row", wantPuts: 1, wantConsumes: "[]",
			batch: &converge.Batch{DeletedEdges: []converge.Edge{edge("vpc/a", "tgw/t")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := puts()
			commit(t, s, tt.batch)
			if got := puts() - before; got != tt.wantPuts {
				t.Errorf("puts = %d, want %d", got, tt.wantPuts)
			}
			consumes, _, err := s.EdgesOf("vpc/a")
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(consumes); got != tt.wantConsumes && !(got == "[]" && tt.wantConsumes == "[]") {
				t.Errorf("EdgesOf(vpc/a) consumes = %s, want %s", got, tt.wantConsumes)
			}
			if err := s.Check(); err != nil {
				t.Errorf("Check: %v", err)
			}
		})
	}
}

// The applied revision's source survives a reopen; a later one replaces it.
func TestSource(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s, err := state.Open(dir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Source(); got != nil || err != nil {
		t.Fatalf("Source() of an empty store = %v, %v; want nil, nil", got, err)
	}
	if err := s.PutSource(&converge.AppliedSource{}); err == nil {
		t.Error("PutSource with no repository: no error")
	}
	first := &converge.AppliedSource{Repo: "/src/infra", Path: "examples/classic", Ref: "main",
		Revision: converge.Revision{Ref: "main", Hash: "a1"},
		Workers:  []converge.WorkerSpec{{Name: "classic", Builtin: "classic", Replicas: 2}}}
	second := &converge.AppliedSource{Repo: "https://git.example/infra.git", Remote: true, Ref: "main",
		Revision: converge.Revision{Ref: "main", Hash: "b2"}}
	for _, want := range []*converge.AppliedSource{first, second} {
		if err := s.PutSource(want); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Source(); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Source() = %+v, %v; want %+v", got, err, want)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := statetest.OpenDir(t, dir, state.Options{})
	if got, err := s2.Source(); err != nil || !reflect.DeepEqual(got, second) {
		t.Errorf("Source() after reopen = %+v, %v; want %+v", got, err, second)
	}
}
