package etcdstate_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/etcdstate"
)

// replicas returns n replicas of one prefix with a 1s lease TTL, closed
// when t ends.
func replicas(t *testing.T, prefix string, names ...string) []*etcdstate.Replica {
	t.Helper()
	var rs []*etcdstate.Replica
	for _, n := range names {
		r, err := etcdstate.NewReplica(etcdstate.Options{Endpoints: one.Endpoints, Prefix: prefix}, n, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		rs = append(rs, r)
	}
	return rs
}

// TestElectionOneLeader: of three replicas campaigning at once exactly
// one leads, Leader names it, and when it ends its term another leads.
func TestElectionOneLeader(t *testing.T) {
	prefix := newPrefix()
	if _, err := etcdstate.Leader(etcdstate.Options{Endpoints: one.Endpoints, Prefix: prefix}); !errors.Is(err, etcdstate.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
	}
	rs := replicas(t, prefix, "a", "b", "c")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	terms := make(chan *etcdstate.Term, len(rs))
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			term, err := r.Campaign(ctx, etcdstate.Advert{Workers: r.Name() + ":9000"})
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("campaign %s: %v", r.Name(), err)
				}
				return
			}
			terms <- term
		}()
	}
	first := <-terms
	select {
	case second := <-terms:
		t.Fatalf("two leaders at once: %s and %s", first.Advert.Name, second.Advert.Name)
	case <-time.After(500 * time.Millisecond):
	}
	got, err := rs[0].Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != first.Advert.Name || got.Workers != first.Advert.Name+":9000" || got.Since.IsZero() {
		t.Errorf("Leader = %+v, want %s with its workers address and a Since", got, first.Advert.Name)
	}
	if err := first.End(); err != nil {
		t.Fatalf("end term: %v", err)
	}
	var second *etcdstate.Term
	select {
	case second = <-terms:
	case <-time.After(5 * time.Second):
		t.Fatal("no replica leads 5s after the leader resigned")
	}
	if second.Advert.Name == first.Advert.Name {
		t.Fatalf("%s leads again", second.Advert.Name)
	}
	if got, err := etcdstate.Leader(etcdstate.Options{Endpoints: one.Endpoints, Prefix: prefix}); err != nil || got.Name != second.Advert.Name {
		t.Errorf("Leader after the resignation = %+v, %v; want %s", got, err, second.Advert.Name)
	}
	cancel() // the third stops campaigning
	wg.Wait()
	if err := second.End(); err != nil {
		t.Fatal(err)
	}
	if _, err := etcdstate.Leader(etcdstate.Options{Endpoints: one.Endpoints, Prefix: prefix}); !errors.Is(err, etcdstate.ErrNoLeader) {
		t.Errorf("Leader after every term ended and campaigns stopped: %v, want ErrNoLeader", err)
	}
}

// TestDeposedLeaderIsFenced: a leader is paused (it stops renewing its
// lease) and another replica takes over and commits; the old leader,
// resumed, has every write refused, a small batch and one big enough
// for the batch journal alike, and the new leader's state is intact.
func TestDeposedLeaderIsFenced(t *testing.T) {
	prefix := newPrefix()
	rs := replicas(t, prefix, "a", "b")
	ctx := t.Context()
	ta, err := rs[0].Campaign(ctx, etcdstate.Advert{})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := ta.Open(etcdstate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	base, big := bigBatches()
	if err := sa.Commit(context.Background(), base); err != nil {
		t.Fatalf("leader a commits: %v", err)
	}

	ta.Pause()
	start := time.Now()
	tb, err := rs[1].Campaign(ctx, etcdstate.Advert{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("b leads %v after a stopped renewing its lease (asked 1s, etcd granted %v)", time.Since(start).Round(time.Millisecond), ta.TTL)
	sb, err := tb.Open(etcdstate.Options{})
	if err != nil {
		t.Fatalf("new leader opens the store: %v", err)
	}
	defer func() {
		if err := sb.Check(context.Background()); err != nil {
			t.Errorf("check: %v", err)
		}
		sb.Close()
		tb.End()
	}()
	r := res("bom", "r", "")
	r.Phase = converge.PhaseReady
	if err := sb.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{r}}); err != nil {
		t.Fatalf("leader b commits: %v", err)
	}
	before := snapshot(t, sb)

	// a resumes: nothing it writes lands. Its store knows the term is
	// over (its session noticed) and refuses at once.
	stale := res("bom", "r", "")
	stale.Phase = converge.PhaseFailed
	if err := sa.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{stale}}); !errors.Is(err, etcdstate.ErrFenced) {
		t.Errorf("deposed leader's commit after its term ended: %v, want ErrFenced", err)
	}
	// A write that reaches etcd before the replica notices is refused by
	// the server's fence.
	sa.IgnoreTermEnd()
	if err := sa.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{stale}}); !errors.Is(err, etcdstate.ErrFenced) {
		t.Errorf("deposed leader's small commit: %v, want ErrFenced", err)
	}
	if err := sa.Commit(context.Background(), big); !errors.Is(err, etcdstate.ErrFenced) {
		t.Errorf("deposed leader's big (journaled) commit: %v, want ErrFenced", err)
	}
	if after := snapshot(t, sb); after != before {
		t.Errorf("the deposed leader's refused writes changed the state")
	}
	assertNoJournal(t, prefix)
	select {
	case <-ta.Done():
	default:
		t.Error("the paused term is not Done")
	}
	// Its store closing must not release the new leader's lock.
	if err := sa.Close(); err != nil {
		t.Errorf("close the deposed leader's store: %v", err)
	}
	if err := sb.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{res("bom", "s", "")}}); err != nil {
		t.Errorf("leader b commits after the old store closed: %v", err)
	}
}

// TestSyncRequests: a follower's RequestSync reaches the leader's term.
func TestSyncRequests(t *testing.T) {
	prefix := newPrefix()
	rs := replicas(t, prefix, "leader", "follower")
	term, err := rs[0].Campaign(t.Context(), etcdstate.Advert{})
	if err != nil {
		t.Fatal(err)
	}
	defer term.End()
	reqs := term.SyncRequests(t.Context())
	select {
	case <-reqs:
		t.Fatal("a sync request before any was made")
	case <-time.After(200 * time.Millisecond):
	}
	if err := rs[1].RequestSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reqs:
	case <-time.After(5 * time.Second):
		t.Fatal("the leader did not hear the follower's sync request")
	}
}

func TestNewReplicaRefusesBadOptions(t *testing.T) {
	tests := []struct {
		name, replica string
		ttl           time.Duration
		wantErr       string
	}{
		{name: "no name", ttl: time.Second, wantErr: `replica name ""`},
		{name: "slash", replica: "a/b", ttl: time.Second, wantErr: `replica name "a/b"`},
		{name: "short ttl", replica: "a", ttl: 100 * time.Millisecond, wantErr: "lease TTL 100ms: want at least 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := etcdstate.NewReplica(etcdstate.Options{Endpoints: one.Endpoints, Prefix: "/x"}, tt.replica, tt.ttl)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
