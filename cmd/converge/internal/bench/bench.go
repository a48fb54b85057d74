// Package bench measures converge on this machine, for `converge bench`:
// converging a repository from an empty store with its real worker
// processes (Measure), against the raw limits it is judged by, measured in
// the same run (loopback gRPC round trips, converge's worker protocol with
// a no-op provider, batched fsynced bbolt puts); optionally on etcd, the
// recompose and teardown of an updated BOM (Lifecycle), composing the BOM
// in CUE against the Go composer (Compose), and the onprem example
// against a plain client on real servers (Onprem). It measures and
// reports data (-o json prints a Report as it is); Report.WriteText and
// OnpremReport.WriteText are the command's tables, WriteCSV and WriteSVG
// its curve.
//
// Read first: Options, Measure and Report.
package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"testing/fstest"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/etcdstate"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/controlplane"
)

// Options say what to measure.
type Options struct {
	// Runs is how many converges from an empty store (and lifecycle
	// runs, and composes per side).
	Runs int
	// Transport is how long to measure each raw rate.
	Transport time.Duration
	// Dir is the repository directory to converge.
	Dir string
	// Teams, when over 0, rewrites the classic BOM's team count, split
	// over Roots classicbom roots (ScaleBOM).
	Teams, Roots int
	// MemProfile and CPUProfile, when set, are where the last run's heap
	// profile (after it converged) and CPU profile (from Apply to
	// converged) are written.
	MemProfile, CPUProfile string
	// Lifecycle is an updated BOM file: also time its recompose and the
	// teardown of the whole tree (lifecycle.go).
	Lifecycle string
	// ComposeCUE is a repository whose classicbom composes in CUE: also
	// time composing the BOM with it and with the Go composer
	// (compose.go); skipped when it holds no converge.cue.
	ComposeCUE string
	// ComposeCUEGiven: ComposeCUE was asked for, so a scale run compares
	// even when the expression is off the fast path (CUE's evaluator at
	// a million children costs minutes and gigabytes of its own).
	ComposeCUEGiven bool
	// Log is the engines' logger.
	Log *slog.Logger
	// WrapStore wraps each engine's store (tests only).
	WrapStore func(scheduler.Store) scheduler.Store
	// Etcd, when set, is where every run is repeated on an etcd store,
	// each under its own prefix below Etcd's, deleted after it.
	Etcd *etcdstate.Options
	// Sync also times `converge sync` of the (scaled) repository from an
	// empty store, Runs times: the user's path, loading included
	// (userpath.go). Converge is the executable it runs.
	Sync     bool
	Converge string
	// Start starts a control plane: the command's, which gives builtin
	// workers their environment; controlplane.Start when nil.
	Start func(context.Context, controlplane.Options) (*controlplane.Engine, error)
}

// Failure is an error that means the measured thing failed (the
// repository is invalid, the graph got stuck, a commit failed), not that
// the bench could not run: the command's exit 1.
type Failure struct{ Err error }

func (f *Failure) Error() string { return f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

func failure(format string, args ...any) error {
	return &Failure{fmt.Errorf(format, args...)}
}

// IsFailure reports whether err is (or wraps) a Failure.
func IsFailure(err error) bool {
	var f *Failure
	return errors.As(err, &f)
}

func (o *Options) start(ctx context.Context, co controlplane.Options) (*controlplane.Engine, error) {
	if o.Start != nil {
		return o.Start(ctx, co)
	}
	return controlplane.Start(ctx, co)
}

// Run is one converge of the repository from an empty store.
type Run struct {
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
	// ControlRSSMiB is the process's peak resident set (VmHWM) from
	// Apply to converged: the peak is reset before each run (and the
	// heap of the BOM's evaluation returned to the system first) where
	// the kernel allows it (resetPeakRSS), else it is the process's peak
	// so far, an upper bound.
	ControlRSSMiB float64 `json:"control_plane_peak_rss_mib"`
	// ControlAnonMiB is the peak of the control plane's anonymous
	// resident memory (its heap; RSS also counts the pages of state.db
	// that bbolt's mmap touched), sampled every 100 ms during the run.
	ControlAnonMiB float64 `json:"control_plane_peak_anon_rss_mib"`
	WorkerRSSMiB   float64 `json:"worker_peak_rss_mib"`
	RatioToRawGRPC float64 `json:"ratio_to_raw_grpc"`
	// RatioToRawGRPC32 is the rate over raw unary gRPC at 32 in flight
	// (the yardstick for the classic example: ≥ 0.5×).
	RatioToRawGRPC32 float64 `json:"ratio_to_raw_grpc_32_inflight"`
	// Depth and ValidationsPerSec are the converged graph's (Floor),
	// measured after the last run on bbolt only.
	Depth             int     `json:"depth,omitempty"`
	ValidationsPerSec float64 `json:"validations_per_second,omitempty"`
}

// Report is what Measure measured.
type Report struct {
	RawGRPC1       float64 `json:"raw_grpc_rt_per_second_1_inflight"`
	RawGRPC32      float64 `json:"raw_grpc_rt_per_second_32_inflight"`
	RawGRPC256     float64 `json:"raw_grpc_rt_per_second_256_inflight"`
	Dispatch256    float64 `json:"protocol_rt_per_second_256_inflight"`
	BboltPuts      float64 `json:"bbolt_batched_puts_per_second"`
	BboltTxns      float64 `json:"bbolt_fsynced_txns_per_second"`
	Runs           []Run   `json:"runs"`
	MedianSeconds  float64 `json:"median_seconds"`
	MedianPerSec   float64 `json:"median_resources_per_second"`
	MedianRatioRaw float64 `json:"median_ratio_to_raw_grpc"`
	// MedianRatioRaw32 is the median run's rate over RawGRPC32.
	MedianRatioRaw32 float64     `json:"median_ratio_to_raw_grpc_32_inflight"`
	Lifecycle        []Lifecycle `json:"lifecycle,omitempty"`
	// EtcdRuns are the same runs on the etcd store of --state etcd://…;
	// EtcdRatioToBbolt is their median rate over the bbolt runs'.
	EtcdRuns          []Run   `json:"etcd_runs,omitempty"`
	EtcdMedianPerSec  float64 `json:"etcd_median_resources_per_second,omitempty"`
	EtcdRatioToBbolt  float64 `json:"etcd_ratio_to_bbolt,omitempty"`
	EtcdMedianSeconds float64 `json:"etcd_median_seconds,omitempty"`
	// Compose compares composing the BOM in CUE and in Go (--compose-cue).
	Compose *Compose `json:"compose,omitempty"`
	// SyncRuns are the user's path (Options.Sync); SyncMedianSeconds
	// their median, SyncToBench its ratio to the bench runs' median.
	SyncRuns          []SyncRun `json:"sync_runs,omitempty"`
	SyncMedianSeconds float64   `json:"sync_median_seconds,omitempty"`
	SyncToBench       float64   `json:"sync_to_bench_ratio,omitempty"`
	// Floor is the time a perfect engine would need here, from the raw
	// rates above, and the median run's ratio to it.
	Floor *Floor `json:"floor,omitempty"`
}

// Measure converges o.Dir from an empty store o.Runs times, with the
// raw limits and the optional parts o asks for, all in this run.
func Measure(ctx context.Context, o Options) (*Report, error) {
	if o.Roots < 1 {
		o.Roots = 1
	}
	fsys, res, err := load(o.Dir, o)
	if err != nil {
		return nil, err
	}
	rep := &Report{}
	one, err := providers.MeasureTransport(ctx, 1, o.Transport)
	if err != nil {
		return nil, err
	}
	many, err := providers.MeasureTransport(ctx, 256, o.Transport)
	if err != nil {
		return nil, err
	}
	some, err := providers.MeasureTransport(ctx, 32, o.Transport)
	if err != nil {
		return nil, err
	}
	rep.RawGRPC32 = some.RawUnary
	rep.RawGRPC1, rep.RawGRPC256, rep.Dispatch256 = one.RawUnary, many.RawUnary, many.Dispatch
	tmp, err := os.MkdirTemp("", "converge-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if rep.BboltPuts, rep.BboltTxns, err = state.MeasureRaw(filepath.Join(tmp, "raw"), o.Transport); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	for i := 0; i < o.Runs; i++ {
		last := i == o.Runs-1
		profile := ""
		if last {
			profile = o.MemProfile
		}
		r, err := once(ctx, filepath.Join(tmp, "run"+strconv.Itoa(i)), nil, abs, res, profile, last, o)
		if err != nil {
			return nil, err
		}
		r.RatioToRawGRPC = r.PerSecond / rep.RawGRPC1
		r.RatioToRawGRPC32 = r.PerSecond / rep.RawGRPC32
		rep.Runs = append(rep.Runs, r)
		if o.Etcd == nil {
			continue
		}
		r, err = onEtcd(ctx, filepath.Join(tmp, "etcd"+strconv.Itoa(i)), i, abs, res, o)
		if err != nil {
			return nil, err
		}
		r.RatioToRawGRPC = r.PerSecond / rep.RawGRPC1
		rep.EtcdRuns = append(rep.EtcdRuns, r)
	}
	for i := 0; o.Sync && i < o.Runs; i++ {
		sr, err := syncOnce(ctx, o.Converge, filepath.Join(tmp, "sync"+strconv.Itoa(i)), fsys)
		if err != nil {
			return nil, err
		}
		rep.SyncRuns = append(rep.SyncRuns, sr)
	}
	for i := 0; o.Lifecycle != "" && i < o.Runs; i++ {
		lr, err := lifecycle(ctx, filepath.Join(tmp, "lifecycle"+strconv.Itoa(i)), abs, o.Lifecycle, res, o)
		if err != nil {
			return nil, err
		}
		rep.Lifecycle = append(rep.Lifecycle, lr)
	}
	if o.ComposeCUE != "" && isRepository(o.ComposeCUE) {
		if rep.Compose, err = composeCUE(o.ComposeCUE, o); err != nil {
			return nil, err
		}
	}
	if len(rep.Runs) > 0 {
		med := median(rep.Runs)
		rep.MedianSeconds, rep.MedianPerSec, rep.MedianRatioRaw = med.Seconds, med.PerSecond, med.RatioToRawGRPC
		rep.MedianRatioRaw32 = med.RatioToRawGRPC32
		if len(rep.EtcdRuns) > 0 {
			em := median(rep.EtcdRuns)
			rep.EtcdMedianSeconds, rep.EtcdMedianPerSec = em.Seconds, em.PerSecond
			rep.EtcdRatioToBbolt = em.PerSecond / med.PerSecond
		}
		if len(rep.SyncRuns) > 0 {
			secs := make([]float64, len(rep.SyncRuns))
			for i, r := range rep.SyncRuns {
				secs[i] = r.Seconds
			}
			sort.Float64s(secs)
			rep.SyncMedianSeconds = secs[len(secs)/2]
			rep.SyncToBench = rep.SyncMedianSeconds / med.Seconds
		}
		last := rep.Runs[len(rep.Runs)-1]
		rep.Floor = floor(rep, last.Resources, last.Depth, last.ValidationsPerSec)
	}
	return rep, nil
}

// load reads the repository in dir, its BOM scaled to o.Teams when set
// (ScaleBOM); an invalid one is a Failure.
func load(dir string, o Options) (fs.FS, *cue.Result, error) {
	fsys := os.DirFS(dir)
	if o.Teams > 0 {
		scaled, err := ScaleBOM(fsys, o.Teams, o.Roots)
		if err != nil {
			return nil, nil, err
		}
		fsys = scaled
	}
	res, err := cue.Load(fsys, ".", cue.Options{})
	if err != nil {
		return nil, nil, err
	}
	if len(res.Findings) > 0 {
		return nil, nil, failure("%s is invalid: %s", dir, res.Findings[0])
	}
	return fsys, res, nil
}

// median is the run of median wall time.
func median(runs []Run) Run {
	s := append([]Run(nil), runs...)
	sort.Slice(s, func(i, j int) bool { return s[i].Seconds < s[j].Seconds })
	return s[len(s)/2]
}

// onEtcd is once on an empty etcd store: a prefix of its own
// below --state's, deleted after the run.
func onEtcd(ctx context.Context, dir string, run int, repoDir string, res *cue.Result, o Options) (Run, error) {
	eo := *o.Etcd
	eo.Prefix = fmt.Sprintf("%s/bench-%d-%d-%d", strings.TrimSuffix(eo.Prefix, "/"), os.Getpid(), time.Now().UnixNano(), run)
	r, err := once(ctx, dir, &eo, repoDir, res, "", false, o)
	st, derr := controlplane.OpenEtcd(&eo, false, 5*time.Second)
	if derr == nil {
		derr = st.Drop()
	}
	if err == nil && derr != nil {
		err = fmt.Errorf("bench: remove the run's etcd store: %w", derr)
	}
	return r, err
}

// once converges res from an empty store in dir (or etcd's, when
// set), timing from Apply to the root's subtree Ready and durably
// committed. Worker start-up is not timed.
func once(ctx context.Context, dir string, etcd *etcdstate.Options, repoDir string, res *cue.Result, memprofile string, last bool, o Options) (_ Run, err error) {
	workers := res.Desired.Settings.Workers
	e, err := o.start(ctx, controlplane.Options{StateDir: dir, Etcd: etcd, RepoDir: repoDir, Workers: workers,
		Log: o.Log, WrapStore: o.WrapStore})
	if err != nil {
		return Run{}, err
	}
	defer closeEngine(e, &err)
	want := controlplane.ExpectedWorkers(workers)
	connectBy := time.Now().Add(time.Minute)
	for len(e.Server().Workers()) < want {
		if time.Now().After(connectBy) {
			return Run{}, fmt.Errorf("bench: %d of %d workers connected after a minute", len(e.Server().Workers()), want)
		}
		select {
		case <-ctx.Done():
			return Run{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	before := e.Store().Stats()
	d := res.Desired
	d.Revision = converge.Revision{Ref: "bench", Hash: "dir:" + repoDir, Dirty: true}
	// The run's peak is the control plane's from here: the heap this
	// process used before (evaluating the BOM, which converge sync does
	// in a child process, and the runs before) goes back to the system
	// and the peak restarts at what is resident now.
	runtime.GC()
	debug.FreeOSMemory()
	resetPeakRSS()
	anon := sampleAnonRSS()
	if last && o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return Run{}, fmt.Errorf("cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return Run{}, fmt.Errorf("cpuprofile: %w", err)
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
		return Run{}, failure("bench: apply: %w", err)
	}
	for e.Scheduler().Progress().Settled != scheduler.Converged {
		if p := e.Scheduler().Progress(); p.Settled == scheduler.Stuck {
			return Run{}, stuck(e, p)
		}
		select {
		case <-ctx.Done():
			return Run{}, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	if err := e.Scheduler().Flush(ctx); err != nil {
		// Converged in memory before the failing commit said so.
		return Run{}, failure("bench: commit: %w", err)
	}
	wall := time.Since(t0)
	peak := peakRSSMiB(os.Getpid()) // before the profile and the graph's facts allocate their own
	if memprofile != "" {
		// The engine is still up: the profile shows what a converged graph
		// keeps alive.
		f, err := os.Create(memprofile)
		if err != nil {
			return Run{}, fmt.Errorf("memprofile: %w", err)
		}
		runtime.GC()
		runtime.GC() // the profile is the last finished cycle's: one more, so it is this state's
		err = pprof.WriteHeapProfile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return Run{}, fmt.Errorf("memprofile: %w", err)
		}
	}
	anonMiB := anon() // before the graph's facts allocate their own
	var depth int
	var validations float64
	if last {
		// The engine is still up: the graph's facts for the floor.
		if _, depth, validations, err = graphFacts(ctx, e.Scheduler().Graph(), res.Desired.Resources, res.Schemas); err != nil {
			return Run{}, fmt.Errorf("bench: read the graph: %w", err)
		}
	}
	after := e.Store().Stats()
	p := e.Scheduler().Progress()
	n := p.Counts.Total
	r := Run{
		Resources: n, Seconds: wall.Seconds(), PerSecond: float64(n) / wall.Seconds(),
		Dispatched: p.Dispatched, Commits: after.Commits - before.Commits, Puts: after.Puts - before.Puts,
	}
	r.PutsPerRes = float64(r.Puts) / float64(n)
	r.CommitsPerRes = float64(r.Commits) / float64(n)
	r.LongestCommitSeconds = after.LongestCommit.Seconds()
	r.ControlRSSMiB = peak
	r.ControlAnonMiB = anonMiB
	r.Depth, r.ValidationsPerSec = depth, validations
	if e.Supervisor() != nil {
		for _, pid := range e.Supervisor().Pids() {
			r.WorkerRSSMiB = max(r.WorkerRSSMiB, peakRSSMiB(pid))
		}
	}
	return r, nil
}

// stuck is the error of a bench run whose engine is stuck at p: the
// verdict (a failing commit of state included) and the problems.
func stuck(e *controlplane.Engine, p scheduler.Progress) error {
	return failure("bench: %s: %v", gitsync.Verdict("stuck", p, ""), e.Scheduler().Problems())
}

// closeEngine closes a bench run's engine; a failure (its last flush,
// say) fails the run unless *err already says why it failed.
func closeEngine(e *controlplane.Engine, err *error) {
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

// resetPeakRSS restarts this process's VmHWM at its current resident set
// (Linux 4.0 and later; elsewhere nothing happens and the peak stays the
// process's so far).
func resetPeakRSS() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSSMiB reads a process's peak resident set (VmHWM) from /proc; 0
// where /proc is not available.
func peakRSSMiB(pid int) float64 { return procStatusMiB(pid, "VmHWM:") }

// BOMTeams is the team-count line of examples/classic/resources/bom.cue.
var BOMTeams = regexp.MustCompile(`(?m)^_teams:\s+\d+`)

// ScaleBOM returns fsys with the classic BOM rewritten to teams service
// teams (over the same 58 functional domains), for scale runs. With roots
// over 1 it is roots BOMs (classic-00, classic-01, …) of teams/roots teams
// each, their domains prefixed r00-, r01-, … so their children's names do
// not collide.
func ScaleBOM(fsys fs.FS, teams, roots int) (fs.FS, error) {
	const bom = "resources/bom.cue"
	b, err := fs.ReadFile(fsys, bom)
	if err != nil {
		return nil, fmt.Errorf("--teams: %w", err)
	}
	if !BOMTeams.Match(b) || !bomName.Match(b) || !bomPrefix.Match(b) {
		return nil, fmt.Errorf("--teams: %s has no _teams, name or _prefix line to rewrite", bom)
	}
	if teams < roots {
		return nil, fmt.Errorf("--teams %d: want at least one team per root (--roots %d)", teams, roots)
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
		data = BOMTeams.ReplaceAll(data, []byte("_teams: "+strconv.Itoa(n)))
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

// The lines of the classic BOM that ScaleBOM rewrites.
var (
	bomName   = regexp.MustCompile(`(?m)^name:\s+"classic"`)
	bomPrefix = regexp.MustCompile(`(?m)^_prefix:\s+""`)
)
