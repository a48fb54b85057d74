package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/bench"
	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/etcdtest"
	"github.com/convergehq/converge/sync/gittest"
)

// TestSyncEtcd syncs the whole classic example (its real workers over
// gRPC) into an etcd store of an embedded three-member cluster, then
// reads it back with the read commands, which read etcd directly: no
// daemon, no local store.
func TestSyncEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("converges the classic example (3,652 resources) on a three-member etcd cluster")
	}
	cluster := etcdtest.Start(t, etcdtest.Options{Members: 3})
	repo := t.TempDir()
	if err := os.CopyFS(repo, os.DirFS(filepath.Join(repoRoot(t), "examples", "classic"))); err != nil {
		t.Fatal(err)
	}
	gittest.Run(t, repo, "init", "-q", "-b", "main")
	gittest.Run(t, repo, "add", "-A")
	gittest.Run(t, repo, "commit", "-q", "-m", "classic example")
	url := cluster.URL("/converge/classic")
	run := func(args ...string) string {
		t.Helper()
		out, err := runCLI(append([]string{"--repo", repo, "--state", url}, args...)...)
		if err != nil {
			t.Fatalf("converge %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}

	if out := run("sync", "--timeout", "5m"); !strings.Contains(out, "converged: 3652/3652 Ready") {
		t.Fatalf("sync did not converge:\n%s", out)
	}
	if ok, _ := exists(filepath.Join(repo, ".converge", "state.db")); ok {
		t.Error("sync with --state etcd://… wrote a bbolt store")
	}

	var root struct {
		Phase  converge.Phase `json:"phase"`
		Owner  *string        `json:"owner"`
		Status struct {
			Rollup converge.Counts `json:"rollup"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(run("get", "classicbom/classic", "-o", "json")), &root); err != nil {
		t.Fatal(err)
	}
	if root.Phase != converge.PhaseReady || root.Owner != nil || root.Status.Rollup.Total != 3644 || root.Status.Rollup.Ready != 3644 {
		t.Errorf("get classicbom/classic = phase %s, owner %v, rollup %+v; want a Ready root rolling up 3644 Ready", root.Phase, root.Owner, root.Status.Rollup)
	}
	if out := run("list"); !strings.Contains(out, "classicbom/classic") || !strings.Contains(out, "3644") {
		t.Errorf("list:\n%s", out)
	}
	if out := run("get", "route/fd-03-team-010", "-o", "json"); !strings.Contains(out, `"vpc_id": "vpc-`) {
		t.Errorf("a route's flowed values are missing:\n%s", out)
	}
	if out := run("tree", "classicbom/classic", "--group", "0"); !strings.Contains(out, "vpc/fd-03-team-010") {
		t.Errorf("tree does not show vpc/fd-03-team-010:\n%.2000s", out)
	}
	if out := run("events", "vpc/fd-03-team-010", "-o", "json"); !strings.Contains(out, `"resource": "vpc/fd-03-team-010"`) {
		t.Errorf("events of vpc/fd-03-team-010:\n%s", out)
	}
	if out := run("status"); !strings.Contains(out, "converge/sync") {
		t.Errorf("status:\n%s", out)
	}
	if out := run("sync"); !strings.Contains(out, "already applied") || !strings.Contains(out, "3652/3652 Ready; nothing to do") {
		t.Errorf("second sync:\n%s", out)
	}
	st, err := etcdstate.Open(etcdstate.Options{Endpoints: cluster.Endpoints, Prefix: "/converge/classic", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Check(context.Background()); err != nil {
		t.Errorf("the etcd store after sync: %v", err)
	}
}

func TestParseEtcdState(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name          string
		state         string
		ca, cert, key string
		env           map[string]string
		wantEndpoints string
		wantPrefix    string
		wantUser      string
		wantErr       string
	}{
		{name: "one host", state: "etcd://10.0.0.1:2379/converge", wantEndpoints: "http://10.0.0.1:2379", wantPrefix: "/converge"},
		{name: "three hosts, nested prefix", state: "etcd://a:2379,b:2379,c:2379/platform/prod/", wantEndpoints: "http://a:2379 http://b:2379 http://c:2379", wantPrefix: "/platform/prod"},
		{name: "credentials", state: "etcd://a:2379/x", env: map[string]string{envEtcdUser: "conv", envEtcdPassword: "pw"}, wantEndpoints: "http://a:2379", wantPrefix: "/x", wantUser: "conv"},
		{name: "no prefix", state: "etcd://a:2379", wantErr: "no key prefix"},
		{name: "slash prefix", state: "etcd://a:2379/", wantErr: "no key prefix"},
		{name: "no host", state: "etcd:///x", wantErr: "no HOST:PORT"},
		{name: "no port", state: "etcd://a/x", wantErr: `"a" is not HOST:PORT`},
		{name: "empty host in list", state: "etcd://a:1,,b:2/x", wantErr: `"" is not HOST:PORT`},
		{name: "cert without key", state: "etcd://a:1/x", cert: "c.pem", wantErr: "--etcd-cert and --etcd-key go together"},
		{name: "missing CA file", state: "etcd://a:1/x", ca: "/nonexistent/ca.pem", wantErr: "--etcd-cacert"},
		{name: "password without user", state: "etcd://a:1/x", env: map[string]string{envEtcdPassword: "pw"}, wantErr: envEtcdPassword + " is set without " + envEtcdUser},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseEtcdState(tt.state, tt.ca, tt.cert, tt.key, env(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(o.Endpoints, " "); got != tt.wantEndpoints {
				t.Errorf("endpoints = %q, want %q", got, tt.wantEndpoints)
			}
			if o.Prefix != tt.wantPrefix || o.Username != tt.wantUser {
				t.Errorf("prefix, user = %q, %q; want %q, %q", o.Prefix, o.Username, tt.wantPrefix, tt.wantUser)
			}
		})
	}
}

// TestEtcdFlagsNeedEtcdState: the TLS flags mean nothing for a directory.
func TestEtcdFlagsNeedEtcdState(t *testing.T) {
	_, err := runCLI("--state", t.TempDir(), "--etcd-cacert", "ca.pem", "list")
	if err == nil || !strings.Contains(err.Error(), "need --state etcd://") {
		t.Errorf("error = %v, want the TLS flags refused without --state etcd://…", err)
	}
}

// TestBenchEtcd runs `converge bench --state etcd://…` end to end, so
// the etcd rate in docs/BENCHMARKS.md cannot rot: one short run on a
// one-member cluster. With CONVERGE_ETCD_BENCH=1 it is the measurement
// itself: three runs on a three-member cluster that fsyncs, as bbolt
// does, printing the report (go test -run TestBenchEtcd -v).
func TestBenchEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("bench converges the whole classic example twice")
	}
	measure := os.Getenv("CONVERGE_ETCD_BENCH") == "1"
	opts, runs := etcdtest.Options{}, "1"
	if measure {
		opts, runs = etcdtest.Options{Members: 3, Fsync: true}, "3"
	}
	cluster := etcdtest.Start(t, opts)
	// The report alone: a log line (a slow commit on a loaded machine)
	// goes to stderr.
	out, log, err := runCLISplit("--state", cluster.URL("/converge/bench"), "bench", "--runs", runs, "--transport", "200ms",
		"--dir", filepath.Join(repoRoot(t), "examples", "classic"), "-o", "json")
	if err != nil {
		t.Fatalf("bench: %v\n%s%s", err, out, log)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bench -o json: %v\n%s", err, out)
	}
	if len(rep.EtcdRuns) != len(rep.Runs) || rep.EtcdRuns[0].Resources != 3652 || rep.EtcdRatioToBbolt <= 0 {
		t.Fatalf("bench report: %d etcd runs of %d, ratio %v:\n%s", len(rep.EtcdRuns), len(rep.Runs), rep.EtcdRatioToBbolt, out)
	}
	t.Logf("bbolt median %.0f resources/s (%.3fs), etcd (%d members) median %.0f resources/s (%.3fs): %.2f × bbolt; etcd puts/resource %.2f, commits %d",
		rep.MedianPerSec, rep.MedianSeconds, max(1, opts.Members), rep.EtcdMedianPerSec, rep.EtcdMedianSeconds, rep.EtcdRatioToBbolt,
		rep.EtcdRuns[0].PutsPerRes, rep.EtcdRuns[0].Commits)
	if measure {
		t.Logf("report:\n%s", out)
	}
	resp, err := cluster.Client(t).Get(t.Context(), "/converge/bench/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Errorf("bench left %d keys under its prefix", resp.Count)
	}
}

// TestEtcdTLSAndAuth syncs into an etcd cluster that serves clients over
// TLS with client certificates and has etcd's auth on: the TLS flags
// and the credentials in CONVERGE_ETCD_USER / CONVERGE_ETCD_PASSWORD
// reach it; a user the cluster does not know is refused.
func TestEtcdTLSAndAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("syncs a small classic BOM on a TLS etcd")
	}
	cluster := etcdtest.Start(t, etcdtest.Options{TLS: true})
	cli := cluster.Client(t)
	ctx := t.Context()
	steps := []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "converge"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "converge", "/platform/", clientv3.GetPrefixRangeEnd("/platform/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "conv", "conv-pw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "conv", "converge"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("auth setup step %d: %v", i, err)
		}
	}
	repo, _ := classicRepo(t)
	url := cluster.URL("/platform/converge")
	tlsFlags := []string{"--state", url, "--etcd-cacert", cluster.TLS.CA, "--etcd-cert", cluster.TLS.ClientCert, "--etcd-key", cluster.TLS.ClientKey}

	t.Setenv(envEtcdUser, "conv")
	t.Setenv(envEtcdPassword, "conv-pw")
	out, err := runCLI(append(append([]string{"--repo", repo}, tlsFlags...), "sync", "--timeout", "2m")...)
	if err != nil || !strings.Contains(out, "converged: 26/26 Ready") {
		t.Fatalf("sync over TLS with credentials: %v\n%s", err, out)
	}
	if out, err := runCLI(append(append([]string{"--repo", repo}, tlsFlags...), "list")...); err != nil || !strings.Contains(out, "classicbom/classic") {
		t.Errorf("list over TLS with credentials: %v\n%s", err, out)
	}

	t.Setenv(envEtcdUser, "nobody")
	t.Setenv(envEtcdPassword, "nope")
	if out, err := runCLI(append(append([]string{"--repo", repo}, tlsFlags...), "list")...); err == nil {
		t.Errorf("list as an unknown user: no error\n%s", out)
	} else if !strings.Contains(err.Error(), "authentication failed") {
		t.Errorf("list as an unknown user: error %v, want authentication failed", err)
	}
	t.Setenv(envEtcdUser, "conv")
	t.Setenv(envEtcdPassword, "conv-pw")
	if out, err := runCLI("--repo", repo, "--state", url, "list"); err == nil || !strings.Contains(err.Error(), "wants TLS?") {
		t.Errorf("list without TLS against a TLS-only cluster: error %v, want one suggesting TLS\n%s", err, out)
	}
}
