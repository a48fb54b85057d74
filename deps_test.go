package converge_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// TestHeavyDependencies enforces the house rule that each heavy dependency
// is imported (directly, by non-test code) by exactly the packages allowed
// to: go-git by sync, bbolt by state, the etcd client by state/etcdstate
// (and the test cluster helper), the etcd server by state/etcdtest only,
// CUE by cue, grpc by the worker protocol's packages, cobra, its flags (pflag) and the Prometheus client by the CLI
// (the control plane, sync/controlplane, is a library: flags and metrics are the CLI's wiring),
// pgx by the PostgreSQL providers and miekg/dns by the DNS record provider. Everything else reaches them
// through those packages' own types.
func TestHeavyDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	allowed := map[string][]string{
		"github.com/go-git/go-git/v5":         {"sync"},
		"go.etcd.io/bbolt":                    {"state"},
		"cuelang.org/go":                      {"cue"},
		"google.golang.org/grpc":              {"proto/converge/v1", "providers", "providers/sdk", "providers/sdk/sdktest"},
		"github.com/spf13/cobra":              {"cmd/converge"},
		"github.com/spf13/pflag":              {"cmd/converge"},
		"github.com/prometheus/client_golang": {"cmd/converge", "cmd/converge/internal/ops"},
		"go.etcd.io/etcd/client/v3":           {"state/etcdstate", "state/etcdtest"},
		"go.etcd.io/etcd/api/v3":              {"state/etcdstate"},
		"go.etcd.io/etcd/server/v3":           {"state/etcdtest"},
		"github.com/jackc/pgx/v5":             {"providers/onprem/postgres"},
		"github.com/miekg/dns":                {"providers/onprem/dnsrecord"},
	}
	const module = "github.com/convergehq/converge"
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	got := map[string]map[string]bool{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		for _, imp := range p.Imports {
			for dep := range allowed {
				if imp == dep || strings.HasPrefix(imp, dep+"/") {
					if got[dep] == nil {
						got[dep] = map[string]bool{}
					}
					got[dep][rel] = true
				}
			}
		}
	}
	for dep, ok := range allowed {
		okSet := map[string]bool{}
		for _, p := range ok {
			okSet[p] = true
		}
		var bad []string
		for p := range got[dep] {
			if !okSet[p] {
				bad = append(bad, p)
			}
		}
		sort.Strings(bad)
		if len(bad) > 0 {
			t.Errorf("%s is imported by %v; only %v may import it", dep, bad, ok)
		}
	}
}

// TestBinaryHasNoEtcdServer: the converge binary talks to etcd as a
// client; the embedded server (state/etcdtest) is for tests only.
func TestBinaryHasNoEtcdServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the binary's dependencies")
	}
	out, err := exec.Command("go", "list", "-deps", "./cmd/converge").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	client := false
	for _, p := range deps {
		if strings.HasPrefix(p, "go.etcd.io/etcd/server/") || strings.HasSuffix(p, "/state/etcdtest") {
			t.Errorf("cmd/converge depends on %s", p)
		}
		client = client || p == "go.etcd.io/etcd/client/v3"
	}
	if !client {
		t.Error("cmd/converge does not link the etcd client: --state etcd://… is not wired, and this test checks nothing")
	}
}
