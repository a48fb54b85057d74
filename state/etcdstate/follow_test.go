package etcdstate_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/etcdtest"
)

// TestFollowThroughALeaderlessCluster: etcd cancels a watch made
// WithRequireLeader when its member loses the cluster's leader, and
// clientv3 does not make it again (nor one cancelled for an auth token
// the member refuses, which is how an operator's `converge do` lost its
// reply on a loaded machine). A plain watch then ends; follow watches
// again once there is a leader and delivers every event after its
// revision once, in order.
func TestFollowThroughALeaderlessCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-member etcd and stops two of its members")
	}
	cluster := etcdtest.Start(t, etcdtest.Options{Members: 3, ElectionMs: 500})
	ctx := t.Context()
	// One member's client: it stays on the member left without a leader.
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints[:1], DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put, err := cli.Put(ctx, "/f/k", "zero")
	if err != nil {
		t.Fatal(err)
	}
	fctx, fcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer fcancel()
	plain := cli.Watch(clientv3.WithRequireLeader(fctx), "/f/", clientv3.WithPrefix(), clientv3.WithRev(put.Header.Revision+1))
	wc := etcdstate.Follow(fctx, cli, "/f/", put.Header.Revision+1, clientv3.WithPrefix())
	var got []string
	next := func() {
		t.Helper()
		resp, ok := <-wc
		if !ok || resp.Err() != nil {
			t.Fatalf("follow ended after %q: %v (open %v)", got, resp.Err(), ok)
		}
		for _, ev := range resp.Events {
			got = append(got, string(ev.Kv.Value))
		}
	}
	if _, err := cli.Put(ctx, "/f/k", "one"); err != nil {
		t.Fatal(err)
	}
	next()

	cluster.StopMember(1)
	cluster.StopMember(2)
	// The control: the plain watch ends once member 0 has no leader.
	for resp := range plain {
		if resp.Err() != nil {
			t.Logf("the plain watch: %v", resp.Err())
		}
	}
	for _, i := range []int{1, 2} {
		if err := cluster.StartMember(i); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []string{"two", "three"} {
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := cli.Put(pctx, "/f/k", v)
		cancel()
		if err != nil {
			t.Fatalf("put %s once the members are back: %v", v, err)
		}
	}
	for len(got) < 3 {
		next()
	}
	if len(got) != 3 || got[0] != "one" || got[1] != "two" || got[2] != "three" {
		t.Fatalf("follow delivered %q, want one, two, three once each", got)
	}
}
