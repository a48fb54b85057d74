package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/bench"
	convergev1 "github.com/convergehq/converge/proto/converge/v1"
	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/etcdtest"
	"github.com/convergehq/converge/sync/controlplane"
)

// getHealthz returns a replica's GET /healthz answer (0 and the error
// when it does not answer).
func getHealthz(addr string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b := new(bytes.Buffer)
	b.ReadFrom(resp.Body)
	return resp.StatusCode, strings.TrimSpace(b.String())
}

// workerAnswer is what a replica's workers listener at addr answers a
// worker that registers with token: nil once it is served (the leader),
// else the refusal (a follower's names the leader).
func workerAnswer(t *testing.T, addr, token string) error {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+token), 10*time.Second)
	defer cancel()
	stream, err := convergev1.NewControlClient(conn).Connect(ctx)
	if err != nil {
		return err
	}
	reg := &convergev1.WorkerMessage{Msg: &convergev1.WorkerMessage_Register{Register: &convergev1.Register{Name: "probe", Concurrency: 1}}}
	if err := stream.Send(reg); err != nil {
		_, err = stream.Recv()
		return err
	}
	_, err = stream.Recv()
	return err
}

// engineStopped reads how long a replica's engine took to stop after
// its term was lost from its step-down line ("stepped down: lost the
// election lease (its engine stopped in 35ms)…").
func engineStopped(t *testing.T, out string) time.Duration {
	t.Helper()
	m := regexp.MustCompile(`stepped down: lost the election lease \(its engine stopped in ([0-9.]+[a-zµ]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no step-down saying how long the engine took to stop:\n%s", out)
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatalf("step-down: engine stopped in %q: %v", m[1], err)
	}
	return d
}

// leaderLease returns the lease of the prefix's election key that leads.
func leaderLease(t *testing.T, cli *clientv3.Client, prefix string) clientv3.LeaseID {
	t.Helper()
	resp, err := cli.Get(t.Context(), prefix+"/election/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("read the leader's election key: %v", err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// TestReplicasDeposedLeaderStopsFast: two replicas on one etcd state,
// the classic example at 2,000 teams served by two external workers. In
// the middle of the converge the leader's election lease is revoked (its
// term ends while its scheduler dispatches and commits): within two
// seconds its /healthz says it follows (not 200 "leads") and it has
// stopped its engine; the other replica leads and waits for the workers,
// paused until well past its stuck grace, before any verdict; they come
// (refused by the old leader, pointed at the new one), and the root
// converges with no "no worker serves" verdict.
func TestReplicasDeposedLeaderStopsFast(t *testing.T) {
	testDeposedLeader(t, false)
}

// TestReplicasCutLeaderStopsFast is TestReplicasDeposedLeaderStopsFast
// with the leader cut off from etcd (its connections held by a proxy)
// instead of its lease revoked.
func TestReplicasCutLeaderStopsFast(t *testing.T) {
	testDeposedLeader(t, true)
}

func testDeposedLeader(t *testing.T, cut bool) {
	if testing.Short() {
		t.Skip("converges 6,124 resources on two replicas and deposes the leader mid-converge")
	}
	teams := 6000
	children := 3*teams + 116
	bom, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "classic", "resources", "bom.cue"))
	if err != nil {
		t.Fatal(err)
	}
	bom = bench.BOMTeams.ReplaceAll(bom, []byte("_teams: "+strconv.Itoa(teams)))
	cluster := etcdtest.Start(t, etcdtest.Options{ElectionMs: 1500})
	url := cluster.URL("/converge/depose")
	o, err := parseEtcdState(url, "", "", "", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	repo := replicaRepo(t, bom, true)
	env := []string{"CONVERGE_WORKER_TOKEN=depose-token"}
	names := []string{"r1", "r2"}
	procs := map[string]*proc{}
	var addrs []string
	_, member, _ := strings.Cut(cluster.Endpoints[0], "://")
	proxy := startCutProxy(t, member)
	for _, name := range names {
		u := url
		if name == "r1" {
			u = "etcd://" + proxy.Addr() + "/converge/depose"
		}
		procs[name] = startProc(t, name, env, "serve", "--replica", name, "--lease-ttl", "2s",
			"--repo", repo, "--state", u, "--listen", "127.0.0.1:0", "--workers-listen", "127.0.0.1:0", "--insecure", "--poll", "1h")
		if name == "r1" {
			waitUntil(t, 60*time.Second, "r1 leads", func() bool { a := leaderOf(o); return a.Name == "r1" && !a.Since.IsZero() })
		}
	}
	for _, name := range names {
		addrs = append(addrs, readAddr(t, filepath.Join(repo, ".converge", "replicas", name, "workers.addr")))
	}
	httpAddr := map[string]string{}
	for _, name := range names {
		httpAddr[name] = readAddr(t, filepath.Join(repo, ".converge", "replicas", name, "http.addr"))
	}
	var workers []*proc
	for i := range 2 {
		workers = append(workers, startProc(t, fmt.Sprintf("worker-%d", i), []string{"CONVERGE_ADDR=" + strings.Join(addrs, ","),
			"CONVERGE_TOKEN=depose-token", fmt.Sprintf("CONVERGE_WORKER_NAME=external-%d", i),
			"CONVERGE_STATE_DIR=" + t.TempDir(), "CONVERGE_CONCURRENCY=64", "FAKE_WORK_DELAY=20ms"}, "worker", "classic"))
	}
	st, err := controlplane.OpenEtcd(o, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	root := converge.ID("classicbom/classic")
	var first etcdstate.Advert
	waitUntil(t, 60*time.Second, "a leader", func() bool { first = leaderOf(o); return first.Name != "" && !first.Since.IsZero() })
	next := map[string]string{"r1": "r2", "r2": "r1"}[first.Name]
	waitUntil(t, 3*time.Minute, "the root's children being stored", func() bool {
		n, _ := st.ChildCount(context.Background(), root)
		return n >= 1
	})
	if _, c := rootRollup(o); c.Ready >= children {
		t.Fatalf("the converge finished before the leader was deposed: %+v", c)
	}
	cli := cluster.Client(t)
	lease := leaderLease(t, cli, o.Prefix)
	old := procs[first.Name]
	if !cut {
		// The workers come late to the new leader: paused now, resumed
		// well past its stuck grace.
		for _, w := range workers {
			if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		}
	}
	if cut {
		proxy.setCut(true)
	} else if _, err := cli.Revoke(t.Context(), lease); err != nil {
		t.Fatalf("revoke the leader's lease: %v", err)
	}
	deposed := time.Now()
	// The term ends at once when its lease is revoked; when cut off, once
	// the lease was not renewed for its TTL (etcd grants at least 3s
	// with a 1.5s election timeout).
	ends := time.Duration(0)
	if cut {
		ends = 3 * time.Second
	}
	// Its /healthz says it follows from the moment it knows.
	var code int
	var body string
	waitUntil(t, ends+10*time.Second, first.Name+"'s /healthz to stop saying it leads", func() bool {
		code, body = getHealthz(httpAddr[first.Name])
		return !strings.Contains(body, "leads")
	})
	t.Logf("%s's /healthz %v after it was deposed: %d %q", first.Name, time.Since(deposed).Round(time.Millisecond), code, body)
	if d := time.Since(deposed); d > ends+2*time.Second {
		t.Errorf("%s's /healthz said it leads for %v after its term ended", first.Name, (d - ends).Round(time.Millisecond))
	}
	waitUntil(t, 60*time.Second, first.Name+" to step down", func() bool {
		return strings.Contains(old.output(), "serve: replica "+first.Name+" stepped down")
	})
	t.Logf("%s stepped down %v after it was deposed", first.Name, time.Since(deposed).Round(time.Millisecond))
	if took := engineStopped(t, old.output()); took > 2*time.Second {
		t.Errorf("%s's engine stopped %v after its term ended, want within 2s", first.Name, took)
	} else {
		t.Logf("%s's engine stopped %v after it saw its term end", first.Name, took)
	}
	// It refuses workers once it follows (pointing them at the leader,
	// when etcd answers).
	if err := workerAnswer(t, addrs[slices.Index(names, first.Name)], "depose-token"); status.Code(err) != codes.Unavailable {
		t.Errorf("a worker registering with the deposed %s: %v, want refused (Unavailable)", first.Name, err)
	} else {
		t.Logf("a worker registering with the deposed %s: %v", first.Name, err)
	}
	if cut {
		if code, body := getHealthz(httpAddr[first.Name]); code != http.StatusServiceUnavailable || !strings.Contains(body, "unreachable") {
			t.Errorf("%s's /healthz while cut off from etcd = %d %q, want 503 saying etcd is unreachable", first.Name, code, body)
		}
		if out := old.output(); !strings.Contains(out, "stepped down: lost the election lease (its engine stopped in ") || !strings.Contains(out, "): etcd (") || !strings.Contains(out, "unreachable") {
			t.Errorf("%s's step-down does not say etcd is unreachable:\n%s", first.Name, out)
		}
		proxy.restore()
	}
	var second etcdstate.Advert
	waitUntil(t, 30*time.Second, "the other replica leads", func() bool {
		second = leaderOf(o)
		return second.Name == next && !second.Since.IsZero()
	})
	if !cut {
		time.Sleep(controlplane.DefaultStuckGrace + 3*time.Second)
		if out := procs[next].output(); strings.Contains(out, "stuck") {
			t.Errorf("%s gave a verdict before its workers came:\n%s", next, out)
		}
		for _, w := range workers {
			if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitUntil(t, 5*time.Minute, "the root Ready under "+next, func() bool {
		ph, c := rootRollup(o)
		return ph == converge.PhaseReady && c.Total == children && c.Ready == children
	})
	if out := procs[next].output(); strings.Contains(out, "no worker serves") {
		t.Errorf("%s gave a verdict before its workers came:\n%s", next, out)
	}
	waitUntil(t, 30*time.Second, first.Name+" to follow "+next, func() bool {
		code, body = getHealthz(httpAddr[first.Name])
		return code == http.StatusOK && body == "ok: replica "+first.Name+" follows "+next
	})
	if l := leaderOf(o); l.Name != next {
		t.Errorf("after %s rejoined, the leader is %q, want %s", first.Name, l.Name, next)
	}
}

// cutProxy forwards TCP connections to an etcd member until cut: then
// every byte either way is held (a partition: connections stay open,
// nothing crosses) until restore lets them through again.
type cutProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex // guards cut
	cond   *sync.Cond
	cut    bool
}

// startCutProxy forwards 127.0.0.1:PORT to target (HOST:PORT) until t
// ends.
func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, target: target}
	p.cond = sync.NewCond(&p.mu)
	go p.accept()
	t.Cleanup(func() { p.restore(); l.Close() })
	return p
}

// Addr is the proxy's HOST:PORT.
func (p *cutProxy) Addr() string { return p.l.Addr().String() }

func (p *cutProxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		d, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		go p.pipe(d, c)
		go p.pipe(c, d)
	}
}

// pipe copies src to dst, holding what it read while the proxy is cut.
func (p *cutProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.cut {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// setCut cuts (true) or restores (false) every connection.
func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	p.mu.Unlock()
	p.cond.Broadcast()
}

func (p *cutProxy) restore() { p.setCut(false) }

// settledRevision waits until etcd's revision has not moved for quiet
// and returns it.
func settledRevision(t *testing.T, cli *clientv3.Client, key string, quiet time.Duration) int64 {
	t.Helper()
	rev := int64(-1)
	since := time.Now()
	waitUntil(t, 60*time.Second, "etcd's revision to settle", func() bool {
		resp, err := cli.Get(t.Context(), key, clientv3.WithCountOnly())
		if err != nil {
			return false
		}
		if resp.Header.Revision != rev {
			rev, since = resp.Header.Revision, time.Now()
		}
		return time.Since(since) >= quiet
	})
	return rev
}

// changedSince returns the keys under prefix that changed after rev, up
// to etcd's current revision, from etcd's history.
func changedSince(t *testing.T, cli *clientv3.Client, prefix string, rev int64) []string {
	t.Helper()
	now, err := cli.Get(t.Context(), prefix, clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	end := now.Header.Revision
	if end <= rev {
		return nil
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var keys []string
	for resp := range cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			t.Fatalf("watch %s from revision %d: %v", prefix, rev+1, err)
		}
		for _, ev := range resp.Events {
			keys = append(keys, fmt.Sprintf("%s %s@%d", ev.Type, ev.Kv.Key, ev.Kv.ModRevision))
		}
		if resp.Header.Revision >= end {
			break
		}
	}
	return keys
}

// TestReplicasPausedLeaderStaysFenced: a leader paused (SIGSTOP) in the
// middle of a converge past its lease; the other replica takes over and
// goes quiet (the workers, still a's, are paused too once they have sent
// a the results of what it dispatched). Resumed (SIGCONT), the old
// leader reads those results and tries to commit them: nothing lands,
// etcd's history after the SIGCONT holding no change under the state's
// prefix but its new candidacy (without the fences the same run records
// the results). It rejoins as a follower (its /healthz and `converge leader`
// say so), its workers, resumed, move to the new leader, which
// converges the root.
func TestReplicasPausedLeaderStaysFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("converges 6,124 resources on two replicas and pauses the leader past its lease")
	}
	teams := 2000
	children := 3*teams + 116
	bom, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "classic", "resources", "bom.cue"))
	if err != nil {
		t.Fatal(err)
	}
	bom = bench.BOMTeams.ReplaceAll(bom, []byte("_teams: "+strconv.Itoa(teams)))
	cluster := etcdtest.Start(t, etcdtest.Options{ElectionMs: 1500})
	url := cluster.URL("/converge/paused")
	o, err := parseEtcdState(url, "", "", "", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	prefix := strings.TrimSuffix(o.Prefix, "/") + "/"
	repo := replicaRepo(t, bom, true)
	env := []string{"CONVERGE_WORKER_TOKEN=paused-token"}
	procs := map[string]*proc{}
	var addrs []string
	names := []string{"a", "b"}
	for _, name := range names {
		procs[name] = startProc(t, name, env, "serve", "--replica", name, "--lease-ttl", "2s",
			"--repo", repo, "--state", url, "--listen", "127.0.0.1:0", "--workers-listen", "127.0.0.1:0", "--insecure", "--poll", "1h")
		if name == "a" {
			waitUntil(t, 60*time.Second, "a leads", func() bool { l := leaderOf(o); return l.Name == "a" && !l.Since.IsZero() })
		}
	}
	httpAddr := map[string]string{}
	for _, name := range names {
		addrs = append(addrs, readAddr(t, filepath.Join(repo, ".converge", "replicas", name, "workers.addr")))
		httpAddr[name] = readAddr(t, filepath.Join(repo, ".converge", "replicas", name, "http.addr"))
	}
	var workers []*proc
	for i := range 2 {
		workers = append(workers, startProc(t, fmt.Sprintf("worker-%d", i), []string{"CONVERGE_ADDR=" + strings.Join(addrs, ","),
			"CONVERGE_TOKEN=paused-token", fmt.Sprintf("CONVERGE_WORKER_NAME=external-%d", i),
			"CONVERGE_STATE_DIR=" + t.TempDir(), "CONVERGE_CONCURRENCY=64", "FAKE_WORK_DELAY=50ms"}, "worker", "classic"))
	}
	waitUntil(t, 3*time.Minute, "a tenth of the root's children Ready", func() bool {
		_, c := rootRollup(o)
		return c.Ready >= children/10
	})
	signal := func(p *proc, sig syscall.Signal) {
		t.Helper()
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatalf("signal %s: %v", p.name, err)
		}
	}
	old := procs["a"]
	signal(old, syscall.SIGSTOP)
	paused := time.Now()
	_, atPause := rootRollup(o)
	if atPause.Ready >= children {
		t.Fatalf("the converge finished before the pause: %+v", atPause)
	}
	waitUntil(t, 30*time.Second, "b leads", func() bool { l := leaderOf(o); return l.Name == "b" && !l.Since.IsZero() })
	t.Logf("b leads %v after a was paused (lease TTL 2s, %d/%d Ready)", time.Since(paused).Round(time.Millisecond), atPause.Ready, children)
	// The workers finished what a had dispatched: their results wait in
	// a's sockets. Paused, they cannot move to b, which has no worker:
	// once it has loaded the state and parked what waits for one,
	// nothing writes.
	time.Sleep(time.Second)
	for _, w := range workers {
		signal(w, syscall.SIGSTOP)
	}
	cli := cluster.Client(t)
	rev := settledRevision(t, cli, prefix, 2*time.Second)
	signal(old, syscall.SIGCONT)
	waitUntil(t, 30*time.Second, "the resumed a steps down", func() bool {
		return strings.Contains(old.output(), "serve: replica a stepped down: lost the election lease")
	})
	time.Sleep(time.Second) // anything a still had in flight
	if out := old.output(); !strings.Contains(out, "write refused") {
		t.Errorf("the resumed a tried no write (the test wants it to):\n%s", out)
	} else if strings.Contains(out, "converged:") {
		t.Errorf("the deposed a gave a verdict:\n%s", out)
	}
	for _, k := range changedSince(t, cli, prefix, rev) {
		if !strings.Contains(k, " "+prefix+"election/") {
			t.Errorf("after a resumed, etcd changed %s: a deposed leader's write landed (or b wrote without workers)", k)
		}
	}
	waitUntil(t, 30*time.Second, "a to follow b", func() bool {
		code, body := getHealthz(httpAddr["a"])
		return code == http.StatusOK && body == "ok: replica a follows b"
	})
	if out, err := runCLI("--state", url, "leader"); err != nil || strings.TrimSpace(out) != "b" {
		t.Errorf("converge leader after a rejoined = %q, %v; want b", out, err)
	}
	for _, w := range workers {
		signal(w, syscall.SIGCONT)
	}
	waitUntil(t, 5*time.Minute, "the root Ready under b", func() bool {
		ph, c := rootRollup(o)
		return ph == converge.PhaseReady && c.Total == children && c.Ready == children
	})
	for _, w := range workers {
		if out := w.output(); !strings.Contains(out, "next="+addrs[1]) {
			t.Errorf("%s did not move to b (%s):\n%s", w.name, addrs[1], out)
		}
	}
	st, err := controlplane.OpenEtcd(o, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Check(context.Background()); err != nil {
		t.Errorf("the state after the takeover: %v", err)
	}
}
