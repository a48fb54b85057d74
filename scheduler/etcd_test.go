package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/etcdtest"
)

var (
	etcdOnce    sync.Once
	etcdDir     string
	etcdCluster *etcdtest.Cluster
	etcdErr     error
	etcdPrefix  atomic.Int64
)

// TestMain stops the etcd cluster openEtcd started, if it did, and
// removes its directory.
func TestMain(m *testing.M) {
	code := m.Run()
	if etcdCluster != nil {
		etcdCluster.Stop()
	}
	if etcdDir != "" {
		os.RemoveAll(etcdDir)
	}
	os.Exit(code)
}

// openEtcd opens an etcd store under a fresh prefix of a one-member
// cluster the package's tests share (started on first use, stopped by
// TestMain), and checks and closes it when t ends.
func openEtcd(t *testing.T) *etcdstate.Store {
	t.Helper()
	etcdOnce.Do(func() {
		etcdDir, etcdErr = os.MkdirTemp("", "scheduler-etcd-")
		if etcdErr == nil {
			etcdCluster, etcdErr = etcdtest.StartCluster(etcdDir, etcdtest.Options{})
		}
	})
	if etcdErr != nil {
		t.Fatalf("start etcd: %v", etcdErr)
	}
	s, err := etcdstate.Open(etcdstate.Options{Endpoints: etcdCluster.Endpoints, Prefix: fmt.Sprintf("/scheduler-test/%d", etcdPrefix.Add(1))})
	if err != nil {
		t.Fatalf("open etcd state: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Check(context.Background()); err != nil {
			t.Errorf("state check after test: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("close state: %v", err)
		}
	})
	return s
}
