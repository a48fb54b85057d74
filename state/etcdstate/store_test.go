package etcdstate_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/etcdtest"
	"github.com/convergehq/converge/state/statetest"
)

// one is the one-member cluster the tests share, each under its own
// prefix.
var one *etcdtest.Cluster

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "etcdstate-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	one, err = etcdtest.StartCluster(dir, etcdtest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	one.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

var prefixes atomic.Int64

// newPrefix returns a key prefix no other test uses.
func newPrefix() string { return fmt.Sprintf("/converge-test/%d", prefixes.Add(1)) }

// open opens a writer on c under prefix with opts' retention limits, and
// checks and closes it when t ends.
func open(t *testing.T, c *etcdtest.Cluster, prefix string, opts etcdstate.Options) *etcdstate.Store {
	t.Helper()
	opts.Endpoints, opts.Prefix = c.Endpoints, prefix
	s, err := etcdstate.Open(opts)
	if err != nil {
		t.Fatalf("open etcd state: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Check(context.Background()); err != nil {
			t.Errorf("state check after test: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("close state: %v", err)
		}
	})
	return s
}

func opener(c *etcdtest.Cluster) statetest.Opener {
	return func(t *testing.T, o state.Options) state.Backend {
		return open(t, c, newPrefix(), etcdstate.Options{MaxEvents: o.MaxEvents, MaxRevisions: o.MaxRevisions})
	}
}

// TestConformance runs the suite every backend passes (statetest.Run)
// against a one-member cluster.
func TestConformance(t *testing.T) { statetest.Run(t, opener(one)) }

// TestConformanceThreeMembers runs it against a three-member cluster.
func TestConformanceThreeMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-member cluster; the one-member run covers the semantics")
	}
	statetest.Run(t, opener(etcdtest.Start(t, etcdtest.Options{Members: 3})))
}

func res(kind, name string, owner converge.ID) *converge.Resource {
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	return &converge.Resource{
		UID: "uid-" + kind + "-" + name, Kind: kind, KindVersion: 1, Name: name,
		Spec:  json.RawMessage(`{"cidr":"10.0.0.0/16"}`),
		Phase: converge.PhasePending, Generation: 1, Owner: owner, CreatedAt: t0, UpdatedAt: t0,
	}
}

// bigBatches returns a base batch and a batch of about 2,000 writes that
// changes, adds and deletes rows of it.
func bigBatches() (base, big *converge.Batch) {
	base = &converge.Batch{Resources: []*converge.Resource{res("bom", "r", "")}}
	for i := range 300 {
		base.Resources = append(base.Resources, res("vpc", fmt.Sprintf("v%03d", i), "bom/r"))
	}
	base.Events = []converge.Event{{Resource: "bom/r", Type: "Created"}}
	big = &converge.Batch{Applied: &converge.Revision{Ref: "main", Hash: "big"}}
	for i := range 300 {
		if i%3 == 0 {
			big.DeletedResources = append(big.DeletedResources, converge.NewID("vpc", fmt.Sprintf("v%03d", i)))
			continue
		}
		r := res("vpc", fmt.Sprintf("v%03d", i), "bom/r")
		r.Phase = converge.PhaseReady
		big.Resources = append(big.Resources, r)
	}
	for i := range 600 {
		r := res("route", fmt.Sprintf("r%03d", i), "bom/r")
		big.Resources = append(big.Resources, r)
		big.Edges = append(big.Edges, converge.Edge{Consumer: r.ID(), Producer: converge.NewID("vpc", fmt.Sprintf("v%03d", i%300))})
		big.Events = append(big.Events, converge.Event{Resource: r.ID(), Type: "Created"})
	}
	return base, big
}

func snapshot(t *testing.T, s state.Backend) string {
	t.Helper()
	snap, err := s.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// want returns the snapshots bbolt gives before and after big.
func want(t *testing.T, base, big *converge.Batch) (before, after string) {
	ref := statetest.Open(t)
	if err := ref.Commit(context.Background(), base); err != nil {
		t.Fatal(err)
	}
	before = snapshot(t, ref)
	if err := ref.Commit(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	return before, snapshot(t, ref)
}

// TestCrashBetweenChunks: a writer dies after applying two of a big
// batch's transactions. Until a writer finishes the batch, readers see
// the state before it, whole; the next writer's Open finishes it, and
// the state is then what bbolt holds after the same batch.
func TestCrashBetweenChunks(t *testing.T) {
	base, big := bigBatches()
	before, after := want(t, base, big)
	prefix := newPrefix()
	w1, err := etcdstate.Open(etcdstate.Options{Endpoints: one.Endpoints, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if err := w1.Commit(context.Background(), base); err != nil {
		t.Fatal(err)
	}
	w1.SetFailAfter(2)
	if err := w1.Commit(context.Background(), big); err != nil {
		t.Fatalf("Commit past the commit point: %v (the batch is durable)", err)
	}
	rd, err := etcdstate.Open(etcdstate.Options{Endpoints: one.Endpoints, Prefix: prefix, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if got := snapshot(t, rd); got != before {
		t.Errorf("a reader during the half-applied batch sees neither the state before nor after it:\n%s\nwant\n%s", got, before)
	}
	if err := rd.Check(context.Background()); err != nil {
		t.Errorf("Check during the half-applied batch: %v", err)
	}
	// The writer dies: its lock goes with its lease, the batch is left.
	w1.SetFailAfter(0)
	if err := w1.Close(); err != nil {
		t.Fatal(err)
	}
	w2 := open(t, one, prefix, etcdstate.Options{})
	if got := snapshot(t, w2); got != after {
		t.Errorf("after the next writer's Open:\n%s\nwant\n%s", got, after)
	}
	if got := snapshot(t, rd); got != after {
		t.Error("the reader does not see the finished batch")
	}
	assertNoJournal(t, prefix)
}

// TestCrashBeforeCommitPoint: a writer dies after writing some of a big
// batch's journal but before its commit marker: the batch is lost
// whole, and the next writer removes the parts.
func TestCrashBeforeCommitPoint(t *testing.T) {
	base, big := bigBatches()
	before, _ := want(t, base, big)
	prefix := newPrefix()
	w1, err := etcdstate.Open(etcdstate.Options{Endpoints: one.Endpoints, Prefix: prefix, MaxTxnBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := w1.Commit(context.Background(), base); err != nil {
		t.Fatal(err)
	}
	w1.SetFailBeforeCommit(true)
	if err := w1.Commit(context.Background(), big); err == nil {
		t.Fatal("Commit that stopped before its commit point: no error")
	}
	if err := w1.Close(); err != nil {
		t.Fatal(err)
	}
	w2 := open(t, one, prefix, etcdstate.Options{})
	if got := snapshot(t, w2); got != before {
		t.Errorf("after a batch lost before its commit point:\n%s\nwant\n%s", got, before)
	}
	assertNoJournal(t, prefix)
}

func assertNoJournal(t *testing.T, prefix string) {
	t.Helper()
	resp, err := one.Client(t).Get(t.Context(), prefix+"/j/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Errorf("%d batch journal keys left", resp.Count)
	}
}

// TestLocked: one writer per prefix; readers alongside it.
func TestLocked(t *testing.T) {
	prefix := newPrefix()
	w := open(t, one, prefix, etcdstate.Options{})
	start := time.Now()
	_, err := etcdstate.Open(etcdstate.Options{Endpoints: one.Endpoints, Prefix: prefix, LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, state.ErrLocked) {
		t.Fatalf("second writer: error = %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), prefix) {
		t.Errorf("error %q does not name the prefix", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("second Open took %v with a 100ms timeout", d)
	}
	if err := w.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{res("bom", "r", "")}}); err != nil {
		t.Fatal(err)
	}
	rd, err := etcdstate.Open(etcdstate.Options{Endpoints: one.Endpoints, Prefix: prefix, ReadOnly: true})
	if err != nil {
		t.Fatalf("reader beside a writer: %v", err)
	}
	defer rd.Close()
	if _, err := rd.Resource(context.Background(), "bom/r"); err != nil {
		t.Errorf("reader: %v", err)
	}
	if err := rd.Commit(context.Background(), &converge.Batch{DeletedResources: []converge.ID{"bom/r"}}); !errors.Is(err, etcdstate.ErrReadOnly) {
		t.Errorf("Commit on a read-only store: %v, want ErrReadOnly", err)
	}
}

// TestFenced: a writer that lost its lock (its lease expired while it
// was paused) and one whose Fence fails have every write refused.
func TestFenced(t *testing.T) {
	prefix := newPrefix()
	old := open(t, one, prefix, etcdstate.Options{})
	cli := one.Client(t)
	if _, err := cli.Revoke(t.Context(), old.Lease()); err != nil {
		t.Fatal(err)
	}
	next := open(t, one, prefix, etcdstate.Options{})
	b := &converge.Batch{Resources: []*converge.Resource{res("bom", "stale", "")}}
	if err := old.Commit(context.Background(), b); !errors.Is(err, etcdstate.ErrFenced) {
		t.Errorf("Commit by a writer that lost its lock: %v, want ErrFenced", err)
	}
	if _, err := next.Resource(context.Background(), "bom/stale"); !errors.Is(err, converge.ErrNotFound) {
		t.Errorf("the refused write is visible: %v", err)
	}

	// A fence of the caller's: an election key that must keep its revision.
	elect := prefix + "-election"
	put, err := cli.Put(t.Context(), elect, "me")
	if err != nil {
		t.Fatal(err)
	}
	fenced := open(t, one, newPrefix(), etcdstate.Options{Fence: func() []clientv3.Cmp {
		return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(elect), "=", put.Header.Revision)}
	}})
	if err := fenced.Commit(context.Background(), b); err != nil {
		t.Fatalf("Commit while the fence holds: %v", err)
	}
	if _, err := cli.Delete(t.Context(), elect); err != nil {
		t.Fatal(err)
	}
	b.Resources[0].Phase = converge.PhaseReady
	if err := fenced.Commit(context.Background(), b); !errors.Is(err, etcdstate.ErrFenced) {
		t.Errorf("Commit after the election key went: %v, want ErrFenced", err)
	}
}

func TestOpenRefusesBadOptions(t *testing.T) {
	tests := []struct {
		name    string
		opts    etcdstate.Options
		wantErr string
	}{
		{name: "no endpoints", opts: etcdstate.Options{Prefix: "/x"}, wantErr: "no endpoints"},
		{name: "no prefix", opts: etcdstate.Options{Endpoints: []string{"127.0.0.1:1"}}, wantErr: "empty key prefix"},
		{name: "slash prefix", opts: etcdstate.Options{Endpoints: []string{"127.0.0.1:1"}, Prefix: "/"}, wantErr: "empty key prefix"},
		{name: "tiny txn", opts: etcdstate.Options{Endpoints: []string{"127.0.0.1:1"}, Prefix: "/x", MaxTxnOps: 2}, wantErr: "MaxTxnOps 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := etcdstate.Open(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Open error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestRowOverOneRequest: a row bigger than one etcd request may carry
// (1.5 MiB) is stored, in parts: its key holds a small header, its
// parts are under x/, and it reads back whole.
func TestRowOverOneRequest(t *testing.T) {
	prefix := newPrefix()
	s := open(t, one, prefix, etcdstate.Options{})
	big := res("vpc", "big", "")
	big.Spec = json.RawMessage(`{"blob":"` + strings.Repeat("x", 2<<20) + `"}`)
	if err := s.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{res("vpc", "ok", ""), big}}); err != nil {
		t.Fatalf("Commit of a 2 MiB row: %v", err)
	}
	got, err := s.Resource(context.Background(), "vpc/big")
	if err != nil || string(got.Spec) != string(big.Spec) {
		t.Fatalf("read back: %v (%d bytes of spec, want %d)", err, len(specBytes(got)), len(big.Spec))
	}
	raw, err := one.Client(t).Get(t.Context(), prefix+"/r/vpc/big")
	if err != nil || len(raw.Kvs) != 1 || len(raw.Kvs[0].Value) > 1024 {
		t.Fatalf("the row's key: %v, %d keys, want one small header", err, len(raw.Kvs))
	}
	parts, err := one.Client(t).Get(t.Context(), prefix+"/x/r/vpc/big\x00", clientv3.WithPrefix())
	if err != nil || len(parts.Kvs) < 2 {
		t.Fatalf("parts: %v, %d keys, want a few", err, len(parts.Kvs))
	}
	for _, kv := range parts.Kvs {
		if len(kv.Value) > 512<<10 {
			t.Errorf("part %q of %d bytes, over 512 KiB", kv.Key, len(kv.Value))
		}
	}
}

func specBytes(r *converge.Resource) []byte {
	if r == nil {
		return nil
	}
	return r.Spec
}

// TestVerify: Verify holds while the writer keeps its lock and prefix,
// and is ErrFenced once the lock is lost or the prefix wiped: a replica
// in either state must never report success.
func TestVerify(t *testing.T) {
	cli := one.Client(t)
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, s *etcdstate.Store, prefix string)
	}{
		{"lock lost", func(t *testing.T, s *etcdstate.Store, _ string) {
			if _, err := cli.Revoke(t.Context(), s.Lease()); err != nil {
				t.Fatal(err)
			}
		}},
		{"prefix wiped", func(t *testing.T, _ *etcdstate.Store, prefix string) {
			if _, err := cli.Delete(t.Context(), prefix+"/", clientv3.WithPrefix()); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := newPrefix()
			s, err := etcdstate.Open(etcdstate.Options{Endpoints: one.Endpoints, Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{res("bom", "a", "")}}); err != nil {
				t.Fatal(err)
			}
			if err := s.Verify(context.Background()); err != nil {
				t.Fatalf("Verify of a held store: %v", err)
			}
			tc.lose(t, s, prefix)
			if err := s.Verify(context.Background()); !errors.Is(err, etcdstate.ErrFenced) {
				t.Errorf("Verify: %v, want ErrFenced", err)
			}
		})
	}
}

// TestReadOutlastsOneRequestsBound: a read is bounded per request, not
// as a whole: a Load or Check of a million rows is hundreds of requests
// and takes minutes on a loaded machine, and used to fail at 30 s
// ("context deadline exceeded", TestReplicasEtcdScale at 1M). Here one
// request's bound is 200ms and the read lasts 600ms.
func TestReadOutlastsOneRequestsBound(t *testing.T) {
	s := open(t, one, newPrefix(), etcdstate.Options{})
	defer etcdstate.SetOpTimeout(200 * time.Millisecond)()
	if err := s.ReadApart(t.Context(), 600*time.Millisecond); err != nil {
		t.Fatalf("a read of two requests 600ms apart, each bounded by 200ms: %v", err)
	}
}

// TestFormatRaised: a writer raises a prefix of the older layout (1) to
// its own, and Open refuses a prefix of a newer one.
func TestFormatRaised(t *testing.T) {
	cli := one.Client(t)
	u64 := func(v uint64) string { return string(binary.BigEndian.AppendUint64(nil, v)) }
	prefix := newPrefix()
	if _, err := cli.Put(t.Context(), prefix+"/m/format", u64(1)); err != nil {
		t.Fatal(err)
	}
	open(t, one, prefix, etcdstate.Options{})
	resp, err := cli.Get(t.Context(), prefix+"/m/format")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != u64(etcdstate.FormatVersion) {
		t.Fatalf("format after a writer opened a layout 1 prefix: %v, %v; want %d", resp, err, etcdstate.FormatVersion)
	}
	newer := newPrefix()
	if _, err := cli.Put(t.Context(), newer+"/m/format", u64(etcdstate.FormatVersion+1)); err != nil {
		t.Fatal(err)
	}
	if _, err := etcdstate.Open(etcdstate.Options{Endpoints: one.Endpoints, Prefix: newer}); !errors.Is(err, state.ErrNewerFormat) {
		t.Fatalf("Open of a newer layout: %v, want ErrNewerFormat", err)
	}
}
