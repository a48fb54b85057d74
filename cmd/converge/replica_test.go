package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/etcdtest"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/controlplane"
	"github.com/convergehq/converge/sync/gittest"
)

// proc is a converge process a test started (the test binary, which
// testscript.Main puts on PATH as "converge"), its output kept.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex // guards out
	out  bytes.Buffer
	done chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// output returns what the process printed so far.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startProc starts `converge args…` with env added; it is killed when t
// ends, and its output logged if t failed.
func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	return startCommand(t, name, env, append([]string{"converge"}, args...)...)
}

// startCmd is startProc of any command (e.g. nice -n N converge …).
func startCmd(t *testing.T, name string, env []string, command string, args ...string) *proc {
	t.Helper()
	return startCommand(t, name, env, append([]string{command}, args...)...)
}

// startCommand is startProc for any command line (argv[0] looked up in
// $PATH), e.g. converge run by `ip netns exec NS`, which execs it.
func startCommand(t *testing.T, name string, env []string, argv ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("output of %s:\n%s", name, p.output())
		}
	})
	return p
}

// stop sends SIGINT and waits for a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(os.Interrupt)
	start := time.Now()
	defer func() { t.Logf("%s stopped %v after SIGINT", p.name, time.Since(start).Round(time.Millisecond)) }()
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not stop within 60s of SIGINT", p.name)
	}
	if !p.cmd.ProcessState.Success() {
		t.Errorf("%s exited %v", p.name, p.cmd.ProcessState)
	}
}

// waitUntil polls cond every 20ms until it holds or d passes.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leaderOf returns the current leader's advert, or a zero one.
func leaderOf(o *etcdstate.Options) etcdstate.Advert {
	a, _ := etcdstate.Leader(*o)
	return a
}

// rootRollup reads the classic root from the etcd state.
func rootRollup(o *etcdstate.Options) (converge.Phase, converge.Counts) {
	st, err := controlplane.OpenEtcd(o, true, 0)
	if err != nil {
		return "", converge.Counts{}
	}
	defer st.Close()
	r, err := st.Resource(context.Background(), "classicbom/classic")
	if err != nil {
		return "", converge.Counts{}
	}
	var status struct {
		Rollup converge.Counts `json:"rollup"`
	}
	json.Unmarshal(r.Status, &status)
	return r.Phase, status.Rollup
}

// replicaRepo is a copy of the classic example with bom (nil: the
// example's own) committed on main; noWorkers drops the workers its
// converge.cue declares, so only external workers serve it.
func replicaRepo(t *testing.T, bom []byte, noWorkers bool) string {
	t.Helper()
	repo := t.TempDir()
	if err := os.CopyFS(repo, os.DirFS(filepath.Join(repoRoot(t), "examples", "classic"))); err != nil {
		t.Fatal(err)
	}
	if bom != nil {
		if err := os.WriteFile(filepath.Join(repo, "resources", "bom.cue"), bom, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if noWorkers {
		cfg := filepath.Join(repo, "converge.cue")
		b, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.Replace(b, []byte(`workers: [{name: "classic", builtin: "classic", replicas: 2}]`), []byte("workers: []"), 1)
		if err := os.WriteFile(cfg, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gittest.Run(t, repo, "init", "-q", "-b", "main")
	gittest.Run(t, repo, "add", "-A")
	gittest.Run(t, repo, "commit", "-q", "-m", "classic example")
	return repo
}

// readAddr waits for a replica's address file (http.addr, workers.addr).
func readAddr(t *testing.T, path string) string {
	t.Helper()
	var b []byte
	waitUntil(t, 30*time.Second, path, func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil && len(b) > 0
	})
	return strings.TrimSpace(string(b))
}

// TestReplicasLeadFollowAndStepDown runs two `serve --replica` processes
// on one etcd state: `converge leader` names the one elected (and exits
// 1 before any runs), the leader converges a small classic BOM and
// records its takeover as an event, a webhook delivered to the follower
// makes the leader sync the pushed commit, and a leader paused
// (SIGSTOP) past its lease is replaced; resumed, it finds it lost the
// leadership, stops its engine and follows.
func TestReplicasLeadFollowAndStepDown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two serve replicas on an etcd cluster and pauses the leader past its lease")
	}
	cluster := etcdtest.Start(t, etcdtest.Options{ElectionMs: 1500})
	url := cluster.URL("/converge/replicas")
	o, err := parseEtcdState(url, "", "", "", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	out, err := runCLI("--state", url, "leader")
	var f errFailed
	if !errors.As(err, &f) || !strings.Contains(err.Error(), "no replica leads") {
		t.Fatalf("leader with no replica: %v (want exit 1, no replica leads)\n%s", err, out)
	}
	if _, err := runCLI("--state", t.TempDir(), "leader"); err == nil || !strings.Contains(err.Error(), "needs --state etcd://") {
		t.Errorf("leader on a directory state: %v", err)
	}
	if _, err := runCLI("--state", t.TempDir(), "serve", "--replica", "a"); err == nil || !strings.Contains(err.Error(), "--replica a needs --state etcd://") {
		t.Errorf("serve --replica on a directory state: %v", err)
	}

	repo := replicaRepo(t, []byte(smallBOM), false)
	env := []string{"CONVERGE_WEBHOOK_SECRET=hook-secret"}
	procs := map[string]*proc{}
	for _, name := range []string{"a", "b"} {
		procs[name] = startProc(t, name, env, "serve", "--replica", name, "--lease-ttl", "2s",
			"--repo", repo, "--state", url, "--listen", "127.0.0.1:0", "--poll", "1h")
	}
	var first etcdstate.Advert
	waitUntil(t, 30*time.Second, "a leader", func() bool { first = leaderOf(o); return first.Name != "" })
	if out, err := runCLI("--state", url, "leader"); err != nil || strings.TrimSpace(out) != first.Name {
		t.Errorf("converge leader = %q, %v; want %s", out, err, first.Name)
	}
	follower := map[string]string{"a": "b", "b": "a"}[first.Name]
	var before converge.Counts
	waitUntil(t, 60*time.Second, "the small BOM converged", func() bool {
		var ph converge.Phase
		ph, before = rootRollup(o)
		return ph == converge.PhaseReady && before.Total > 0 && before.Ready == before.Total
	})
	if out, err := runCLI("--state", url, "events", "-o", "json"); err != nil || !strings.Contains(out, `"message": "leader `+first.Name+` since `) {
		t.Errorf("events do not show %s's takeover: %v\n%.3000s", first.Name, err, out)
	}
	// Every replica serves the site and says what it is.
	for name, p := range procs {
		addr := readAddr(t, filepath.Join(repo, ".converge", "replicas", name, "http.addr"))
		want := "follows"
		if name == first.Name {
			want = "leads"
		}
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		b := new(bytes.Buffer)
		b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(b.String(), want) {
			t.Errorf("GET /healthz of %s = %d %q, want 200 saying it %s", name, resp.StatusCode, b, want)
		}
	}

	// A webhook to the follower reaches the leader: it syncs the push.
	bigger := strings.Replace(smallBOM, `{name: "fd-02", networking: false, service_teams: [{name: "team-000"}]}`,
		`{name: "fd-02", networking: false, service_teams: [{name: "team-000"}, {name: "team-001"}]}`, 1)
	if bigger == smallBOM {
		t.Fatal("the BOM edit did not apply")
	}
	if err := os.WriteFile(filepath.Join(repo, "resources", "bom.cue"), []byte(bigger), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Run(t, repo, "commit", "-q", "-am", "one more team")
	body := []byte(`{"ref":"refs/heads/main"}`)
	req, _ := http.NewRequest("POST", "http://"+readAddr(t, filepath.Join(repo, ".converge", "replicas", follower, "http.addr"))+"/hooks/git", bytes.NewReader(body))
	req.Header.Set("X-Hub-Signature-256", gitsync.Sign([]byte("hook-secret"), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("webhook to the follower: %d", resp.StatusCode)
	}
	waitUntil(t, 60*time.Second, "the pushed team converged (webhook to the follower, poll 1h)", func() bool {
		ph, c := rootRollup(o)
		return ph == converge.PhaseReady && c.Total > before.Total && c.Ready == c.Total
	})

	// Pause the leader past its lease: the follower takes over.
	old := procs[first.Name]
	if err := old.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	var second etcdstate.Advert
	waitUntil(t, 30*time.Second, "the follower leads", func() bool { second = leaderOf(o); return second.Name == follower })
	t.Logf("%s leads %v after %s was paused (lease TTL 2s)", follower, time.Since(paused).Round(time.Millisecond), first.Name)
	if err := old.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the resumed old leader steps down", func() bool {
		return strings.Contains(old.output(), "serve: replica "+first.Name+" stepped down: lost the election lease")
	})
	if l := leaderOf(o); l.Name != follower {
		t.Errorf("after the old leader resumed, the leader is %q, want %s", l.Name, follower)
	}
	// The new leader records its takeover as it opens the state, which
	// on a loaded machine can come after the old one stepped down.
	waitUntil(t, 30*time.Second, "the takeover event", func() bool {
		out, err := runCLI("--state", url, "events", "-o", "json")
		return err == nil && strings.Contains(out, `"message": "leader `+follower+` since `)
	})
	for _, p := range procs {
		p.stop(t)
	}
	if out := procs[follower].output(); !strings.Contains(out, "serve: replica "+follower+" leads since") {
		t.Errorf("%s never said it leads:\n%s", follower, out)
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

// TestReplicasFailover is the failover measurement: three
// replicas on a three-member etcd cluster, the classic example served
// by two external workers that list all three replicas, the leader
// killed (SIGKILL) in the middle of the converge. Another replica must
// lead within 5s of the killed leader's lease expiring, and the root
// then reaches Ready with every resource present once and the reactor
// delivered once. It logs the figures docs/BENCHMARKS.md records.
func TestReplicasFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("converges the classic example (3,652 resources) on three replicas and kills the leader")
	}
	cluster := etcdtest.Start(t, etcdtest.Options{Members: 3, ElectionMs: 1500})
	url := cluster.URL("/converge/failover")
	o, err := parseEtcdState(url, "", "", "", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	repo := replicaRepo(t, nil, true)
	env := []string{"CONVERGE_WORKER_TOKEN=failover-token"}
	names := []string{"r1", "r2", "r3"}
	procs := map[string]*proc{}
	var addrs []string
	for _, name := range names {
		procs[name] = startProc(t, name, env, "serve", "--replica", name, "--lease-ttl", "3s",
			"--repo", repo, "--state", url, "--listen", "", "--workers-listen", "127.0.0.1:0", "--insecure", "--poll", "1h")
	}
	for _, name := range names {
		addrs = append(addrs, readAddr(t, filepath.Join(repo, ".converge", "replicas", name, "workers.addr")))
	}
	sink := t.TempDir()
	for i := range 2 {
		startProc(t, fmt.Sprintf("worker-%d", i), []string{"CONVERGE_ADDR=" + strings.Join(addrs, ","),
			"CONVERGE_TOKEN=failover-token", fmt.Sprintf("CONVERGE_WORKER_NAME=external-%d", i),
			"CONVERGE_STATE_DIR=" + sink, "CONVERGE_CONCURRENCY=64", "FAKE_WORK_DELAY=200ms"}, "worker", "classic")
	}
	start := time.Now()
	var first etcdstate.Advert
	waitUntil(t, 30*time.Second, "a leader", func() bool { first = leaderOf(o); return first.Name != "" && first.PID != 0 })
	waitUntil(t, 120*time.Second, "the converge under way (1,500 Ready)", func() bool {
		_, c := rootRollup(o)
		return c.Ready >= 1500
	})
	_, atKill := rootRollup(o)
	if atKill.Ready >= atKill.Total && atKill.Total > 0 {
		t.Fatalf("the converge finished before the kill: %+v", atKill)
	}

	// The leader's lease: when it expires, the kill is noticed.
	cli := cluster.Client(t)
	resp, err := cli.Get(t.Context(), o.Prefix+"/election/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("read the leader's election key: %v", err)
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the leader %s (pid %d): %v", first.Name, first.PID, err)
	}
	killed := time.Now()
	ttl, err := cli.TimeToLive(t.Context(), lease)
	if err != nil {
		t.Fatal(err)
	}
	// Watch the lease go: etcd answers TTL -1 once it has expired.
	var expired time.Time
	waitUntil(t, 30*time.Second, "the killed leader's lease to expire", func() bool {
		l, err := cli.TimeToLive(t.Context(), lease)
		expired = time.Now()
		return err == nil && l.TTL == -1
	})
	var second etcdstate.Advert
	waitUntil(t, 30*time.Second, "a new leader", func() bool {
		second = leaderOf(o) // Since is set once it has won
		return second.Name != "" && second.Name != first.Name && !second.Since.IsZero()
	})
	seen := time.Now()
	// The new leader's Since is when it won; expired is when a 20ms poll
	// first saw the lease gone (so at most ~20ms late).
	afterExpiry := second.Since.Sub(expired)
	t.Logf("killed leader %s at %d/%d Ready; its lease (TTL %ds, %ds left) expired %.2fs after the kill; %s leads %.2fs after the kill, %.2fs after the expiry; a reader saw it %.2fs after the kill",
		first.Name, atKill.Ready, atKill.Total, ttl.GrantedTTL, ttl.TTL, expired.Sub(killed).Seconds(), second.Name,
		second.Since.Sub(killed).Seconds(), afterExpiry.Seconds(), seen.Sub(killed).Seconds())
	if afterExpiry > 5*time.Second {
		t.Errorf("%s led %v after the old leader's lease expired, want ≤ 5s", second.Name, afterExpiry)
	}
	waitUntil(t, 180*time.Second, "the classic root Ready after the failover", func() bool {
		ph, c := rootRollup(o)
		return ph == converge.PhaseReady && c.Ready == 3644 && c.Total == 3644
	})
	t.Logf("converged %.1fs after the start, %.1fs after the kill", time.Since(start).Seconds(), time.Since(killed).Seconds())

	st, err := controlplane.OpenEtcd(o, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Check(context.Background()); err != nil {
		t.Errorf("the state after the failover: %v", err)
	}
	rs, err := st.Resources(context.Background(), state.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]bool{}
	for _, r := range rs {
		if uids[r.UID] {
			t.Errorf("uid %s twice", r.UID)
		}
		uids[r.UID] = true
	}
	if len(rs) != 3652 {
		t.Errorf("%d resources after the failover, want 3652", len(rs))
	}
	evs, err := st.Events(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var takeovers []string
	for _, e := range evs {
		if e.Type == "Leader" {
			takeovers = append(takeovers, e.Message)
		}
	}
	if len(takeovers) != 2 || !strings.HasPrefix(takeovers[0], "leader "+first.Name+" since ") || !strings.HasPrefix(takeovers[1], "leader "+second.Name+" since ") {
		t.Errorf("takeover events %q, want %s's then %s's", takeovers, first.Name, second.Name)
	}
	// The reactor fired once for the root's synced transition.
	waitUntil(t, 60*time.Second, "the statussink delivery", func() bool {
		b, _ := os.ReadFile(filepath.Join(sink, "statussink", "invocations.log"))
		return bytes.Contains(b, []byte("classicbom-synced/"))
	})
	b, _ := os.ReadFile(filepath.Join(sink, "statussink", "invocations.log"))
	if n := bytes.Count(b, []byte("classicbom-synced/")); n != 1 {
		t.Errorf("the reactor was delivered %d times, want once:\n%s", n, b)
	}
	t.Logf("checked %.1fs after the start", time.Since(start).Seconds())
	for _, name := range names {
		if name != first.Name {
			procs[name].stop(t)
		}
	}
	t.Logf("stopped %.1fs after the start", time.Since(start).Seconds())
}

// TestReplicasQuorumLoss: with one of three etcd members stopped the
// replicas go on converging; with two stopped (no quorum) the leader
// steps down saying etcd lost its quorum, and `converge leader` says so
// too; with the members back a replica leads again (`converge leader`
// never names the lost term, whose key the quorum brings back) and
// converges a commit pushed meanwhile, and the state is consistent.
func TestReplicasQuorumLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two serve replicas on a three-member etcd cluster and stops two members")
	}
	t0 := time.Now()
	phase := func(what string) { t.Logf("%5.1fs %s", time.Since(t0).Seconds(), what) }
	cluster := etcdtest.Start(t, etcdtest.Options{Members: 3, ElectionMs: 1500})
	phase("etcd started")
	url := cluster.URL("/converge/quorum")
	o, err := parseEtcdState(url, "", "", "", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	repo := replicaRepo(t, []byte(smallBOM), false)
	procs := map[string]*proc{}
	for _, name := range []string{"a", "b"} {
		procs[name] = startProc(t, name, nil, "serve", "--replica", name, "--lease-ttl", "2s",
			"--repo", repo, "--state", url, "--listen", "127.0.0.1:0", "--poll", "300ms")
	}
	healthz := func(name string) (int, string) {
		addr := readAddr(t, filepath.Join(repo, ".converge", "replicas", name, "http.addr"))
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b := new(bytes.Buffer)
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	var first etcdstate.Advert
	waitUntil(t, 30*time.Second, "a leader", func() bool { first = leaderOf(o); return first.Name != "" })
	var before converge.Counts
	waitUntil(t, 60*time.Second, "the small BOM converged", func() bool {
		var ph converge.Phase
		ph, before = rootRollup(o)
		return ph == converge.PhaseReady && before.Total > 0 && before.Ready == before.Total
	})
	addTeam := func(fd, team string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(repo, "resources", "bom.cue"))
		if err != nil {
			t.Fatal(err)
		}
		old := `{name: "` + fd + `", networking: false, service_teams: [{name: "team-000"}`
		nb := bytes.Replace(b, []byte(old), []byte(old+`, {name: "`+team+`"}`), 1)
		if bytes.Equal(nb, b) {
			t.Fatalf("no %q in the BOM", old)
		}
		if err := os.WriteFile(filepath.Join(repo, "resources", "bom.cue"), nb, 0o644); err != nil {
			t.Fatal(err)
		}
		gittest.Run(t, repo, "commit", "-q", "-am", "add "+fd+"/"+team)
	}

	// One member down: the converge goes on.
	phase("converged the small BOM")
	// Stop etcd's followers, not its leader: closing a leader member
	// hands its leadership over first, which takes seconds.
	cli := cluster.Client(t)
	var followers []int
	for i, ep := range cluster.Endpoints {
		if st, err := cli.Status(t.Context(), ep); err == nil && st.Leader != st.Header.MemberId {
			followers = append(followers, i)
		}
	}
	if len(followers) != 2 {
		t.Fatalf("etcd members following their leader: %v, want 2", followers)
	}
	cluster.StopMember(followers[0])
	addTeam("fd-02", "team-001")
	var mid converge.Counts
	waitUntil(t, 60*time.Second, "a commit converged with one etcd member down", func() bool {
		var ph converge.Phase
		ph, mid = rootRollup(o)
		return ph == converge.PhaseReady && mid.Total > before.Total && mid.Ready == mid.Total
	})

	phase("converged a commit with one member down")
	// Two down: no quorum. The leader steps down, naming the cause.
	leaderOut := procs[first.Name]
	cluster.StopMember(followers[1])
	phase("stopped a second member")
	lost := time.Now()
	waitUntil(t, 60*time.Second, "the leader to step down", func() bool {
		return strings.Contains(leaderOut.output(), "serve: replica "+first.Name+" stepped down:")
	})
	t.Logf("%s stepped down %v after etcd lost its quorum", first.Name, time.Since(lost).Round(time.Millisecond))
	for _, l := range strings.Split(leaderOut.output(), "\n") {
		if strings.Contains(l, "serve: replica") {
			t.Log(l)
		}
	}
	if out := leaderOut.output(); !strings.Contains(out, "lost its quorum") && !strings.Contains(out, "unreachable") {
		t.Errorf("the step-down does not say etcd lost its quorum:\n%s", out)
	}
	if out, err := runCLI("--state", url, "leader"); err == nil || !strings.Contains(err.Error(), "etcd has lost its quorum") {
		t.Errorf("converge leader without quorum: %v, want an error naming the lost quorum\n%s", err, out)
	} else {
		t.Logf("converge leader without quorum: %v", err)
	}
	// Every replica's /healthz says so: none can lead.
	for name := range procs {
		var code int
		var body string
		waitUntil(t, 30*time.Second, name+"'s /healthz to fail", func() bool {
			code, body = healthz(name)
			return code == http.StatusServiceUnavailable
		})
		if !strings.Contains(body, "lost its quorum") {
			t.Errorf("GET /healthz of %s during the quorum loss = %d %q, want 503 naming the lost quorum", name, code, body)
		}
	}
	// A read command says so too, not "no member answered".
	if out, err := runCLI("--state", url, "list"); err == nil || !strings.Contains(err.Error(), "etcd has lost its quorum") {
		t.Errorf("converge list without quorum: %v, want an error naming the lost quorum\n%s", err, out)
	} else {
		t.Logf("converge list without quorum: %v", err)
	}
	addTeam("fd-02", "team-002") // pushed while nothing can be written

	phase("checked the step-down")
	// Quorum back: a replica leads and converges what was pushed.
	for _, i := range followers {
		if err := cluster.StartMember(i); err != nil {
			t.Fatal(err)
		}
	}
	back := time.Now()
	var next etcdstate.Advert
	// The lost term's election key comes back with the quorum (etcd's
	// new leader renews every lease): `converge leader` must not name
	// it, nor must it hold the next leader back for a TTL.
	var staleFrom, staleTo time.Time
	waitUntil(t, 60*time.Second, "a leader after the quorum came back", func() bool {
		next = leaderOf(o)
		if next.Name != "" && next.Since.Equal(first.Since) {
			if staleFrom.IsZero() {
				staleFrom = time.Now()
			}
			staleTo = time.Now()
		}
		return next.Name != "" && next.Since.After(first.Since)
	})
	// Its replica revokes it as soon as etcd answers; a read between the
	// quorum's return and that revoke can still find it.
	if d := staleTo.Sub(staleFrom); !staleFrom.IsZero() && d > time.Second {
		t.Errorf("after the quorum came back, converge leader named %s's lost term for %v", first.Name, d.Round(time.Millisecond))
	} else if !staleFrom.IsZero() {
		t.Logf("after the quorum came back, converge leader named %s's lost term for %v", first.Name, d.Round(time.Millisecond))
	}
	t.Logf("%s leads %v after the members came back", next.Name, time.Since(back).Round(time.Millisecond))
	for name := range procs {
		waitUntil(t, 30*time.Second, name+"'s /healthz to pass again", func() bool {
			code, _ := healthz(name)
			return code == http.StatusOK
		})
	}
	waitUntil(t, 120*time.Second, "the commit pushed during the outage converged", func() bool {
		ph, c := rootRollup(o)
		return ph == converge.PhaseReady && c.Total > mid.Total && c.Ready == c.Total
	})
	phase("converged the commit pushed during the outage")
	for _, p := range procs {
		p.stop(t)
	}
	st, err := controlplane.OpenEtcd(o, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Check(context.Background()); err != nil {
		t.Errorf("the state after the quorum loss: %v", err)
	}
	phase("stopped and checked")
}
