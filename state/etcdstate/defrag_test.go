package etcdstate_test

import (
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/etcdtest"
)

// TestDefragmentsEachMemberLeaderLast: 30 MB of history, compacted,
// leaves each member's file far bigger than what it uses. With
// DefragSlack set, the writer defragments one member per compaction at
// most every 10 minutes: the two followers first, then the raft leader
// after handing its leadership on; every file shrinks, and the store
// reads and writes on. Without it (the control), no member is touched.
func TestDefragmentsEachMemberLeaderLast(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-member etcd and writes 30 MB of history")
	}
	run := func(t *testing.T, slack int64) (*etcdstate.Store, *clock) {
		cl := etcdtest.Start(t, etcdtest.Options{Members: 3, ElectionMs: 500})
		c := &clock{t: time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)}
		s, err := etcdstate.Open(etcdstate.WithClock(etcdstate.Options{Endpoints: cl.Endpoints, Prefix: "/d",
			CompactRetention: time.Minute, DefragSlack: slack}, c.now))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		cli := cl.Client(t)
		junk := strings.Repeat("j", 1<<20)
		for range 30 {
			if _, err := cli.Put(t.Context(), "/junk", junk); err != nil {
				t.Fatal(err)
			}
		}
		rewrite(t, s, 0, 10, 100)
		return s, c
	}
	// round compacts past everything before it: one defragmentation
	// may follow.
	round := func(t *testing.T, s *etcdstate.Store, c *clock, i int) {
		c.advance(11 * time.Minute)
		rewrite(t, s, i, 10, 100)
	}
	waitDefrags := func(t *testing.T, s *etcdstate.Store, n int) []etcdstate.Defrag {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			ds, err := s.Defrags()
			if err != nil {
				t.Fatalf("defragment: %v (after %d)", err, len(ds))
			}
			if len(ds) >= n {
				return ds
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d defragmentations after a minute, want %d", len(ds), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	t.Run("defragments", func(t *testing.T) {
		s, c := run(t, 1<<20)
		for i := 1; i <= 3; i++ {
			round(t, s, c, i)
			waitDefrags(t, s, i)
		}
		round(t, s, c, 4) // every file is small now: nothing more to do
		ds := waitDefrags(t, s, 3)
		seen := map[string]bool{}
		for i, d := range ds {
			if seen[d.Endpoint] {
				t.Errorf("member %s defragmented twice: %+v", d.Endpoint, ds)
			}
			seen[d.Endpoint] = true
			if d.After <= 0 || d.After > d.Before/2 {
				t.Errorf("member %s: file %d bytes before, %d after, want under half", d.Endpoint, d.Before, d.After)
			}
			if d.MovedLeader != (i == 2) {
				t.Errorf("defragmentation %d (%s) handed on the leadership: %v, want only the last (the leader last)", i, d.Endpoint, d.MovedLeader)
			}
		}
		if len(ds) != 3 {
			t.Errorf("%d defragmentations, want 3: %+v", len(ds), ds)
		}
		if _, err := s.Load(t.Context()); err != nil {
			t.Errorf("Load after the defragmentations: %v", err)
		}
	})
	t.Run("control", func(t *testing.T) {
		s, c := run(t, 0)
		for i := 1; i <= 2; i++ {
			round(t, s, c, i)
		}
		deadline := time.Now().Add(time.Minute)
		for done, err := s.Compacted(); done == 0; done, err = s.Compacted() {
			if time.Now().After(deadline) {
				t.Fatalf("no compaction after a minute (%v): the control shows nothing", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if ds, _ := s.Defrags(); len(ds) != 0 {
			t.Errorf("defragmentations without DefragSlack: %+v", ds)
		}
	})
}
