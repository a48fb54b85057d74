package etcdstate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/internal/rules"
	"github.com/convergehq/converge/state/statetest"
)

// TestConformanceSmallRequests runs the suite with transactions of at
// most 16 KiB, so every value over ~15 KiB (event chunks, big specs) is
// stored in parts, and every big batch goes through the journal.
func TestConformanceSmallRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("the suite again, every big value in parts; TestConformance covers the semantics")
	}
	statetest.Run(t, func(t *testing.T, o state.Options) state.Backend {
		return open(t, one, newPrefix(), etcdstate.Options{MaxEvents: o.MaxEvents, MaxRevisions: o.MaxRevisions, MaxTxnBytes: 16 << 10})
	})
}

// bigRoot returns a root whose spec is about n bytes, tagged.
func bigRoot(n int, tag string) *converge.Resource {
	r := res("bom", "huge", "")
	var b strings.Builder
	b.WriteString(`{"teams":[`)
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + tag + `-team"`)
	}
	b.WriteString(`]}`)
	r.Spec = json.RawMessage(b.String())
	return r
}

// TestPartsMagicValue: a small value that starts like a parts header is
// stored in parts too, so a stored value that starts like one always is
// one, and it reads back as written.
func TestPartsMagicValue(t *testing.T) {
	prefix := newPrefix()
	s := open(t, one, prefix, etcdstate.Options{})
	val := []byte(etcdstate.PartsMagic + "not a header")
	ctx := context.Background()
	if err := s.KV().Update(ctx, func(w rules.Writer) error { return w.Put(rules.Configs, []byte("magic"), val) }); err != nil {
		t.Fatal(err)
	}
	var got []byte
	if err := s.KV().View(ctx, func(r rules.Reader) error {
		v, err := r.Get(rules.Configs, []byte("magic"))
		got = bytes.Clone(v)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, val) {
		t.Errorf("read %q, want %q", got, val)
	}
	raw, err := one.Client(t).Get(ctx, prefix+"/c/magic")
	if err != nil || len(raw.Kvs) != 1 {
		t.Fatalf("raw read: %v, %d keys", err, len(raw.Kvs))
	}
	if bytes.Equal(raw.Kvs[0].Value, val) {
		t.Error("stored as is, not in parts")
	}
	parts, err := one.Client(t).Get(ctx, prefix+"/x/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || parts.Count != 1 {
		t.Errorf("parts stored: %d, %v; want 1", parts.Count, err)
	}
	// (A config must be JSON: the value goes before the store's check.)
	if err := s.KV().Update(ctx, func(w rules.Writer) error { return w.Delete(rules.Configs, []byte("magic")) }); err != nil {
		t.Fatal(err)
	}
}

// TestPartsJournalCrash: a batch replacing a big row whose journal stops
// after its commit point leaves readers reading the old row whole; the
// next write finishes the batch, and readers read the new row whole,
// the old one's parts gone.
func TestPartsJournalCrash(t *testing.T) {
	prefix := newPrefix()
	w := open(t, one, prefix, etcdstate.Options{MaxTxnBytes: 64 << 10})
	ctx := context.Background()
	old, next := bigRoot(1<<20, "old"), bigRoot(1<<20, "new")
	if err := w.Commit(ctx, &converge.Batch{Resources: []*converge.Resource{old}}); err != nil {
		t.Fatal(err)
	}
	rd, err := etcdstate.Open(etcdstate.Options{Endpoints: one.Endpoints, Prefix: prefix, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	w.SetFailAfter(3)
	if err := w.Commit(ctx, &converge.Batch{Resources: []*converge.Resource{next}}); err != nil {
		t.Fatalf("Commit past its commit point: %v", err)
	}
	specIs := func(who string, want *converge.Resource) {
		t.Helper()
		got, err := rd.Resource(ctx, "bom/huge")
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		if string(got.Spec) != string(want.Spec) {
			t.Fatalf("%s: a spec of %d bytes starting %.20s, want %.20s", who, len(got.Spec), got.Spec, want.Spec)
		}
	}
	specIs("mid-journal", old)
	w.SetFailAfter(0)
	if err := w.Commit(ctx, &converge.Batch{Events: []converge.Event{{Resource: "bom/huge", Type: "T"}}}); err != nil {
		t.Fatal(err)
	}
	specIs("after the journal", next)
	assertNoJournal(t, prefix)
}

// TestCheckFindsStrayPart: a part no header names is a problem Check
// reports, naming the value's key.
func TestCheckFindsStrayPart(t *testing.T) {
	prefix := newPrefix()
	s, err := etcdstate.Open(etcdstate.Options{Endpoints: one.Endpoints, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.Commit(ctx, &converge.Batch{Resources: []*converge.Resource{bigRoot(3<<20, "a")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := one.Client(t).Put(ctx, prefix+"/x/r/bom/huge\x000123456789abcdef", "stray"); err != nil {
		t.Fatal(err)
	}
	err = s.Check(ctx)
	if err == nil || !strings.Contains(err.Error(), "r/bom/huge: a stored part") {
		t.Fatalf("Check with a stray part: %v, want it named", err)
	}
}

// TestPartsEditRewritesFew: a big row changed in a few bytes (a root's
// rollup, its phase) writes its header and the parts around the change,
// not all of its megabytes: parts are cut where the content says and
// named by their hash.
func TestPartsEditRewritesFew(t *testing.T) {
	prefix := newPrefix()
	s := open(t, one, prefix, etcdstate.Options{})
	ctx := context.Background()
	root := res("bom", "huge", "")
	var b strings.Builder
	b.WriteString(`{"teams":[`)
	for i := 0; b.Len() < 4<<20; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"team-%07d","cidr":"10.%d.%d.0/24"}`, i, i/256%256, i%256)
	}
	b.WriteString(`]}`)
	root.Spec = json.RawMessage(b.String())
	if err := s.Commit(ctx, &converge.Batch{Resources: []*converge.Resource{root}}); err != nil {
		t.Fatal(err)
	}
	keys := func() map[string]bool {
		resp, err := one.Client(t).Get(ctx, prefix+"/x/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, kv := range resp.Kvs {
			out[string(kv.Key)] = true
		}
		return out
	}
	before, bytesBefore := keys(), s.Stats().Bytes
	next := *root
	next.Phase, next.Status = converge.PhaseReady, json.RawMessage(`{"rollup":{"ready":1,"total":1}}`)
	if err := s.Commit(ctx, &converge.Batch{Resources: []*converge.Resource{&next}}); err != nil {
		t.Fatal(err)
	}
	after, written := keys(), s.Stats().Bytes-bytesBefore
	kept := 0
	for k := range after {
		if before[k] {
			kept++
		}
	}
	t.Logf("%d parts, %d kept, %d bytes written for the edit", len(after), kept, written)
	if len(after) < 8 || kept < len(after)-2 || written > 1<<20 {
		t.Errorf("an edit of a 4 MB row: %d of %d parts kept, %d bytes written; want all but one or two kept, under 1 MiB written", kept, len(after), written)
	}
	got, err := s.Resource(ctx, "bom/huge")
	if err != nil || got.Phase != converge.PhaseReady || string(got.Spec) != string(root.Spec) {
		t.Fatalf("read back: %v", err)
	}
}
