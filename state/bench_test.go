package state_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	bolt "go.etcd.io/bbolt"
)

// The benchmarks below measure the store against raw bbolt on the same
// disk in the same run. Run: go test -run '^$' -bench . -benchtime 3x ./state/

// benchValue is a value the size of a stored resource (~500 bytes).
var benchValue = func() []byte {
	r := lifeResource("vpc", "team-00001", "bom/classic")
	r.Status = json.RawMessage(`{"vpc_id":"vpc-0123456789abcdef0","region":"eu-west-1"}`)
	v, _ := json.Marshal(r)
	return v
}()

// rawPuts commits txns transactions of perTxn puts each to a fresh bbolt
// file with fsync and returns the elapsed time.
func rawPuts(tb testing.TB, txns, perTxn int) time.Duration {
	db, err := bolt.Open(filepath.Join(tb.TempDir(), "raw.db"), 0o600, &bolt.Options{FreelistType: bolt.FreelistMapType})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	start := time.Now()
	n := 0
	for range txns {
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			for range perTxn {
				n++
				if err := b.Put(fmt.Appendf(nil, "vpc/team-%08d", n), benchValue); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	return time.Since(start)
}

// BenchmarkBoltBaseline is raw bbolt with fsync: one put per transaction
// (the cost of committing each write alone) and 1,000 per transaction.
func BenchmarkBoltBaseline(b *testing.B) {
	for _, perTxn := range []int{1, 1000} {
		b.Run(fmt.Sprintf("puts=%d", perTxn), func(b *testing.B) {
			d := rawPuts(b, b.N, perTxn)
			b.ReportMetric(float64(b.N)/d.Seconds(), "txn/s")
			b.ReportMetric(float64(b.N*perTxn)/d.Seconds(), "puts/s")
		})
	}
}

// cpuTime returns the user and system CPU time this process has used:
// unlike wall time, it barely moves when other processes load the machine.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

const (
	lifeResources = 5400
	lifeBatch     = 500
)

func lifeResource(kind, name string, owner converge.ID) *converge.Resource {
	return &converge.Resource{
		UID: "6f1c2a9e-" + kind + "-" + name, Kind: kind, KindVersion: 1, Name: name,
		Declared: json.RawMessage(`{"cidr":"10.12.0.0/16","team":"` + name + `","tags":{"cost-center":"platform"}}`),
		Spec:     json.RawMessage(`{"cidr":"10.12.0.0/16","team":"` + name + `","tags":{"cost-center":"platform"}}`),
		Phase:    converge.PhasePending, Reason: "waiting for dependencies", Generation: 1,
		Owner: owner, Origin: converge.OriginComposed, CreatedAt: t0, UpdatedAt: t0,
	}
}

// classicGraph returns n resources shaped like the classic BOM: a root;
// networking domains with a tgw and its host account (tgw → account); and
// teams with account, vpc (vpc → account, flowing account_id) and route
// (route → vpc, route → tgw). Everything but the root is owned by it.
func classicGraph(n int) ([]*converge.Resource, []converge.Edge) {
	const root = converge.ID("bom/classic")
	rs := []*converge.Resource{lifeResource("bom", "classic", "")}
	var es []converge.Edge
	flow := func(c, p converge.ID, f string) converge.Edge {
		return converge.Edge{Consumer: c, Producer: p, Flows: []converge.ValueFlow{{From: f, To: f}}}
	}
	const domains = 6
	for d := range domains {
		tgw, host := fmt.Sprintf("net-%d", d), fmt.Sprintf("net-%d-host", d)
		rs = append(rs, lifeResource("tgw", tgw, root), lifeResource("account", host, root))
		es = append(es, flow(converge.NewID("tgw", tgw), converge.NewID("account", host), "account_id"))
	}
	for team := 0; len(rs) < n; team++ {
		name := fmt.Sprintf("team-%05d", team)
		acct, vpc, route := converge.NewID("account", name), converge.NewID("vpc", name), converge.NewID("route", name)
		rs = append(rs, lifeResource("account", name, root))
		if len(rs) < n {
			rs = append(rs, lifeResource("vpc", name, root))
			es = append(es, flow(vpc, acct, "account_id"))
		}
		if len(rs) < n {
			rs = append(rs, lifeResource("route", name, root))
			es = append(es, flow(route, vpc, "vpc_id"), flow(route, converge.NewID("tgw", fmt.Sprintf("net-%d", team%domains)), "tgw_id"))
		}
	}
	return rs, es
}

// lifecycle commits the life of rs: created (with edges) in batches of
// lifeBatch, then dispatched (Running, leased), then Ready with a status,
// one event per resource per step; each batch shuffled.
func lifecycle(b *testing.B, s *state.Store, rs []*converge.Resource, es []converge.Edge, skipDispatch bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	byConsumer := map[converge.ID][]converge.Edge{}
	for _, e := range es {
		byConsumer[e.Consumer] = append(byConsumer[e.Consumer], e)
	}
	steps := []struct {
		event  string
		change func(r *converge.Resource)
	}{
		{"Created", func(r *converge.Resource) {}},
		{"Dispatched", func(r *converge.Resource) {
			r.Phase, r.Reason = converge.PhaseRunning, ""
			r.Lease = &converge.Lease{TaskID: "task-" + r.UID, Reaction: "reconcile", Worker: "classic-1", Expires: t0.Add(time.Minute)}
		}},
		{"Ready", func(r *converge.Resource) {
			r.Phase, r.Lease, r.ObservedGeneration = converge.PhaseReady, nil, 1
			r.Status = json.RawMessage(`{"id":"` + r.Name + `-0123456789abcdef","region":"eu-west-1"}`)
		}},
	}
	for _, step := range steps {
		if skipDispatch && step.event == "Dispatched" {
			continue
		}
		for i := 0; i < len(rs); i += lifeBatch {
			batch := &converge.Batch{}
			for _, r := range rs[i:min(i+lifeBatch, len(rs))] {
				c := *r
				step.change(&c)
				*r = c
				batch.Resources = append(batch.Resources, &c)
				batch.Events = append(batch.Events, converge.Event{Time: t0, Resource: c.ID(), Type: step.event, Message: string(c.Phase)})
				if step.event == "Created" {
					batch.Edges = append(batch.Edges, byConsumer[c.ID()]...)
				}
			}
			// The scheduler's batches are in no particular order.
			rng.Shuffle(len(batch.Resources), func(i, j int) {
				batch.Resources[i], batch.Resources[j] = batch.Resources[j], batch.Resources[i]
			})
			rng.Shuffle(len(batch.Edges), func(i, j int) { batch.Edges[i], batch.Edges[j] = batch.Edges[j], batch.Edges[i] })
			if err := s.Commit(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkCommitLifecycle drives 5,400 classic-shaped resources from
// created to Ready through Commit, in batches of 500, and compares the
// rates with raw bbolt measured in the same run (100 one-put transactions
// and 30 thousand-put transactions, fsync on). Variants: fsync off, and a
// graph without edges (what the resource rows and owner index alone cost),
// bbolt's default page fill of 0.5 instead of the store's 0.9, and two
// writes per resource (created, Ready: the scheduler writes no lease
// before dispatch) instead of three.
func BenchmarkCommitLifecycle(b *testing.B) {
	rawTxnRate := 100 / rawPuts(b, 100, 1).Seconds()
	rawPutRate := 30 * 1000 / rawPuts(b, 30, 1000).Seconds()
	for _, v := range []struct {
		name          string
		noSync, edges bool
		fill          float64 // page fill; 0 keeps the store's
		skipDispatch  bool    // two writes: created, Ready
	}{
		{name: "fsync=true/edges=true", edges: true},
		{name: "fsync=true/edges=false"},
		{name: "fsync=false/edges=true", noSync: true, edges: true},
		{name: "fsync=true/edges=true/fill=0.5", edges: true, fill: 0.5},
		{name: "fsync=true/edges=true/writes=2", edges: true, skipDispatch: true},
	} {
		b.Run(v.name, func(b *testing.B) {
			if v.fill != 0 {
				defer state.SetFillPercent(state.SetFillPercent(v.fill))
			}
			var total state.Stats
			var elapsed, cpu time.Duration
			for range b.N {
				b.StopTimer()
				rs, es := classicGraph(lifeResources)
				if !v.edges {
					es = nil
				}
				s, err := state.Open(b.TempDir(), state.Options{NoSync: v.noSync})
				if err != nil {
					b.Fatal(err)
				}
				start, cpu0 := time.Now(), cpuTime(b)
				b.StartTimer()
				lifecycle(b, s, rs, es, v.skipDispatch)
				b.StopTimer()
				elapsed += time.Since(start)
				cpu += cpuTime(b) - cpu0
				st := s.Stats()
				total.Commits += st.Commits
				total.Puts += st.Puts
				total.Bytes += st.Bytes
				total.PageBytes += st.PageBytes
				if err := s.Check(context.Background()); err != nil {
					b.Fatal(err)
				}
				s.Close()
				b.StartTimer()
			}
			n := float64(b.N * lifeResources)
			rate := n / elapsed.Seconds()
			b.ReportMetric(float64(total.Puts)/n, "puts/resource")
			b.ReportMetric(float64(total.Commits)/n, "commits/resource")
			b.ReportMetric(float64(total.Bytes)/n, "bytes/resource")
			b.ReportMetric(float64(total.PageBytes)/n, "page_bytes/resource")
			b.ReportMetric(rate, "resources/s")
			b.ReportMetric(float64(cpu.Microseconds())/n, "cpu_us/resource")
			b.ReportMetric(float64(total.Puts)/elapsed.Seconds(), "puts/s")
			b.ReportMetric(rawPutRate, "raw_puts/s")
			b.ReportMetric(rawTxnRate, "raw_txn/s")
		})
	}
}

// BenchmarkLoad measures Load of a store holding 5,400 Ready resources.
func BenchmarkLoad(b *testing.B) {
	s, err := state.Open(b.TempDir(), state.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rs, es := classicGraph(lifeResources)
	lifecycle(b, s, rs, es, false)
	b.ResetTimer()
	for range b.N {
		snap, err := s.Load(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if len(snap.Resources) != lifeResources {
			b.Fatalf("loaded %d resources, want %d", len(snap.Resources), lifeResources)
		}
	}
}

// BenchmarkEncodeResource is the cost of encoding one resource value:
// the store's own encoder against encoding/json.
func BenchmarkEncodeResource(b *testing.B) {
	r := lifeResource("vpc", "team-00001", "bom/classic")
	r.Status = json.RawMessage(`{"vpc_id":"vpc-0123456789abcdef0","region":"eu-west-1"}`)
	r.Lease = &converge.Lease{TaskID: "task-1", Reaction: "reconcile", Worker: "classic-1", Expires: t0}
	b.Run("store", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := state.EncodeResource(r, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := json.Marshal(r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEventsOfOne reads one resource's 5 events among a full event
// log (200,000 events, the default MaxEvents, in chunks of 100): what
// `converge events KIND/NAME` costs on a busy store.
func BenchmarkEventsOfOne(b *testing.B) {
	s, err := state.Open(b.TempDir(), state.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for c := range 2000 {
		var batch converge.Batch
		for i := range 100 {
			id := converge.NewID("vpc", fmt.Sprintf("team-%05d", c*100+i))
			if c%400 == 0 && i == 0 {
				id = "vpc/the-one"
			}
			batch.Events = append(batch.Events, converge.Event{Resource: id, Type: "Ready", Message: "reconcile ok"})
		}
		if err := s.Commit(context.Background(), &batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		evs, err := s.Events(context.Background(), "vpc/the-one", 0)
		if err != nil || len(evs) != 5 {
			b.Fatalf("%d events, %v; want 5", len(evs), err)
		}
	}
}

// BenchmarkCompactTornDown grows a store to 100,000 classic-shaped
// resources (created, dispatched, Ready: three commits each, batches of
// 500, fsync off), deletes them all, then compacts it: the file's size
// before and after Compact, and how long Compact took. What is left is the
// event log (the newest MaxEvents) and the empty buckets.
func BenchmarkCompactTornDown(b *testing.B) {
	const n = 100000
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		s, err := state.Open(dir, state.Options{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		rs, es := classicGraph(n)
		lifecycle(b, s, rs, es, false)
		grown := fileBytes(b, s.Path())
		for i := len(rs); i > 0; i -= lifeBatch {
			batch := &converge.Batch{}
			for _, r := range rs[max(0, i-lifeBatch):i] {
				batch.DeletedResources = append(batch.DeletedResources, r.ID())
			}
			if err := s.Commit(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
		}
		path := s.Path()
		deleted := fileBytes(b, path)
		s.Close()
		b.StartTimer()
		start := time.Now()
		res, err := state.Compact(context.Background(), dir, state.Options{})
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		b.StopTimer()
		if res.Before != deleted {
			b.Fatalf("Compact reports %d bytes before, the file had %d", res.Before, deleted)
		}
		b.ReportMetric(float64(grown)/(1<<20), "MiB_grown")
		b.ReportMetric(float64(res.Before)/(1<<20), "MiB_before_gc")
		b.ReportMetric(float64(res.After)/(1<<20), "MiB_after_gc")
		b.ReportMetric(took.Seconds(), "gc_s")
		b.StartTimer()
	}
}

func fileBytes(b *testing.B, path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return fi.Size()
}

// BenchmarkCommitUnderBigOwner commits a batch of 8,192 new children of
// one owner, into an owner that has none yet and into one that already
// has 200,000: a batch reads only the owner-index chunks it touches, so
// the ratio stays near 1 however many children the owner has (it was the
// whole index, read at every commit of a big composition).
//
//	go test -run '^$' -bench CommitUnderBigOwner -benchtime 5x ./state/
func BenchmarkCommitUnderBigOwner(b *testing.B) {
	const batch, existing = 8192, 200_000
	batchOf := func(from int) *converge.Batch {
		bt := &converge.Batch{}
		for i := from; i < from+batch; i++ {
			bt.Resources = append(bt.Resources, lifeResource("account", fmt.Sprintf("team-%07d", i), "bom/classic"))
		}
		return bt
	}
	open := func(b *testing.B, children int) (*state.Store, int) {
		s, err := state.Open(b.TempDir(), state.Options{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		if err := s.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{lifeResource("bom", "classic", "")}}); err != nil {
			b.Fatal(err)
		}
		for n := 0; n < children; n += batch {
			if err := s.Commit(context.Background(), batchOf(n)); err != nil {
				b.Fatal(err)
			}
		}
		return s, children
	}
	var empty, big time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s0, next0 := open(b, 0)
		s1, next1 := open(b, existing)
		b0, b1 := batchOf(next0+batch*10), batchOf(next1+batch*10)
		b.StartTimer()
		t := time.Now()
		if err := s0.Commit(context.Background(), b0); err != nil {
			b.Fatal(err)
		}
		empty += time.Since(t)
		t = time.Now()
		if err := s1.Commit(context.Background(), b1); err != nil {
			b.Fatal(err)
		}
		big += time.Since(t)
	}
	b.ReportMetric(float64(empty.Milliseconds())/float64(b.N), "ms/batch-new-owner")
	b.ReportMetric(float64(big.Milliseconds())/float64(b.N), "ms/batch-200k-owner")
	b.ReportMetric(float64(big)/float64(empty), "ratio")
}
