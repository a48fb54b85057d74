package state_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
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
	if err := s.Commit(context.Background(), b); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func load(t *testing.T, s *state.Store) *converge.Snapshot {
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
		full, err := s.Resources(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		f.Head = true
		head, err := s.Resources(context.Background(), f)
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
	commit(t, s, statetest.FullBatch())
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
	if _, err := s.Resources(context.Background(), state.Filter{}); err != nil {
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
	b := statetest.FullBatch()
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
	if err := s.Check(context.Background()); err == nil {
		t.Fatal("Check of the format-3 layout passed; the test does not make one")
	}
	s.Close()
	s = statetest.OpenDir(t, dir, state.Options{NoSync: true})
	roots, err := s.Resources(context.Background(), state.Filter{RootsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ids(roots)); got != "[bom/a bom/b]" {
		t.Errorf("roots after migration = %s, want [bom/a bom/b]", got)
	}
	if n, err := s.ChildCount(context.Background(), ""); err != nil || n != 2 {
		t.Errorf("ChildCount(\"\") = %d, %v; want 2", n, err)
	}
	if n, err := s.ChildCount(context.Background(), "bom/a"); err != nil || n != 1 {
		t.Errorf("ChildCount(bom/a) = %d, %v; want 1", n, err)
	}
}

// TestMigrateFormat4: a format-4 store (no specs bucket) opens as format
// 5, its rows read as they were, and a big declared spec can then be kept
// apart.
func TestMigrateFormat4(t *testing.T) {
	dir := t.TempDir()
	s, err := state.Open(dir, state.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("bom", "a", "")}})
	if err := s.RawDropBucket("specs"); err != nil {
		t.Fatal(err)
	}
	if err := s.RawPut(state.BucketMeta, state.MetaFormat, state.U64(4)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = statetest.OpenDir(t, dir, state.Options{NoSync: true})
	if v, err := s.RawGet(state.BucketMeta, state.MetaFormat); err != nil || string(v) != string(state.U64(state.FormatVersion)) {
		t.Fatalf("format after the migration = %x, %v; want %d", v, err, state.FormatVersion)
	}
	big := res("bom", "a", "")
	big.Declared = json.RawMessage(`{"teams":"` + strings.Repeat("t", 300<<10) + `"}`)
	big.Spec = big.Declared
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{big}})
	got, err := s.Resource(context.Background(), "bom/a")
	if err != nil || string(got.Declared) != string(big.Declared) {
		t.Fatalf("Resource(bom/a) after the migration: %v", err)
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
			if err := s.Check(context.Background()); err != nil {
				t.Fatalf("Check before corruption: %v", err)
			}
			if err := tt.corrupt(s); err != nil {
				t.Fatal(err)
			}
			err = s.Check(context.Background())
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
			err := s.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{r}})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Commit error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Resource(context.Background(), "vpc/a")
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
			consumes, _, err := s.EdgesOf(context.Background(), "vpc/a")
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(consumes); got != tt.wantConsumes && !(got == "[]" && tt.wantConsumes == "[]") {
				t.Errorf("EdgesOf(vpc/a) consumes = %s, want %s", got, tt.wantConsumes)
			}
			if err := s.Check(context.Background()); err != nil {
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
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := statetest.OpenDir(t, dir, state.Options{})
	if got, err := s2.Source(context.Background()); err != nil || !reflect.DeepEqual(got, second) {
		t.Errorf("Source() after reopen = %+v, %v; want %+v", got, err, second)
	}
}
