package etcdstate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/etcdtest"
)

// clock is a test's clock: it moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// rewrite commits rows rows of about size bytes each, their content
// depending on round, and returns the revision after.
func rewrite(t *testing.T, s *etcdstate.Store, round, rows, size int) {
	t.Helper()
	b := &converge.Batch{}
	for i := range rows {
		r := res("vpc", fmt.Sprintf("v%03d", i), "")
		r.Spec = json.RawMessage(fmt.Sprintf(`{"round":%d,"blob":"%s"}`, round, strings.Repeat("x", size)))
		b.Resources = append(b.Resources, r)
	}
	if err := s.Commit(context.Background(), b); err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
}

// waitCompacted waits until the writer has compacted etcd to at least
// rev, then checks that etcd refuses a read below it.
func waitCompacted(t *testing.T, s *etcdstate.Store, cli *clientv3.Client, key string, rev int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		done, err := s.Compacted()
		if err != nil {
			t.Fatalf("compaction: %v", err)
		}
		if done >= rev {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("compacted to %d after 10s, want %d", done, rev)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := cli.Get(t.Context(), key, clientv3.WithRev(rev-1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("read at revision %d, below the compaction: %v, want ErrCompacted", rev-1, err)
	}
}

// TestCompactsHistory: the writer compacts etcd to the revision it wrote
// CompactRetention ago, not sooner, and a reader of the present reads on.
func TestCompactsHistory(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	prefix := newPrefix()
	s := open(t, one, prefix, etcdstate.WithClock(etcdstate.Options{CompactRetention: time.Minute}, c.now))
	cli := one.Client(t)
	rewrite(t, s, 0, 10, 100)
	first, err := cli.Get(t.Context(), prefix+"/r/vpc/v000")
	if err != nil {
		t.Fatal(err)
	}
	r0 := first.Header.Revision
	c.advance(30 * time.Second)
	rewrite(t, s, 1, 10, 100)
	if done, _ := s.Compacted(); done != 0 {
		t.Fatalf("compacted to %d after 30s of a 1m retention", done)
	}
	c.advance(31 * time.Second)
	rewrite(t, s, 2, 10, 100)
	waitCompacted(t, s, cli, prefix+"/r/vpc/v000", r0)
	if _, err := cli.Get(t.Context(), prefix+"/r/vpc/v000", clientv3.WithRev(r0)); err != nil {
		t.Errorf("read at the revision compacted to: %v", err)
	}
	if _, err := s.Load(context.Background()); err != nil {
		t.Errorf("Load after the compaction: %v", err)
	}
}

// TestCompactionKeepsQuota: rewriting 2 MB of rows forty times (80 MB,
// twice that through the journal) on members with a 48 MiB quota: with
// the writer's compaction, no write fails on "database space exceeded"
// and the database stays under 32 MiB (its pages are reused; bbolt's
// file grows a little by fragmentation, which etcdctl defrag returns);
// without it (the control), writes fail on the quota.
func TestCompactionKeepsQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two etcd members and writes 160 MB")
	}
	const quota = 48 << 20
	run := func(t *testing.T, retention time.Duration) ([]int64, error) {
		cl := etcdtest.Start(t, etcdtest.Options{QuotaBackendBytes: quota})
		c := &clock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
		s, err := etcdstate.Open(etcdstate.WithClock(etcdstate.Options{Endpoints: cl.Endpoints, Prefix: "/q", CompactRetention: retention}, c.now))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		cli := cl.Client(t)
		var sizes []int64
		for round := range 40 {
			b := &converge.Batch{}
			for i := range 20 {
				r := res("vpc", fmt.Sprintf("v%03d", i), "")
				r.Spec = json.RawMessage(fmt.Sprintf(`{"round":%d,"blob":"%s"}`, round, strings.Repeat("x", 100<<10)))
				b.Resources = append(b.Resources, r)
			}
			if err := s.Commit(context.Background(), b); err != nil {
				return sizes, fmt.Errorf("round %d: %w", round, err)
			}
			c.advance(time.Minute)
			st, err := cli.Status(t.Context(), cl.Endpoints[0])
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, st.DbSize)
		}
		return sizes, nil
	}
	t.Run("compacted", func(t *testing.T) {
		sizes, err := run(t, time.Minute)
		if err != nil {
			t.Fatalf("with compaction: %v (database sizes %v)", err, sizes)
		}
		if last := sizes[len(sizes)-1]; last > 32<<20 {
			t.Errorf("database of %d bytes after 40 rounds, want under 32 MiB (sizes %v)", last, sizes)
		}
	})
	t.Run("control", func(t *testing.T) {
		sizes, err := run(t, -1)
		if err == nil || !strings.Contains(err.Error(), "database space exceeded") {
			t.Fatalf("without compaction: %v, want database space exceeded (sizes %v)", err, sizes)
		}
	})
}
