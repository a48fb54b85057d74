package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/etcdtest"
)

// netnsOff is the environment variable that turns the network namespace
// tests off on a machine whose kernel or permissions refuse `ip netns`.
const netnsOff = "CONVERGE_NO_NETNS"

// vethNet is a network namespace joined to the host's by a veth pair:
// Host is the host end's address, NS the namespace end's.
type vethNet struct {
	Name, HostDev, Host, NS string
}

// ipCmd runs `ip args…`, failing t with its output.
func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newVethNet makes a network namespace and a veth pair between it and
// the host on a /30 of 10.250.0.0/16, all removed when t ends. Without
// root or `ip netns` the test fails, naming CONVERGE_NO_NETNS=1, which
// skips it instead.
func newVethNet(t *testing.T) *vethNet {
	t.Helper()
	if os.Getenv(netnsOff) == "1" {
		t.Skip(netnsOff + "=1: the network namespace tests are off")
	}
	id := os.Getpid() % 16000
	n := &vethNet{Name: fmt.Sprintf("cvtest%d", id), HostDev: fmt.Sprintf("cvh%d", id),
		Host: fmt.Sprintf("10.250.%d.%d", id/64, id%64*4+1), NS: fmt.Sprintf("10.250.%d.%d", id/64, id%64*4+2)}
	nsDev := fmt.Sprintf("cvn%d", id)
	if out, err := exec.Command("ip", "netns", "add", n.Name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s(this test needs root and network namespaces; %s=1 turns it off)", n.Name, err, out, netnsOff)
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", n.Name).Run() // takes the veth pair with it
		exec.Command("ip", "link", "del", n.HostDev).Run()
	})
	ipCmd(t, "link", "add", n.HostDev, "type", "veth", "peer", "name", nsDev)
	ipCmd(t, "link", "set", nsDev, "netns", n.Name)
	ipCmd(t, "addr", "add", n.Host+"/30", "dev", n.HostDev)
	ipCmd(t, "link", "set", n.HostDev, "up")
	ipCmd(t, "-n", n.Name, "addr", "add", n.NS+"/30", "dev", nsDev)
	ipCmd(t, "-n", n.Name, "link", "set", nsDev, "up")
	ipCmd(t, "-n", n.Name, "link", "set", "lo", "up")
	return n
}

// cut takes the host end of the pair down (true) or up: nothing crosses
// between the namespace and the host meanwhile.
func (n *vethNet) cut(t *testing.T, down bool) {
	t.Helper()
	state := "up"
	if down {
		state = "down"
	}
	ipCmd(t, "link", "set", n.HostDev, state)
}

// get does GET url's path on addr from inside the namespace (a thread
// of this process joins it for one connection), so it answers while the
// namespace is cut off from the host.
func (n *vethNet) get(addr, path string) (int, string) {
	type answer struct {
		code int
		body string
	}
	ch := make(chan answer, 1)
	go func() {
		// The thread stays locked, so it ends with the goroutine
		// instead of going back to the runtime in another namespace.
		runtime.LockOSThread()
		fail := func(err error) { ch <- answer{0, err.Error()} }
		f, err := os.Open("/run/netns/" + n.Name)
		if err != nil {
			fail(err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			fail(fmt.Errorf("setns %s: %w", n.Name, err))
			return
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			fail(err)
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, addr)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			fail(err)
			return
		}
		defer resp.Body.Close()
		b := new(strings.Builder)
		bufio.NewReader(resp.Body).WriteTo(b)
		ch <- answer{resp.StatusCode, strings.TrimSpace(b.String())}
	}()
	a := <-ch
	return a.code, a.body
}

// TestReplicasNetnsCutLeader: the leader runs in its own network
// namespace, reaching etcd (on the host end of a veth pair) over the
// pair; the other replica runs on the host. The link is cut (`ip link
// set DEV down`): the other replica leads, and the cut one stops its
// engine and says why, on its output and its /healthz (503: etcd is
// unreachable). Restored, it writes nothing that lands (etcd's history
// holds nothing under the prefix but election keys: whatever it had in
// flight over the cut link is fenced) and rejoins as a follower.
func TestReplicasNetnsCutLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two serve replicas, one in a network namespace, and cuts it off from etcd")
	}
	n := newVethNet(t)
	cluster := etcdtest.Start(t, etcdtest.Options{ElectionMs: 1500, Host: n.Host})
	url := cluster.URL("/converge/netns")
	o, err := parseEtcdState(url, "", "", "", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	prefix := strings.TrimSuffix(o.Prefix, "/") + "/"
	repo := replicaRepo(t, []byte(smallBOM), false)
	cut := startCommand(t, "c", nil, "ip", "netns", "exec", n.Name, "converge", "serve", "--replica", "c", "--lease-ttl", "2s",
		"--repo", repo, "--state", url, "--listen", n.NS+":0", "--poll", "1h")
	waitUntil(t, 60*time.Second, "c leads", func() bool { l := leaderOf(o); return l.Name == "c" && !l.Since.IsZero() })
	host := startProc(t, "d", nil, "serve", "--replica", "d", "--lease-ttl", "2s",
		"--repo", repo, "--state", url, "--listen", "127.0.0.1:0", "--poll", "1h")
	cAddr := readAddr(t, filepath.Join(repo, ".converge", "replicas", "c", "http.addr"))
	dAddr := readAddr(t, filepath.Join(repo, ".converge", "replicas", "d", "http.addr"))
	waitUntil(t, 60*time.Second, "the small BOM converged", func() bool {
		ph, c := rootRollup(o)
		return ph == converge.PhaseReady && c.Total > 0 && c.Ready == c.Total
	})
	waitUntil(t, 30*time.Second, "d follows c", func() bool {
		code, body := getHealthz(dAddr)
		return code == http.StatusOK && body == "ok: replica d follows c"
	})

	n.cut(t, true)
	cutAt := time.Now()
	waitUntil(t, 30*time.Second, "d leads", func() bool { l := leaderOf(o); return l.Name == "d" && !l.Since.IsZero() })
	t.Logf("d leads %v after c was cut off (lease TTL 2s)", time.Since(cutAt).Round(time.Millisecond))
	waitUntil(t, 30*time.Second, "c steps down", func() bool {
		return strings.Contains(cut.output(), "serve: replica c stepped down:")
	})
	t.Logf("c stepped down %v after it was cut off", time.Since(cutAt).Round(time.Millisecond))
	if out := cut.output(); !strings.Contains(out, "stepped down: lost the election lease (its engine stopped in ") || !strings.Contains(out, "): etcd (") || !strings.Contains(out, "unreachable") {
		t.Errorf("c's step-down does not say etcd is unreachable:\n%s", out)
	}
	if code, body := n.get(cAddr, "/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "unreachable") {
		t.Errorf("c's /healthz while cut off = %d %q, want 503 saying etcd is unreachable", code, body)
	} else {
		t.Logf("c's /healthz while cut off: %d %q", code, body)
	}
	if code, body := getHealthz(dAddr); code != http.StatusOK || body != "ok: replica d leads" {
		t.Errorf("d's /healthz = %d %q, want 200 saying it leads", code, body)
	}

	cli := cluster.Client(t)
	rev := settledRevision(t, cli, prefix, 2*time.Second)
	n.cut(t, false)
	waitUntil(t, 60*time.Second, "c to follow d", func() bool {
		code, body := getHealthz(cAddr)
		return code == http.StatusOK && body == "ok: replica c follows d"
	})
	time.Sleep(time.Second) // anything c still had in flight over the link
	for _, k := range changedSince(t, cli, prefix, rev) {
		if !strings.Contains(k, " "+prefix+"election/") {
			t.Errorf("after c's link came back, etcd changed %s: a deposed leader's write landed (or d wrote with nothing to do)", k)
		}
	}
	if out, err := runCLI("--state", url, "leader"); err != nil || strings.TrimSpace(out) != "d" {
		t.Errorf("converge leader after c rejoined = %q, %v; want d", out, err)
	}
	cut.stop(t)
	host.stop(t)
}
