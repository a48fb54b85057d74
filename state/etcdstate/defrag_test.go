package etcdstate_test

import (
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/etcdtest"
)

// TestDefragmentsEachMember: 30 MB of history, compacted, leaves each
// member's file far bigger than what it uses. With DefragSlack set, the
// writer defragments one member per compaction at most every 10
// minutes, followers before the raft leader when both are due, the
// leader only after handing its leadership on; every file shrinks to
// under half, and the store reads and writes on. Without it (the
// control), no member is touched.
func TestDefragmentsEachMember(t *testing.T) {
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

	t.Run("defragments", func(t *testing.T) {
		s, c := run(t, 8<<20)
		// A compaction is physical on the member that serves it; the
		// others free their pages a moment later, so a round may find
		// no member due yet: the next round looks again.
		var ds []etcdstate.Defrag
		for i := 1; len(ds) < 3 && i <= 12; i++ {
			round(t, s, c, i)
			deadline := time.Now().Add(5 * time.Second)
			for {
				got, err := s.Defrags()
				if err != nil {
					t.Fatalf("defragment: %v (after %d)", err, len(got))
				}
				if len(got) > len(ds) || time.Now().After(deadline) {
					ds = got
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		moved := 0
		seen := map[string]bool{}
		for _, d := range ds {
			t.Logf("defragmented %s: %d → %d bytes (handed on the leadership first: %v)", d.Endpoint, d.Before, d.After, d.MovedLeader)
			if seen[d.Endpoint] {
				t.Errorf("member %s defragmented twice: %+v", d.Endpoint, ds)
			}
			seen[d.Endpoint] = true
			if d.After <= 0 || d.After > d.Before/2 {
				t.Errorf("member %s: file %d bytes before, %d after, want under half", d.Endpoint, d.Before, d.After)
			}
			if d.MovedLeader {
				moved++
			}
		}
		if len(ds) != 3 {
			t.Fatalf("%d defragmentations after 12 rounds, want one of each member: %+v", len(ds), ds)
		}
		// The raft leader is one of the three: it handed its leadership
		// on before it was blocked (once; a moved leadership may come
		// back to a member defragmented already, never to one due).
		if moved < 1 {
			t.Errorf("no defragmentation handed on the leadership first: %+v", ds)
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
