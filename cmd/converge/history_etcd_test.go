package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdProcs is a cluster of real `etcd` processes (Debian's etcd-server
// in CI) that a test can pause (SIGSTOP, a member cut off), kill and
// restart on their data: the faults of TestReplicasHistory. The members
// are killed when the test ends.
type etcdProcs struct {
	t         *testing.T
	bin, dir  string
	Endpoints []string
	args      [][]string
	mu        sync.Mutex // guards cmds
	cmds      []*exec.Cmd
}

// startEtcdProcs starts n members (election timeout 1.5 s, so that a 3 s
// lease is granted as asked) and waits until the cluster answers.
func startEtcdProcs(t *testing.T, n int, dir string) *etcdProcs {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("no etcd on PATH (Debian's etcd-server): ", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var ls []net.Listener
	for range 2 * n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	port := func(i int) int { return ls[i].Addr().(*net.TCPAddr).Port }
	for _, l := range ls {
		l.Close()
	}
	c := &etcdProcs{t: t, bin: bin, dir: dir, cmds: make([]*exec.Cmd, n)}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("h%d=http://127.0.0.1:%d", i, port(2*i+1)))
		c.Endpoints = append(c.Endpoints, fmt.Sprintf("http://127.0.0.1:%d", port(2*i)))
	}
	for i := range n {
		client, peer := c.Endpoints[i], fmt.Sprintf("http://127.0.0.1:%d", port(2*i+1))
		c.args = append(c.args, []string{"--name", fmt.Sprintf("h%d", i), "--data-dir", filepath.Join(dir, fmt.Sprintf("h%d", i)),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", "converge-history",
			"--election-timeout", "1500", "--heartbeat-interval", "150"})
		c.start(i, "new")
	}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, cmd := range c.cmds {
			if cmd != nil {
				cmd.Process.Signal(syscall.SIGCONT)
				cmd.Process.Kill()
				cmd.Wait()
			}
		}
	})
	cli := c.client()
	defer cli.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := cli.Put(ctx, "/history-ready", "1")
		cancel()
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd: the cluster did not answer in 60s: %v (logs in %s)", err, dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// start starts member i, its cluster state "new" or "existing".
func (c *etcdProcs) start(i int, state string) {
	log, err := os.OpenFile(filepath.Join(c.dir, fmt.Sprintf("h%d.log", i)), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(c.bin, append(c.args[i], "--initial-cluster-state", state)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start etcd member %d: %v", i, err)
	}
	go func() { cmd.Wait(); log.Close() }()
	c.mu.Lock()
	c.cmds[i] = cmd
	c.mu.Unlock()
}

func (c *etcdProcs) signal(i int, sig syscall.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.cmds[i].Process.Signal(sig); err != nil {
		c.t.Errorf("signal %v to etcd member %d: %v", sig, i, err)
	}
}

// restart kills member i (SIGKILL), waits d, and starts it again on its
// data.
func (c *etcdProcs) restart(i int, d time.Duration) {
	c.signal(i, syscall.SIGKILL)
	time.Sleep(d)
	c.start(i, "existing")
}

func (c *etcdProcs) client() *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	return cli
}

// leader returns the index of etcd's raft leader, or -1.
func (c *etcdProcs) leader(cli *clientv3.Client) int {
	for i, ep := range c.Endpoints {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, ep)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return i
		}
	}
	return -1
}

// URL is the cluster's --state value for prefix.
func (c *etcdProcs) URL(prefix string) string {
	var hosts []string
	for _, e := range c.Endpoints {
		hosts = append(hosts, strings.TrimPrefix(e, "http://"))
	}
	return "etcd://" + strings.Join(hosts, ",") + "/" + strings.Trim(prefix, "/")
}
