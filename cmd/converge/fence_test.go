package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge"
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
	bom = bomTeams.ReplaceAll(bom, []byte("_teams: "+strconv.Itoa(teams)))
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
			"CONVERGE_STATE_DIR=" + t.TempDir(), "FAKE_WORK_DELAY=20ms"}, "worker", "classic"))
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
	stopped := time.Since(deposed)
	t.Logf("%s stepped down %v after it was deposed", first.Name, stopped.Round(time.Millisecond))
	if stopped > ends+3*time.Second {
		t.Errorf("%s stepped down %v after its term ended, want within 3s", first.Name, (stopped - ends).Round(time.Millisecond))
	}
	if cut {
		if code, body := getHealthz(httpAddr[first.Name]); code != http.StatusServiceUnavailable || !strings.Contains(body, "unreachable") {
			t.Errorf("%s's /healthz while cut off from etcd = %d %q, want 503 saying etcd is unreachable", first.Name, code, body)
		}
		if out := old.output(); !strings.Contains(out, "stepped down: lost the election lease: etcd") || !strings.Contains(out, "unreachable") {
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
