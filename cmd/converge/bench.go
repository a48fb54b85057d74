package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"testing/fstest"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/etcdstate"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/controlplane"
)

type benchOptions struct {
	runs       int
	transport  time.Duration
	dir        string
	teams      int
	roots      int
	memprofile string
	cpuprofile string
	output     string
	// lifecycle is an updated BOM file: also time its recompose and the
	// teardown of the whole tree (bench_lifecycle.go).
	lifecycle string
	// composeCUE is a repository whose classicbom composes in CUE: the
	// bench also times composing the BOM with it and with the Go
	// composer (bench_compose.go).
	composeCUE string
	// composeCUEGiven: --compose-cue was given (a scale run then
	// compares even when the expression is off the fast path).
	composeCUEGiven bool
	// log is the engines' logger: warnings and errors on stderr.
	log *slog.Logger
	// wrapStore is globals.wrapStore (tests only).
	wrapStore func(scheduler.Store) scheduler.Store
	// etcd, when set (--state etcd://…), is where every run is repeated
	// on an etcd store, each under its own prefix below etcd's, deleted
	// after it.
	etcd *etcdstate.Options
	// onprem is the directory of examples/onprem/servers.sh's running
	// servers: bench the onprem example against a plain client instead
	// (bench_onprem.go).
	onprem string
}

func newBenchCommand(g *globals) *cobra.Command {
	var o benchOptions
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure converging the classic example against this machine's raw gRPC and bbolt rates",
		Long: `bench converges a repository directory (default examples/classic) from an
empty store, with its real worker processes over gRPC, --runs times, and in
the same run measures the raw limits it is judged against: unary loopback
gRPC round trips with a no-op handler, the same through converge's worker
protocol, and bbolt puts batched 1,000 per fsynced transaction. It reports
resources/s and its ratio to the raw gRPC rate, durable puts and commits per
resource, and the peak RSS of the control plane and of each worker.

With --state etcd://HOST:PORT[,…]/PREFIX every run is repeated on that etcd
cluster (each run under its own prefix below PREFIX, deleted afterwards), and
the report adds the etcd runs and the ratio of their median rate to bbolt's.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.log, o.wrapStore, o.etcd = g.logger(c.ErrOrStderr(), false), g.wrapStore, g.etcd
			if o.onprem != "" {
				return runBenchOnprem(c.Context(), c.OutOrStdout(), o)
			}
			// A scale run compares composing in CUE only on the fast
			// path, unless asked: CUE's evaluator at a million
			// children costs minutes and gigabytes of its own.
			o.composeCUEGiven = c.Flags().Changed("compose-cue")
			return runBench(c.Context(), c.OutOrStdout(), o)
		},
	}
	f := c.Flags()
	f.IntVar(&o.runs, "runs", 3, "converge runs (each from an empty store)")
	f.DurationVar(&o.transport, "transport", time.Second, "how long to measure each raw rate")
	f.StringVar(&o.dir, "dir", "examples/classic", "repository directory to converge")
	f.StringVar(&o.onprem, "onprem", "", "bench examples/onprem (--teams, default 500) by converge sync against a plain pgx and RFC 2136 client, on the servers examples/onprem/servers.sh started in this directory")
	f.StringVar(&o.memprofile, "memprofile", "", "write a heap profile of the control plane after the last run (go tool pprof)")
	f.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the control plane over the last run, from apply to converged (go tool pprof)")
	f.IntVar(&o.teams, "teams", 0, "scale run: rewrite the classic BOM's team count (e.g. 33000 for ~100,000 resources, 333000 for ~1,000,000)")
	f.IntVar(&o.roots, "roots", 1, "scale run: split --teams over this many classicbom roots (their own BOM files)")
	f.StringVar(&o.lifecycle, "lifecycle", "", "also time the recompose of this updated BOM (replacing resources/bom.cue) and the teardown of the whole tree")
	f.StringVar(&o.composeCUE, "compose-cue", "examples/datadriven", "also time composing the BOM with this repository's CUE compose against the Go composer (\"\" skips; skipped when absent, and with --teams when the expression is off the fast path unless given)")
	addOutputFlag(c, &o.output, "table")
	return c
}

// benchRun is one converge of the repository from an empty store.
type benchRun struct {
	Resources     int     `json:"resources"`
	Seconds       float64 `json:"seconds"`
	PerSecond     float64 `json:"resources_per_second"`
	Dispatched    uint64  `json:"dispatched"`
	Commits       uint64  `json:"commits"`
	Puts          uint64  `json:"puts"`
	PutsPerRes    float64 `json:"puts_per_resource"`
	CommitsPerRes float64 `json:"commits_per_resource"`
	// LongestCommitSeconds is the store's longest write transaction
	// since it was opened: the most work a crash could lose.
	LongestCommitSeconds float64 `json:"longest_commit_seconds"`
	// ControlRSSMiB is the process's peak so far (VmHWM never falls):
	// exact for the first run, an upper bound for later ones.
	ControlRSSMiB float64 `json:"control_plane_peak_rss_mib"`
	// ControlAnonMiB is the peak of the control plane's anonymous
	// resident memory (its heap; RSS also counts the pages of state.db
	// that bbolt's mmap touched), sampled every 100 ms during the run.
	ControlAnonMiB float64 `json:"control_plane_peak_anon_rss_mib"`
	WorkerRSSMiB   float64 `json:"worker_peak_rss_mib"`
	RatioToRawGRPC float64 `json:"ratio_to_raw_grpc"`
}

type benchReport struct {
	RawGRPC1       float64        `json:"raw_grpc_rt_per_second_1_inflight"`
	RawGRPC256     float64        `json:"raw_grpc_rt_per_second_256_inflight"`
	Dispatch256    float64        `json:"protocol_rt_per_second_256_inflight"`
	BboltPuts      float64        `json:"bbolt_batched_puts_per_second"`
	BboltTxns      float64        `json:"bbolt_fsynced_txns_per_second"`
	Runs           []benchRun     `json:"runs"`
	MedianSeconds  float64        `json:"median_seconds"`
	MedianPerSec   float64        `json:"median_resources_per_second"`
	MedianRatioRaw float64        `json:"median_ratio_to_raw_grpc"`
	Lifecycle      []lifecycleRun `json:"lifecycle,omitempty"`
	// EtcdRuns are the same runs on the etcd store of --state etcd://…;
	// EtcdRatioToBbolt is their median rate over the bbolt runs'.
	EtcdRuns          []benchRun `json:"etcd_runs,omitempty"`
	EtcdMedianPerSec  float64    `json:"etcd_median_resources_per_second,omitempty"`
	EtcdRatioToBbolt  float64    `json:"etcd_ratio_to_bbolt,omitempty"`
	EtcdMedianSeconds float64    `json:"etcd_median_seconds,omitempty"`
	// Compose compares composing the BOM in CUE and in Go (--compose-cue).
	Compose *composeBench `json:"compose,omitempty"`
}

func runBench(ctx context.Context, out io.Writer, o benchOptions) error {
	if err := checkOutput(o.output, "table", "json", "yaml"); err != nil {
		return err
	}
	fsys := os.DirFS(o.dir)
	if o.roots < 1 {
		return usageErr("--roots %d: want at least 1", o.roots)
	}
	if o.roots > 1 && o.teams == 0 {
		return usageErr("--roots needs --teams")
	}
	if o.teams > 0 {
		scaled, err := scaleBOM(fsys, o.teams, o.roots)
		if err != nil {
			return err
		}
		fsys = scaled
	}
	res, err := cue.Load(fsys, ".", cue.Options{})
	if err != nil {
		return err
	}
	if len(res.Findings) > 0 {
		return failed("%s is invalid: %s", o.dir, res.Findings[0])
	}
	rep := benchReport{}
	one, err := providers.MeasureTransport(ctx, 1, o.transport)
	if err != nil {
		return err
	}
	many, err := providers.MeasureTransport(ctx, 256, o.transport)
	if err != nil {
		return err
	}
	rep.RawGRPC1, rep.RawGRPC256, rep.Dispatch256 = one.RawUnary, many.RawUnary, many.Dispatch
	tmp, err := os.MkdirTemp("", "converge-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if rep.BboltPuts, rep.BboltTxns, err = state.MeasureRaw(filepath.Join(tmp, "raw"), o.transport); err != nil {
		return err
	}
	abs, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	for i := 0; i < o.runs; i++ {
		last := i == o.runs-1
		profile := ""
		if last {
			profile = o.memprofile
		}
		r, err := benchOnce(ctx, filepath.Join(tmp, "run"+strconv.Itoa(i)), nil, abs, res, profile, last, o)
		if err != nil {
			return err
		}
		r.RatioToRawGRPC = r.PerSecond / rep.RawGRPC1
		rep.Runs = append(rep.Runs, r)
		if o.etcd == nil {
			continue
		}
		r, err = benchEtcd(ctx, filepath.Join(tmp, "etcd"+strconv.Itoa(i)), i, abs, res, o)
		if err != nil {
			return err
		}
		r.RatioToRawGRPC = r.PerSecond / rep.RawGRPC1
		rep.EtcdRuns = append(rep.EtcdRuns, r)
	}
	for i := 0; o.lifecycle != "" && i < o.runs; i++ {
		lr, err := benchLifecycle(ctx, filepath.Join(tmp, "lifecycle"+strconv.Itoa(i)), abs, o.lifecycle, res, o)
		if err != nil {
			return err
		}
		rep.Lifecycle = append(rep.Lifecycle, lr)
	}
	if o.composeCUE != "" && checkDir(o.composeCUE) {
		if rep.Compose, err = benchComposeCUE(o.composeCUE, o); err != nil {
			return err
		}
	}
	runs := append([]benchRun(nil), rep.Runs...)
	sort.Slice(runs, func(i, j int) bool { return runs[i].Seconds < runs[j].Seconds })
	med := runs[len(runs)/2]
	rep.MedianSeconds, rep.MedianPerSec, rep.MedianRatioRaw = med.Seconds, med.PerSecond, med.RatioToRawGRPC
	if len(rep.EtcdRuns) > 0 {
		er := append([]benchRun(nil), rep.EtcdRuns...)
		sort.Slice(er, func(i, j int) bool { return er[i].Seconds < er[j].Seconds })
		em := er[len(er)/2]
		rep.EtcdMedianSeconds, rep.EtcdMedianPerSec = em.Seconds, em.PerSecond
		rep.EtcdRatioToBbolt = em.PerSecond / med.PerSecond
	}
	if o.output != "table" {
		return writeData(out, o.output, rep)
	}
	fmt.Fprintf(out, "raw limits (same run):\n")
	fmt.Fprintf(out, "  grpc unary loopback, no-op:        %8.0f rt/s (1 in flight)  %8.0f rt/s (256 in flight)\n", rep.RawGRPC1, rep.RawGRPC256)
	fmt.Fprintf(out, "  converge protocol, no-op provider: %8.0f rt/s (256 in flight)\n", rep.Dispatch256)
	fmt.Fprintf(out, "  bbolt, 1,000 puts per fsynced txn: %8.0f puts/s  (%.0f txns/s)\n", rep.BboltPuts, rep.BboltTxns)
	rows := [][]string{{"RUN", "RESOURCES", "WALL", "RES/S", "× RAW GRPC", "DISPATCHED", "PUTS/RES", "COMMITS", "LONGEST COMMIT", "RSS CTRL", "ANON CTRL", "RSS WORKER"}}
	for i, r := range rep.Runs {
		rows = append(rows, []string{strconv.Itoa(i + 1), strconv.Itoa(r.Resources),
			fmt.Sprintf("%.3fs", r.Seconds), fmt.Sprintf("%.0f", r.PerSecond), fmt.Sprintf("%.2f", r.RatioToRawGRPC),
			strconv.FormatUint(r.Dispatched, 10), fmt.Sprintf("%.2f", r.PutsPerRes), strconv.FormatUint(r.Commits, 10),
			fmt.Sprintf("%.3fs", r.LongestCommitSeconds),
			fmt.Sprintf("%.0f MiB", r.ControlRSSMiB), fmt.Sprintf("%.0f MiB", r.ControlAnonMiB), fmt.Sprintf("%.0f MiB", r.WorkerRSSMiB)})
	}
	fmt.Fprintln(out)
	if err := table(out, rows); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nmedian: %.3fs, %.0f resources/s, %.2f × raw grpc (1 in flight)\n", rep.MedianSeconds, rep.MedianPerSec, rep.MedianRatioRaw)
	if len(rep.EtcdRuns) > 0 {
		rows := [][]string{{"ETCD RUN", "RESOURCES", "WALL", "RES/S", "PUTS/RES", "COMMITS", "LONGEST COMMIT"}}
		for i, r := range rep.EtcdRuns {
			rows = append(rows, []string{strconv.Itoa(i + 1), strconv.Itoa(r.Resources),
				fmt.Sprintf("%.3fs", r.Seconds), fmt.Sprintf("%.0f", r.PerSecond), fmt.Sprintf("%.2f", r.PutsPerRes),
				strconv.FormatUint(r.Commits, 10), fmt.Sprintf("%.3fs", r.LongestCommitSeconds)})
		}
		fmt.Fprintln(out)
		if err := table(out, rows); err != nil {
			return err
		}
		fmt.Fprintf(out, "\netcd median: %.3fs, %.0f resources/s, %.2f × bbolt\n", rep.EtcdMedianSeconds, rep.EtcdMedianPerSec, rep.EtcdRatioToBbolt)
	}
	if c := rep.Compose; c != nil && c.Skipped {
		fmt.Fprintf(out, "\ncompose the BOM: not compared, the CUE compose is off the fast path (%s); --compose-cue DIR compares anyway\n", c.Why)
	} else if c != nil {
		path := c.Path
		if c.Why != "" {
			path += ": " + c.Why
		}
		fmt.Fprintf(out, "\ncompose the BOM (%d children, median of %d): go %.4fs wall %.4fs cpu (%.0f MiB allocated), cue (%s) %.4fs wall %.4fs cpu (%.0f MiB allocated): cue/go %.2f× wall, %.2f× cpu\n",
			c.Children, max(o.runs, 1), c.GoSeconds, c.GoCPUSeconds, c.GoAllocMiB, path, c.CUESeconds, c.CUECPUSeconds, c.CUEAllocMiB, c.Ratio, c.CPURatio)
	}
	return printLifecycle(out, rep.Lifecycle)
}

// benchEtcd is benchOnce on an empty etcd store: a prefix of its own
// below --state's, deleted after the run.
func benchEtcd(ctx context.Context, dir string, run int, repoDir string, res *cue.Result, o benchOptions) (benchRun, error) {
	eo := *o.etcd
	eo.Prefix = fmt.Sprintf("%s/bench-%d-%d-%d", strings.TrimSuffix(eo.Prefix, "/"), os.Getpid(), time.Now().UnixNano(), run)
	r, err := benchOnce(ctx, dir, &eo, repoDir, res, "", false, o)
	st, derr := controlplane.OpenEtcd(&eo, false, 5*time.Second)
	if derr == nil {
		derr = st.Drop()
	}
	if err == nil && derr != nil {
		err = fmt.Errorf("bench: remove the run's etcd store: %w", derr)
	}
	return r, err
}

// benchOnce converges res from an empty store in dir (or etcd's, when
// set), timing from Apply to the root's subtree Ready and durably
// committed. Worker start-up is not timed.
func benchOnce(ctx context.Context, dir string, etcd *etcdstate.Options, repoDir string, res *cue.Result, memprofile string, last bool, o benchOptions) (_ benchRun, err error) {
	workers := res.Desired.Settings.Workers
	e, err := startEngine(ctx, controlplane.Options{StateDir: dir, Etcd: etcd, RepoDir: repoDir, Workers: workers,
		Log: o.log, WrapStore: o.wrapStore})
	if err != nil {
		return benchRun{}, err
	}
	defer closeBenchEngine(e, &err)
	want := controlplane.ExpectedWorkers(workers)
	connectBy := time.Now().Add(time.Minute)
	for len(e.Server().Workers()) < want {
		if time.Now().After(connectBy) {
			return benchRun{}, fmt.Errorf("bench: %d of %d workers connected after a minute", len(e.Server().Workers()), want)
		}
		select {
		case <-ctx.Done():
			return benchRun{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	before := e.Store().Stats()
	d := res.Desired
	d.Revision = converge.Revision{Ref: "bench", Hash: "dir:" + repoDir, Dirty: true}
	anon := sampleAnonRSS()
	if last && o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return benchRun{}, fmt.Errorf("cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return benchRun{}, fmt.Errorf("cpuprofile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if cerr := f.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("cpuprofile: %w", cerr)
			}
		}()
	}
	t0 := time.Now()
	if _, err := e.Scheduler().Apply(ctx, &d, res.Schemas); err != nil {
		// A commit that fails while applying (the store is full, say)
		// fails the run like one that fails later: exit 1, naming it.
		return benchRun{}, failed("bench: apply: %w", err)
	}
	for e.Scheduler().Progress().Settled != scheduler.Converged {
		if p := e.Scheduler().Progress(); p.Settled == scheduler.Stuck {
			return benchRun{}, benchStuck(e, p)
		}
		select {
		case <-ctx.Done():
			return benchRun{}, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	if err := e.Scheduler().Flush(ctx); err != nil {
		// Converged in memory before the failing commit said so.
		return benchRun{}, failed("bench: commit: %w", err)
	}
	wall := time.Since(t0)
	if memprofile != "" {
		// The engine is still up: the profile shows what a converged graph
		// keeps alive.
		f, err := os.Create(memprofile)
		if err != nil {
			return benchRun{}, fmt.Errorf("memprofile: %w", err)
		}
		runtime.GC()
		err = pprof.WriteHeapProfile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return benchRun{}, fmt.Errorf("memprofile: %w", err)
		}
	}
	after := e.Store().Stats()
	p := e.Scheduler().Progress()
	n := p.Counts.Total
	r := benchRun{
		Resources: n, Seconds: wall.Seconds(), PerSecond: float64(n) / wall.Seconds(),
		Dispatched: p.Dispatched, Commits: after.Commits - before.Commits, Puts: after.Puts - before.Puts,
	}
	r.PutsPerRes = float64(r.Puts) / float64(n)
	r.CommitsPerRes = float64(r.Commits) / float64(n)
	r.LongestCommitSeconds = after.LongestCommit.Seconds()
	r.ControlRSSMiB = peakRSSMiB(os.Getpid())
	r.ControlAnonMiB = anon()
	if e.Supervisor() != nil {
		for _, pid := range e.Supervisor().Pids() {
			r.WorkerRSSMiB = max(r.WorkerRSSMiB, peakRSSMiB(pid))
		}
	}
	return r, nil
}

// benchStuck is the error of a bench run whose engine is stuck at p: the
// verdict (a failing commit of state included) and the problems.
func benchStuck(e *controlplane.Engine, p scheduler.Progress) error {
	return failed("bench: %s: %v", gitsync.Verdict("stuck", p, ""), e.Scheduler().Problems())
}

// closeBenchEngine closes a bench run's engine; a failure (its last flush,
// say) fails the run unless *err already says why it failed.
func closeBenchEngine(e *controlplane.Engine, err *error) {
	if cerr := e.Close(); cerr != nil && *err == nil {
		*err = fmt.Errorf("close engine: %w", cerr)
	}
}

// sampleAnonRSS samples this process's anonymous resident memory every
// 100 ms until the returned func is called, which returns the peak in MiB
// (0 where /proc is not available).
func sampleAnonRSS() (stop func() float64) {
	done := make(chan struct{})
	peak := make(chan float64, 1)
	go func() {
		var top float64
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			top = max(top, procStatusMiB(os.Getpid(), "RssAnon:"))
			select {
			case <-done:
				peak <- top
				return
			case <-t.C:
			}
		}
	}()
	return func() float64 { close(done); return <-peak }
}

// procStatusMiB reads one kB field of a process's /proc status in MiB.
func procStatusMiB(pid int, field string) float64 {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

// peakRSSMiB reads a process's peak resident set (VmHWM) from /proc; 0
// where /proc is not available.
func peakRSSMiB(pid int) float64 { return procStatusMiB(pid, "VmHWM:") }

// bomTeams is the team-count line of examples/classic/resources/bom.cue.
var bomTeams = regexp.MustCompile(`(?m)^_teams:\s+\d+`)

// scaleBOM returns fsys with the classic BOM rewritten to teams service
// teams (over the same 58 functional domains), for scale runs. With roots
// over 1 it is roots BOMs (classic-00, classic-01, …) of teams/roots teams
// each, their domains prefixed r00-, r01-, … so their children's names do
// not collide.
func scaleBOM(fsys fs.FS, teams, roots int) (fs.FS, error) {
	const bom = "resources/bom.cue"
	b, err := fs.ReadFile(fsys, bom)
	if err != nil {
		return nil, fmt.Errorf("--teams: %w", err)
	}
	if !bomTeams.Match(b) || !bomName.Match(b) || !bomPrefix.Match(b) {
		return nil, fmt.Errorf("--teams: %s has no _teams, name or _prefix line to rewrite", bom)
	}
	if teams < roots {
		return nil, usageErr("--teams %d: want at least one team per root (--roots %d)", teams, roots)
	}
	out := fstest.MapFS{}
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == bom {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		out[p] = &fstest.MapFile{Data: data, Mode: 0o644}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for k := range roots {
		data := b
		n := teams / roots
		if k < teams%roots {
			n++
		}
		data = bomTeams.ReplaceAll(data, []byte("_teams: "+strconv.Itoa(n)))
		p := bom
		if roots > 1 {
			id := fmt.Sprintf("%02d", k)
			data = bomName.ReplaceAll(data, []byte(`name: "classic-`+id+`"`))
			data = bomPrefix.ReplaceAll(data, []byte(`_prefix: "r`+id+`-"`))
			p = "resources/bom-" + id + ".cue"
		}
		out[p] = &fstest.MapFile{Data: data, Mode: 0o644}
	}
	return out, nil
}

// The lines of the classic BOM that scaleBOM rewrites.
var (
	bomName   = regexp.MustCompile(`(?m)^name:\s+"classic"`)
	bomPrefix = regexp.MustCompile(`(?m)^_prefix:\s+""`)
)
