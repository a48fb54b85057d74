// Package etcdtest runs real etcd clusters inside a test process: Start
// launches 1 or 3 members of go.etcd.io/etcd/server/v3/embed on loopback
// ports (or Options.Host's) in t.TempDir() and stops them when the test ends. Only tests
// import it, so the converge binary never links the etcd server
// (deps_test.go at the module root checks that).
//
// Read first: Start, Options and Cluster.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Cluster is a running embedded etcd cluster.
type Cluster struct {
	// Endpoints are the members' client URLs (http://127.0.0.1:PORT, or
	// https:// with Options.TLS).
	Endpoints []string
	// TLS are the CA and client certificate files with Options.TLS.
	TLS *TLSFiles

	mu      sync.Mutex      // guards members
	cfgs    []*embed.Config // by member index
	members []*embed.Etcd   // by member index; nil while stopped
}

// Options tune Start. The zero value is one member, fsync off.
type Options struct {
	// Members is 1 (default) or 3.
	Members int
	// Fsync keeps etcd's fsyncs (off by default: tests need no
	// durability against power loss, and fsync dominates etcd's latency
	// on a shared disk). Benchmarks that compare with bbolt's fsynced
	// commits turn it on.
	Fsync bool
	// MaxTxnOps is the servers' --max-txn-ops; 0 keeps etcd's 128.
	MaxTxnOps uint
	// TLS serves clients over TLS only, requiring a client certificate
	// signed by a fresh CA (Cluster.TLS has the files).
	TLS bool
	// Host is the address the members listen on and advertise, for
	// clients and peers; default 127.0.0.1 (a test that cuts a client
	// off with a network namespace gives its veth address).
	Host string
	// ElectionMs is the members' raft election timeout; default 3000
	// (see StartCluster). etcd raises a lease's TTL to at least 1.5
	// election timeouts, so a test of a short lease (a 3s leader
	// session) sets it lower, e.g. 1500.
	ElectionMs uint
	// QuotaBackendBytes is the members' --quota-backend-bytes; 0 keeps
	// etcd's 2 GiB.
	QuotaBackendBytes int64
}

// Start starts a cluster for t and stops it on cleanup.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := StartCluster(t.TempDir(), opts)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// StartCluster starts a cluster with its data under dir; Stop ends it.
func StartCluster(dir string, opts Options) (*Cluster, error) {
	n := opts.Members
	if n == 0 {
		n = 1
	}
	if n != 1 && n != 3 {
		return nil, fmt.Errorf("members %d: want 1 or 3", n)
	}
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	ports, err := freePorts(host, 2*n)
	if err != nil {
		return nil, err
	}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("m%d=http://%s", i, net.JoinHostPort(host, strconv.Itoa(ports[2*i+1]))))
	}
	c := &Cluster{}
	scheme := "http"
	if opts.TLS {
		if c.TLS, err = makeTLS(filepath.Join(dir, "tls")); err != nil {
			return nil, err
		}
		scheme = "https"
	}
	cfgs := make([]*embed.Config, n)
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = fmt.Sprintf("%s/m%d", dir, i)
		client := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(ports[2*i]))}
		peer := url.URL{Scheme: "http", Host: net.JoinHostPort(host, strconv.Itoa(ports[2*i+1]))}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "converge-test"
		cfg.UnsafeNoFsync = !opts.Fsync
		cfg.QuotaBackendBytes = opts.QuotaBackendBytes
		if c.TLS != nil {
			cfg.ClientTLSInfo = transport.TLSInfo{CertFile: c.TLS.serverCert, KeyFile: c.TLS.serverKey,
				TrustedCAFile: c.TLS.CA, ClientCertAuth: true}
		}
		if opts.MaxTxnOps > 0 {
			cfg.MaxTxnOps = opts.MaxTxnOps
		}
		// Two cores shared by every test: etcd's default 1s election
		// timeout makes a loaded test's members elect again and again,
		// stalling writes for seconds. Tests want a steady leader.
		cfg.ElectionMs = 3000
		if opts.ElectionMs > 0 {
			cfg.ElectionMs = opts.ElectionMs
		}
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		cfgs[i] = cfg
		c.Endpoints = append(c.Endpoints, client.String())
	}
	// Members of a new cluster wait for each other: start them together.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex // guards c.members and errs
		errs []error
	)
	c.cfgs, c.members = cfgs, make([]*embed.Etcd, n)
	for i, cfg := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := embed.StartEtcd(cfg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("member %s: %w", cfg.Name, err))
				return
			}
			c.members[i] = e
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		c.Stop()
		return nil, errs[0]
	}
	for _, e := range c.members {
		select {
		case <-e.Server.ReadyNotify():
		case <-time.After(30 * time.Second):
			c.Stop()
			return nil, fmt.Errorf("member %s: not ready after 30s", e.Config().Name)
		}
	}
	return c, nil
}

// StopMember stops member i (0-based), keeping its data: two of three
// stopped is a cluster without quorum. StartMember starts it again.
func (c *Cluster) StopMember(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.members[i]; e != nil {
		e.Close()
		c.members[i] = nil
	}
}

// StartMember starts member i again, on its ports and data, after
// StopMember. It does not wait for the member to be ready: a member
// without a quorum to join is not ready until one is.
func (c *Cluster) StartMember(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.members[i] != nil {
		return nil
	}
	var err error
	for try := 0; try < 50; try++ { // the closed member's ports may linger a moment
		var e *embed.Etcd
		if e, err = embed.StartEtcd(c.cfgs[i]); err == nil {
			c.members[i] = e
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("restart member %s: %w", c.cfgs[i].Name, err)
}

// Client returns a client of every member, closed on t's cleanup.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: c.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if c.TLS != nil {
		tc, err := c.TLS.Config()
		if err != nil {
			t.Fatalf("etcd client TLS: %v", err)
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// URL returns the cluster's address in converge's --state form for
// prefix: etcd://HOST:PORT[,HOST:PORT…]/PREFIX.
func (c *Cluster) URL(prefix string) string {
	var hosts []string
	for _, e := range c.Endpoints {
		_, h, _ := strings.Cut(e, "://")
		hosts = append(hosts, h)
	}
	return "etcd://" + strings.Join(hosts, ",") + "/" + strings.Trim(prefix, "/")
}

// Stop stops every member.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, e := range c.members {
		if e != nil {
			e.Close()
		}
		c.members[i] = nil
	}
}

// freePorts returns n TCP ports of host free at the time of asking.
func freePorts(host string, n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("find a free port on %s: %w", host, err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
