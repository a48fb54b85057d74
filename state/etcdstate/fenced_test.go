package etcdstate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/etcdstate"
)

// TestFencedWriteEndsTerm: a leader whose lease etcd has ended (revoked
// here; expired behind a pause or a partition) learns it from its first
// refused write, before its session's keep-alive says so: the write is
// ErrFenced and the term is Done at once. End then revokes nothing that
// leads, and the replica can campaign again.
func TestFencedWriteEndsTerm(t *testing.T) {
	prefix := newPrefix()
	rs := replicas(t, prefix, "a")
	ta, err := rs[0].Campaign(t.Context(), etcdstate.Advert{})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := ta.Open(etcdstate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	cli := one.Client(t)
	resp, err := cli.Get(t.Context(), prefix+"/election/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("read a's election key: %v", err)
	}
	if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	r := res("bom", "r", "")
	r.Phase = converge.PhaseReady
	if err := sa.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{r}}); !errors.Is(err, etcdstate.ErrFenced) {
		t.Fatalf("commit after the lease was revoked: %v, want ErrFenced", err)
	}
	select {
	case <-ta.Done():
	default:
		t.Fatal("the term is not Done after its store's write was fenced")
	}
	if err := sa.Verify(context.Background()); !errors.Is(err, etcdstate.ErrFenced) {
		t.Errorf("verify after the term ended: %v, want ErrFenced", err)
	}
	if err := ta.End(); err != nil {
		t.Errorf("end the fenced term: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	tb, err := rs[0].Campaign(ctx, etcdstate.Advert{})
	if err != nil {
		t.Fatalf("campaign again after the fenced term: %v", err)
	}
	tb.End()
}
