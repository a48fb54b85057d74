package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/bench"
	"github.com/convergehq/converge/cmd/converge/internal/history"
	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/sync/controlplane"
	"github.com/convergehq/converge/sync/gittest"
)

// historyScale is one size of TestReplicasHistory.
type historyScale struct {
	teams   []int // _teams of each commit, in order
	domains []int // _domains of each commit
	rounds  int   // every fault kind once per round, in a seeded order
	extra   []string
}

// The short run is in every `go test ./...` (so .ci/run); the long one
// with CONVERGE_HISTORY=long or CONVERGE_SCALE=1 (docs/BENCHMARKS.md,
// "Histories checked").
var (
	historyShort = historyScale{teams: []int{600, 640, 680, 680}, domains: []int{58, 58, 58, 54}, rounds: 1}
	historyLong  = historyScale{teams: []int{3000, 3100, 3200, 3300, 3300, 3400, 3400}, domains: []int{58, 58, 58, 58, 54, 54, 50},
		rounds: 3, extra: []string{faultEtcdQuorum, faultEtcdQuorum}}
)

// The faults TestReplicasHistory injects.
const (
	faultKillLeader    = "kill-leader"    // SIGKILL the leading replica, start it again once another leads
	faultPauseLeader   = "pause-leader"   // SIGSTOP it until another leads, then SIGCONT
	faultEtcdRestart   = "etcd-restart"   // SIGKILL an etcd member, start it again on its data 1s later
	faultEtcdPartition = "etcd-partition" // SIGSTOP etcd's raft leader member for 3s: cut off, the others elect
	faultKillWorker    = "kill-worker"    // SIGKILL a worker, start it again 1s later
	faultEtcdQuorum    = "etcd-quorum"    // SIGSTOP two etcd members for 4s: no quorum (long run only)
)

var historyFaults = []string{faultKillLeader, faultPauseLeader, faultEtcdRestart, faultEtcdPartition, faultKillWorker}

// TestReplicasHistory is issue 28's "histories checked", as etcd's
// robustness tests do it: three `serve --replica` processes on three
// real etcd processes, two external workers, a few commits of the
// classic example pushed while a seeded schedule injects faults (a
// leader killed, a leader paused past its lease, an etcd member
// restarted, etcd's leader member cut off, a worker killed). Everything
// a client sees is recorded (history_hooks_test.go): each task a worker
// completes, each reactor delivery, each verdict two polling readers
// see, each write a replica sends etcd and each revision a watcher of
// the prefix sees. The recorded run is then checked against converge's
// promises (package internal/history: porcupine for the effects and
// the verdicts). On a failure the run's files, and porcupine's
// visualization, stay in the directory the test names.
func TestReplicasHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three serve replicas on three etcd processes and injects faults")
	}
	scale, size := historyShort, "short"
	if os.Getenv("CONVERGE_HISTORY") == "long" || os.Getenv("CONVERGE_SCALE") == "1" {
		scale, size = historyLong, "long"
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CONVERGE_HISTORY_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CONVERGE_HISTORY_SEED=%q: %v", s, err)
		}
	}
	rnd := rand.New(rand.NewPCG(seed, seed))
	out := historyDir(t)
	t.Logf("%s run, seed %d (CONVERGE_HISTORY_SEED=%d replays its schedule); files in %s", size, seed, seed, out)
	t0 := time.Now()
	phase := func(format string, args ...any) {
		t.Logf("%6.1fs "+format, append([]any{time.Since(t0).Seconds()}, args...)...)
	}

	cluster := startEtcdProcs(t, 3, filepath.Join(out, "etcd"))
	url := cluster.URL("/converge/history")
	o, err := parseEtcdState(url, "", "", "", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	cli := cluster.client()
	defer cli.Close()
	phase("etcd started")

	// The repository: the classic example at the first commit's size.
	bom, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "classic", "resources", "bom.cue"))
	if err != nil {
		t.Fatal(err)
	}
	bomAt := func(i int) []byte {
		b := bench.BOMTeams.ReplaceAll(bom, []byte("_teams: "+strconv.Itoa(scale.teams[i])))
		return regexp.MustCompile(`(?m)^_domains:\s+\d+`).ReplaceAll(b, []byte("_domains: "+strconv.Itoa(scale.domains[i])))
	}
	repo := replicaRepo(t, bomAt(0), true)
	rec := newHistoryRecorder(t, o, cli, out)
	rec.addRevision(strings.TrimSpace(gittest.Run(t, repo, "rev-parse", "HEAD")))
	rec.start()

	env := []string{"CONVERGE_WORKER_TOKEN=history-token"}
	names := []string{"r1", "r2", "r3"}
	var mu sync.Mutex // guards replicas and workers
	replicas := map[string]*proc{}
	var allProcs []*proc // every process started, restarts included: their output is kept in out
	// Each replica listens for workers on one port for the whole run,
	// restarts included: the workers' CONVERGE_ADDR lists them once.
	ports := map[string]string{}
	for _, name := range names {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[name] = l.Addr().String()
		l.Close()
	}
	startReplica := func(name string) {
		p := startProc(t, name, append(env, envHistoryEtcd+"="+filepath.Join(out, "etcd-"+name+".jsonl")),
			"serve", "--replica", name, "--lease-ttl", "3s", "--repo", repo, "--state", url,
			"--listen", "", "--workers-listen", ports[name], "--insecure", "--poll", "500ms")
		mu.Lock()
		replicas[name] = p
		allProcs = append(allProcs, p)
		mu.Unlock()
	}
	for _, name := range names {
		startReplica(name)
	}
	var addrs []string
	for _, name := range names {
		if a := readAddr(t, filepath.Join(repo, ".converge", "replicas", name, "workers.addr")); a != ports[name] {
			t.Fatalf("%s listens for workers on %s, want %s", name, a, ports[name])
		}
		addrs = append(addrs, ports[name])
	}
	sink := filepath.Join(out, "sink")
	workers := make([]*proc, 2)
	startWorker := func(i int) {
		p := startProc(t, fmt.Sprintf("worker-%d", i), []string{"CONVERGE_ADDR=" + strings.Join(addrs, ","),
			"CONVERGE_TOKEN=history-token", fmt.Sprintf("CONVERGE_WORKER_NAME=external-%d", i),
			"CONVERGE_STATE_DIR=" + sink, "CONVERGE_CONCURRENCY=64", "FAKE_WORK_DELAY=50ms",
			envHistoryEffects + "=" + filepath.Join(out, fmt.Sprintf("effects-%d.jsonl", i))}, "worker", "classic")
		mu.Lock()
		workers[i] = p
		allProcs = append(allProcs, p)
		mu.Unlock()
	}
	for i := range workers {
		startWorker(i)
	}
	leader := func(not string) etcdstate.Advert {
		var a etcdstate.Advert
		waitUntil(t, 60*time.Second, "a leader other than "+not, func() bool {
			a = leaderOf(o)
			return a.Name != "" && a.Name != not && a.PID != 0 && !a.Since.IsZero()
		})
		return a
	}
	first := leader("")
	phase("%s leads", first.Name)
	waitUntil(t, 60*time.Second, "the first commit's record", func() bool {
		v := rec.finalVerdict(0)
		return v != "" && v != history.Absent
	})
	phase("the first commit is recorded (%s)", rec.finalVerdict(0))

	// The schedule: every fault kind once a round, in a seeded order,
	// with the commits spread over it.
	var schedule []string
	for range scale.rounds {
		round := append([]string(nil), historyFaults...)
		rnd.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		schedule = append(schedule, round...)
	}
	for _, f := range scale.extra {
		i := rnd.IntN(len(schedule) + 1)
		schedule = append(schedule[:i], append([]string{f}, schedule[i:]...)...)
	}
	commitAt := map[int]int{} // fault index → commit pushed just before it
	for c := 1; c < len(scale.teams); c++ {
		commitAt[(c-1)*len(schedule)/(len(scale.teams)-1)] = c
	}
	t.Logf("fault schedule: %s", strings.Join(schedule, ", "))
	commit := func(c int) {
		if err := os.WriteFile(filepath.Join(repo, "resources", "bom.cue"), bomAt(c), 0o644); err != nil {
			t.Fatal(err)
		}
		gittest.Run(t, repo, "commit", "-q", "-am", fmt.Sprintf("%d teams in %d domains", scale.teams[c], scale.domains[c]))
		rec.addRevision(strings.TrimSpace(gittest.Run(t, repo, "rev-parse", "HEAD")))
		phase("pushed commit %d: %d teams in %d domains", c, scale.teams[c], scale.domains[c])
	}
	for i, f := range schedule {
		if c, ok := commitAt[i]; ok {
			commit(c)
		}
		time.Sleep(time.Duration(300+rnd.IntN(1200)) * time.Millisecond)
		switch f {
		case faultKillLeader:
			a := leader("")
			syscall.Kill(a.PID, syscall.SIGKILL)
			rec.fault("SIGKILL leader "+a.Name, false)
			next := leader(a.Name)
			startReplica(a.Name)
			phase("killed leader %s; %s leads; %s started again", a.Name, next.Name, a.Name)
		case faultPauseLeader:
			a := leader("")
			syscall.Kill(a.PID, syscall.SIGSTOP)
			rec.fault("SIGSTOP leader "+a.Name, false)
			next := leader(a.Name)
			time.Sleep(500 * time.Millisecond)
			syscall.Kill(a.PID, syscall.SIGCONT)
			rec.fault("SIGCONT "+a.Name, false)
			phase("paused leader %s until %s led, then resumed it", a.Name, next.Name)
		case faultEtcdRestart:
			m := rnd.IntN(len(cluster.Endpoints))
			rec.fault(fmt.Sprintf("SIGKILL etcd member h%d", m), false)
			cluster.restart(m, time.Second)
			rec.fault(fmt.Sprintf("etcd member h%d started again", m), false)
			phase("restarted etcd member h%d", m)
		case faultEtcdPartition:
			m := cluster.leader(cli)
			if m < 0 {
				m = rnd.IntN(len(cluster.Endpoints))
			}
			cluster.signal(m, syscall.SIGSTOP)
			rec.fault(fmt.Sprintf("SIGSTOP etcd member h%d (its raft leader)", m), false)
			time.Sleep(3 * time.Second)
			cluster.signal(m, syscall.SIGCONT)
			rec.fault(fmt.Sprintf("SIGCONT etcd member h%d", m), false)
			phase("cut etcd's leader member h%d off for 3s", m)
		case faultEtcdQuorum:
			m := rnd.IntN(len(cluster.Endpoints))
			n := (m + 1) % len(cluster.Endpoints)
			cluster.signal(m, syscall.SIGSTOP)
			cluster.signal(n, syscall.SIGSTOP)
			rec.fault(fmt.Sprintf("SIGSTOP etcd members h%d and h%d (no quorum)", m, n), false)
			time.Sleep(4 * time.Second)
			cluster.signal(m, syscall.SIGCONT)
			cluster.signal(n, syscall.SIGCONT)
			rec.fault(fmt.Sprintf("SIGCONT etcd members h%d and h%d", m, n), false)
			phase("took etcd's quorum away for 4s (h%d, h%d)", m, n)
		case faultKillWorker:
			w := rnd.IntN(len(workers))
			mu.Lock()
			p := workers[w]
			mu.Unlock()
			p.cmd.Process.Kill()
			rec.fault(fmt.Sprintf("SIGKILL worker-%d", w), true)
			time.Sleep(time.Second)
			startWorker(w)
			phase("killed worker-%d and started it again", w)
		}
	}

	// The last commit converges: its verdict success, the root Ready
	// over every child it declares.
	last := len(scale.teams) - 1
	children := 3*scale.teams[last] + 2*scale.domains[last]
	// A run that does not converge is checked all the same: its history
	// may say why.
	converged := false
	for deadline := time.Now().Add(4 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ph, c := rootRollup(o)
		if ph == converge.PhaseReady && c.Total == children && c.Ready == children && rec.finalVerdict(last) == converge.StateSuccess {
			converged = true
			break
		}
	}
	if converged {
		phase("the last commit converged (%d children Ready)", children)
		time.Sleep(2 * time.Second) // its delivery
	} else {
		ph, c := rootRollup(o)
		t.Errorf("the last commit did not converge in 4 minutes: its verdict %q, the root %s with %d/%d Ready (want %d)",
			rec.finalVerdict(last), ph, c.Ready, c.Total, children)
	}
	mu.Lock()
	for _, p := range replicas {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Signal(os.Interrupt)
	}
	for _, p := range replicas {
		select {
		case <-p.done:
		case <-time.After(60 * time.Second):
			t.Errorf("%s did not stop within 60s of SIGINT", p.name)
		}
	}
	for _, p := range workers {
		p.cmd.Process.Kill()
		<-p.done
	}
	mu.Unlock()
	for _, p := range allProcs {
		if err := os.WriteFile(filepath.Join(out, p.name+"-"+strconv.Itoa(p.cmd.Process.Pid)+".log"), []byte(p.output()), 0o644); err != nil {
			t.Error(err)
		}
	}
	if converged {
		// loadHistory reads it: the run ended converged.
		if err := os.WriteFile(filepath.Join(out, "settled"), nil, 0o644); err != nil {
			t.Error(err)
		}
	}
	run := rec.stop()
	phase("stopped; recorded %d effects, %d deliveries, %d verdict reads, %d writes, %d revisions watched, %d faults",
		len(run.Effects), len(run.Deliveries), len(run.Verdicts), len(run.Writes), len(run.Seen), len(run.Faults))

	rep := history.Check(run, out)
	t.Logf("checked: %s", rep)
	for _, r := range rep.Deliveries.Retries {
		t.Logf("delivery retried: %s", r)
	}
	if len(rep.Violations) > 0 {
		t.Errorf("the history breaks converge's promises (seed %d, files in %s):\n%s", seed, out, strings.Join(rep.Violations, "\n"))
	}
	reportKnown(t, rep, seed, out)
	if rep.Effects == 0 || rep.Verdicts == 0 || rep.Fencing.Writes == 0 || len(run.Seen) == 0 || rep.Fencing.Terms < 3 {
		t.Errorf("the recorders missed the run: %s", rep)
	}
}

// reportKnown fails on the violations of the issues the histories found
// (each names its issue: docs/ARCHITECTURE.md, "Histories checked"; all
// are fixed, so one showing again is a regression), and only logs them
// with CONVERGE_HISTORY_LENIENT=1.
func reportKnown(t *testing.T, rep history.Report, seed uint64, out string) {
	if len(rep.Known) == 0 {
		return
	}
	msg := fmt.Sprintf("the history shows %d violations of open issues (seed %d, files in %s):\n%s", len(rep.Known), seed, out, strings.Join(rep.Known, "\n"))
	if os.Getenv("CONVERGE_HISTORY_LENIENT") == "1" {
		t.Log(msg + "\n(CONVERGE_HISTORY_LENIENT=1: not failing on them)")
		return
	}
	t.Error(msg)
}

// historyDir is where a run's files go: $CONVERGE_HISTORY_DIR, else a
// new temporary directory, removed when the test passes.
func historyDir(t *testing.T) string {
	if d := os.Getenv("CONVERGE_HISTORY_DIR"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d, err := os.MkdirTemp("", "converge-history-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(d)
		}
	})
	return d
}

// historyRecorder records what the test itself sees: the verdicts two
// polling readers read, the data revisions a watcher of the prefix
// sees, and the faults injected; stop gathers the workers' and
// replicas' logs with them.
type historyRecorder struct {
	t      *testing.T
	o      *etcdstate.Options
	cli    *clientv3.Client
	dir    string
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex // guards the fields below
	revs     []string   // the commits pushed, in order
	verdicts []history.VerdictRead
	latest   map[string]string // revision → the last state read
	seen     []history.Observed
	faults   []history.Fault
	watched  int64 // the newest revision the watch has reported
	startRev int64
}

func newHistoryRecorder(t *testing.T, o *etcdstate.Options, cli *clientv3.Client, dir string) *historyRecorder {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &historyRecorder{t: t, o: o, cli: cli, dir: dir, ctx: ctx, cancel: cancel, latest: map[string]string{}}
}

func (r *historyRecorder) addRevision(hash string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.revs = append(r.revs, hash)
}

// fault records a fault; losesResults as history.Fault says.
func (r *historyRecorder) fault(what string, losesResults bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, history.Fault{What: what, At: time.Now().UnixNano(), LosesResults: losesResults})
}

// finalVerdict is the state last read of commit i's verdict.
func (r *historyRecorder) finalVerdict(i int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i >= len(r.revs) {
		return ""
	}
	return r.latest[r.revs[i]]
}

func (r *historyRecorder) start() {
	resp, err := r.cli.Get(r.ctx, "/history-ready")
	if err != nil {
		r.t.Fatal(err)
	}
	r.startRev = resp.Header.Revision
	r.wg.Add(3)
	go r.watch()
	for c := range 2 {
		go r.poll(c)
	}
}

// poll reads every pushed commit's converge/sync verdict from the
// store, as `converge status` does, every 50ms until stopped.
func (r *historyRecorder) poll(client int) {
	defer r.wg.Done()
	var st *etcdstate.Store
	defer func() {
		if st != nil {
			st.Close()
		}
	}()
	for r.ctx.Err() == nil {
		if st == nil {
			var err error
			if st, err = controlplane.OpenEtcd(r.o, true, 0); err != nil {
				st = nil
				time.Sleep(200 * time.Millisecond)
				continue
			}
		}
		r.mu.Lock()
		revs := append([]string(nil), r.revs...)
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(r.ctx, 3*time.Second)
		call := time.Now().UnixNano()
		recs, err := st.Revisions(ctx, 0)
		ret := time.Now().UnixNano()
		cancel()
		if err == nil {
			byHash := map[string]*converge.RevisionRecord{}
			for _, rec := range recs {
				byHash[rec.Revision.Hash] = rec
			}
			r.mu.Lock()
			for _, h := range revs {
				v := history.VerdictRead{Client: client, Revision: h, State: history.Absent, Call: call, Return: ret}
				if rec := byHash[h]; rec != nil {
					v.State = history.Pending
					if s, ok := rec.Status(converge.ContextSync); ok && s.State != converge.StatePending {
						v.State, v.Description = s.State, s.Description
					}
				}
				r.verdicts = append(r.verdicts, v)
				r.latest[h] = v.State
			}
			r.mu.Unlock()
		}
		select {
		case <-r.ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// watch records every revision that changes the store's data under the
// prefix, from before the first replica started.
func (r *historyRecorder) watch() {
	defer r.wg.Done()
	prefix := strings.TrimSuffix(r.o.Prefix, "/") + "/"
	next := r.startRev + 1
	for r.ctx.Err() == nil {
		wch := r.cli.Watch(clientv3.WithRequireLeader(r.ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(next), clientv3.WithProgressNotify())
		for resp := range wch {
			var byRev []history.Observed
			for _, ev := range resp.Events {
				key := string(ev.Kv.Key)
				if !dataKey(prefix, key) {
					continue
				}
				rev := ev.Kv.ModRevision
				if n := len(byRev); n == 0 || byRev[n-1].Rev != rev {
					byRev = append(byRev, history.Observed{Rev: rev, At: time.Now().UnixNano()})
				}
				byRev[len(byRev)-1].Keys = append(byRev[len(byRev)-1].Keys, key)
			}
			r.mu.Lock()
			r.seen = append(r.seen, byRev...)
			if h := resp.Header.Revision; h > r.watched {
				r.watched = h
			}
			if n := len(resp.Events); n > 0 {
				next = max(next, resp.Events[n-1].Kv.ModRevision+1)
			}
			r.mu.Unlock()
		}
		time.Sleep(100 * time.Millisecond) // the watch broke (a member lost): again from next
	}
}

// stop waits until the watch has reported the cluster's current
// revision, stops the readers and gathers the run.
func (r *historyRecorder) stop() history.Run {
	resp, err := r.cli.Get(context.Background(), "/history-ready")
	if err != nil {
		r.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.mu.Lock()
		w := r.watched
		r.mu.Unlock()
		if w >= resp.Header.Revision {
			break
		}
		if time.Now().After(deadline) {
			r.t.Errorf("the watch reported revision %d, the cluster is at %d", w, resp.Header.Revision)
			break
		}
		r.cli.RequestProgress(context.Background())
		time.Sleep(50 * time.Millisecond)
	}
	r.cancel()
	r.wg.Wait()
	for name, v := range map[string]any{"verdicts.json": r.verdicts, "watched.json": r.seen, "faults.json": r.faults} {
		b, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(r.dir, name), b, 0o644); err != nil {
			r.t.Error(err)
		}
	}
	return loadHistory(r.t, r.dir)
}

// loadHistory reads a run's files from dir: the workers' and replicas'
// logs and what the test recorded itself.
func loadHistory(t *testing.T, dir string) history.Run {
	var run history.Run
	for name, v := range map[string]any{"verdicts.json": &run.Verdicts, "watched.json": &run.Seen, "faults.json": &run.Faults} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil {
			err = json.Unmarshal(b, v)
		}
		if err != nil {
			t.Errorf("history %s: %v", name, err)
		}
	}
	_, err := os.Stat(filepath.Join(dir, "settled"))
	run.Settled = err == nil
	logs, _ := filepath.Glob(filepath.Join(dir, "r*-*.log")) // the replicas' output
	for _, f := range logs {
		readLines(t, f, func(b []byte) {
			if bytes.Contains(b, []byte("resume pending verdict")) || bytes.Contains(b, []byte("the leader's term ended")) {
				run.TermErrors = append(run.TermErrors, filepath.Base(f)+": "+string(b))
			}
		})
	}
	files, _ := filepath.Glob(filepath.Join(dir, "effects-*.jsonl"))
	for _, f := range files {
		readLines(t, f, func(b []byte) {
			var l effectLine
			if err := json.Unmarshal(b, &l); err != nil {
				t.Errorf("%s: %v", f, err)
			}
			if l.Effect != nil {
				run.Effects = append(run.Effects, *l.Effect)
			}
			if l.Delivery != nil {
				run.Deliveries = append(run.Deliveries, *l.Delivery)
			}
		})
	}
	files, _ = filepath.Glob(filepath.Join(dir, "etcd-*.jsonl"))
	for _, f := range files {
		// A call's line, then its answer's: the last line of a
		// process's transaction wins.
		idx := map[[2]int64]int{}
		readLines(t, f, func(b []byte) {
			var w history.Write
			if err := json.Unmarshal(b, &w); err != nil {
				t.Errorf("%s: %v", f, err)
			}
			k := [2]int64{int64(w.PID), w.Seq}
			if i, ok := idx[k]; ok {
				run.Writes[i] = w
				return
			}
			idx[k] = len(run.Writes)
			run.Writes = append(run.Writes, w)
		})
	}
	return run
}

// TestReplicasHistoryRecheck checks the run TestReplicasHistory left in
// $CONVERGE_HISTORY_RECHECK (its files directory) again, without
// running anything: to look at a failure, or at a model's change.
func TestReplicasHistoryRecheck(t *testing.T) {
	dir := os.Getenv("CONVERGE_HISTORY_RECHECK")
	if dir == "" {
		t.Skip("set CONVERGE_HISTORY_RECHECK to a directory TestReplicasHistory left")
	}
	rep := history.Check(loadHistory(t, dir), dir)
	t.Logf("checked: %s", rep)
	if len(rep.Violations) > 0 {
		t.Errorf("the history breaks converge's promises:\n%s", strings.Join(rep.Violations, "\n"))
	}
	reportKnown(t, rep, 0, dir)
}

func readLines(t *testing.T, path string, each func([]byte)) {
	f, err := os.Open(path)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if len(sc.Bytes()) > 0 {
			each(sc.Bytes())
		}
	}
}
