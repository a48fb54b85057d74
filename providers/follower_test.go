package providers_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/providers/sdk"
)

// listenAt listens on addr ("127.0.0.1:0" for a new port), retrying a
// moment while a closed server's port is released.
func listenAt(t *testing.T, addr string) net.Listener {
	t.Helper()
	var err error
	for range 100 {
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			return l
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("listen %s: %v", addr, err)
	return nil
}

// serveFollower refuses workers on l, naming leader.
func serveFollower(t *testing.T, l net.Listener, leader providers.Leader) *providers.Follower {
	f := providers.NewFollower(providers.ServerOptions{Token: testToken}, func() providers.Leader { return leader })
	go f.Serve(l)
	t.Cleanup(f.Close)
	return f
}

// serveLeader serves the worker protocol on l.
func serveLeader(t *testing.T, l net.Listener) *providers.Server {
	s := providers.NewServer(providers.ServerOptions{Token: testToken})
	go s.Serve(l)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestFollowerRefusesNamingLeader: a follower checks the token first,
// then refuses every worker with Unavailable, naming the leader and its
// workers address in the trailer.
func TestFollowerRefusesNamingLeader(t *testing.T) {
	l := listenAt(t, "127.0.0.1:0")
	serveFollower(t, l, providers.Leader{Name: "cp-2", Workers: "10.0.0.2:9090"})

	bad := rawStream(t, l.Addr().String(), "wrong")
	bad.Send(register("w", 1))
	if _, err := bad.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Errorf("wrong token: %v, want Unauthenticated", err)
	}
	s := rawStream(t, l.Addr().String(), testToken)
	s.Send(register("w", 1))
	_, err := s.Recv()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "the leader is cp-2") || !strings.Contains(err.Error(), "10.0.0.2:9090") {
		t.Errorf("refusal: %v, want Unavailable naming cp-2 at 10.0.0.2:9090", err)
	}
	if got := s.Trailer().Get(sdk.LeaderTrailer); len(got) != 1 || got[0] != "10.0.0.2:9090" {
		t.Errorf("trailer %s = %q, want the leader's workers address", sdk.LeaderTrailer, got)
	}

	l2 := listenAt(t, "127.0.0.1:0")
	serveFollower(t, l2, providers.Leader{})
	s = rawStream(t, l2.Addr().String(), testToken)
	s.Send(register("w", 1))
	if _, err := s.Recv(); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no replica leads") {
		t.Errorf("refusal without a leader: %v", err)
	}
}

// TestWorkerFollowsLeader: a worker given two replicas' addresses
// connects to the leader wherever it is, through a follower's refusal,
// and when the leadership moves to the other replica (the old leader's
// server closes, a follower takes its port) it follows and serves there.
func TestWorkerFollowsLeader(t *testing.T) {
	la, lb := listenAt(t, "127.0.0.1:0"), listenAt(t, "127.0.0.1:0")
	a, b := la.Addr().String(), lb.Addr().String()
	leaderA := serveLeader(t, la)
	followerB := serveFollower(t, lb, providers.Leader{Name: "a", Workers: a})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sdk.Connect(ctx, sdk.Options{Addr: b + "," + a, Token: testToken, Name: "roamer",
			Logger: slog.New(slog.DiscardHandler)}, noop("vpc", 1))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	waitFor(t, 10*time.Second, "the worker on leader a", func() bool { return hasWorker(leaderA, "roamer") })
	if err := leaderA.Dispatch(ctx, task("vpc", 1, "reconcile")); err != nil {
		t.Fatal(err)
	}
	if r := result(t, leaderA, 5*time.Second); r.Outcome != converge.OutcomeOK {
		t.Errorf("result on a: %+v", r)
	}

	// b wins: a's server goes, a refuses naming b, b serves.
	start := time.Now()
	leaderA.Close()
	followerB.Close()
	serveFollower(t, listenAt(t, a), providers.Leader{Name: "b", Workers: b})
	leaderB := serveLeader(t, listenAt(t, b))
	waitFor(t, 10*time.Second, "the worker on leader b", func() bool { return hasWorker(leaderB, "roamer") })
	t.Logf("the worker followed the leader in %v", time.Since(start).Round(time.Millisecond))
	if err := leaderB.Dispatch(ctx, task("vpc", 1, "reconcile")); err != nil {
		t.Fatal(err)
	}
	if r := result(t, leaderB, 5*time.Second); r.Outcome != converge.OutcomeOK {
		t.Errorf("result on b: %+v", r)
	}
}

// TestWorkerAddressList: a list of addresses takes host:port entries
// only; a unix socket is one local control plane.
func TestWorkerAddressList(t *testing.T) {
	for _, addr := range []string{"a:1,,b:2", "unix:///x.sock,a:1"} {
		err := sdk.Connect(context.Background(), sdk.Options{Addr: addr, Token: testToken}, noop("vpc", 1))
		if err == nil || !strings.Contains(err.Error(), "want host:port,host:port") {
			t.Errorf("Connect(%q): %v, want the list refused", addr, err)
		}
	}
}
