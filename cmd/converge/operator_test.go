package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/etcdtest"
)

// enableEtcdAuth turns etcd's auth on with a root user and a user conv
// (password conv-pw) that may read and write prefix only.
func enableEtcdAuth(t *testing.T, cli *clientv3.Client, prefix string) {
	t.Helper()
	ctx := t.Context()
	steps := []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "converge"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "converge", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
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
}

// runIn runs `converge args…` in dir with env added and returns its
// stdout, stderr and exit code.
func runIn(t *testing.T, dir string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command("converge", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if x := (*exec.ExitError)(nil); errors.As(err, &x) {
		code = x.ExitCode()
	} else if err != nil {
		t.Fatalf("run converge %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

// TestOperatorThroughLeaderTLSAndAuth: three replicas on a three-member
// etcd that serves clients over TLS with client certificates and has
// auth on; an operator in an empty directory (no repository, no daemon)
// runs do and delete with --state etcd://… and the TLS flags, its
// credentials in the environment. The verb runs once on the leader, the
// delete tears the resource down, a resource that does not exist exits
// 1 as locally, and a user etcd does not know changes nothing (exit 2).
func TestOperatorThroughLeaderTLSAndAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three serve replicas on a TLS etcd with auth")
	}
	cluster := etcdtest.Start(t, etcdtest.Options{Members: 3, TLS: true, ElectionMs: 1500})
	enableEtcdAuth(t, cluster.Client(t), "/platform/")
	url := cluster.URL("/platform/converge")
	tlsFlags := []string{"--state", url, "--etcd-cacert", cluster.TLS.CA, "--etcd-cert", cluster.TLS.ClientCert, "--etcd-key", cluster.TLS.ClientKey}
	creds := []string{envEtcdUser + "=conv", envEtcdPassword + "=conv-pw"}
	o, err := parseEtcdState(url, cluster.TLS.CA, cluster.TLS.ClientCert, cluster.TLS.ClientKey,
		func(k string) string { return map[string]string{envEtcdUser: "conv", envEtcdPassword: "conv-pw"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	repo := replicaRepo(t, []byte(smallBOM), false)
	procs := map[string]*proc{}
	for _, name := range []string{"a", "b", "c"} {
		procs[name] = startProc(t, name, creds, append(append([]string{"serve", "--replica", name, "--lease-ttl", "2s", "--repo", repo},
			tlsFlags...), "--listen", "", "--poll", "1h")...)
	}
	waitUntil(t, 60*time.Second, "a leader", func() bool { return leaderOf(o).Name != "" })
	waitUntil(t, 120*time.Second, "the small BOM converged", func() bool {
		ph, c := rootRollup(o)
		return ph == converge.PhaseReady && c.Total > 0 && c.Ready == c.Total
	})

	ops := t.TempDir()
	cli := append(append([]string{}, tlsFlags...), "--repo", ".")
	out, errOut, code := runIn(t, ops, creds, append(cli, "do", "vpc/sample-vpc", "enable_flow_logs")...)
	// The leader then (a loaded machine may have seen a takeover since
	// the wait above) names itself.
	m := regexp.MustCompile(`note: carried out by ([abc]), the replica leading etcd://`).FindStringSubmatch(errOut)
	if code != 0 || !strings.HasPrefix(out, "vpc/sample-vpc enable_flow_logs: ok in ") || m == nil {
		t.Fatalf("do through the leader: exit %d\n%s%s", code, out, errOut)
	}
	leader := m[1]
	out, errOut, code = runIn(t, ops, creds, append(cli, "events", "vpc/sample-vpc")...)
	if n := strings.Count(out, "verb enable_flow_logs: ok"); code != 0 || n != 1 {
		t.Errorf("events of vpc/sample-vpc show the verb %d times (exit %d), want once:\n%s%s", n, code, out, errOut)
	}

	out, errOut, code = runIn(t, ops, creds, append(cli, "do", "vpc/missing", "enable_flow_logs")...)
	if code != 1 || !strings.Contains(errOut, "resource vpc/missing not found") {
		t.Errorf("do on a resource that does not exist: exit %d, want 1 saying not found\n%s%s", code, out, errOut)
	}

	out, errOut, code = runIn(t, ops, []string{envEtcdUser + "=nobody", envEtcdPassword + "=nope"}, append(cli, "delete", "vpc/sample-vpc-v2")...)
	if code != 2 || !strings.Contains(errOut, "authentication failed") {
		t.Errorf("delete as a user etcd does not know: exit %d, want 2 saying authentication failed\n%s%s", code, out, errOut)
	}
	if _, _, code := runIn(t, ops, creds, append(cli, "get", "vpc/sample-vpc-v2")...); code != 0 {
		t.Errorf("vpc/sample-vpc-v2 is gone after a refused delete (get exit %d)", code)
	}

	out, errOut, code = runIn(t, ops, creds, append(cli, "delete", "vpc/sample-vpc-v2")...)
	if code != 0 || !strings.HasPrefix(out, "deleted vpc/sample-vpc-v2 in ") {
		t.Fatalf("delete through the leader: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := runIn(t, ops, creds, append(cli, "get", "vpc/sample-vpc-v2")...); code != 1 {
		t.Errorf("get after the delete: exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, p := range procs {
		p.stop(t)
	}
	if out := procs[leader].output(); !strings.Contains(out, "serve: replica "+leader+" leads since") {
		t.Errorf("%s never said it leads:\n%s", leader, out)
	}
}
