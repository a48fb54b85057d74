package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge/cmd/converge/internal/bench"
	"github.com/convergehq/converge/cmd/converge/internal/view"
)

// newBenchCommand is `converge bench`: its flags, and the report printed
// (the measuring is package bench's).
func newBenchCommand(g *globals) *cobra.Command {
	var (
		o              bench.Options
		onprem, output string
		sizes          []int
		curve          string
	)
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
			if len(sizes) > 0 {
				return runBenchCurve(c.Context(), c.OutOrStdout(), o, sizes, curve)
			}
			if onprem != "" {
				return runBenchOnprem(c.Context(), c.OutOrStdout(), onprem, o, output)
			}
			o.Log, o.WrapStore, o.Etcd, o.Start = g.logger(c.ErrOrStderr(), false), g.wrapStore, g.etcd, startEngine
			o.ComposeCUEGiven = c.Flags().Changed("compose-cue")
			if o.Sync {
				var err error
				if o.Converge, err = selfPath(); err != nil {
					return err
				}
			}
			return runBench(c.Context(), c.OutOrStdout(), o, output)
		},
	}
	f := c.Flags()
	f.IntVar(&o.Runs, "runs", 3, "converge runs (each from an empty store)")
	f.DurationVar(&o.Transport, "transport", time.Second, "how long to measure each raw rate")
	f.StringVar(&o.Dir, "dir", "examples/classic", "repository directory to converge")
	f.StringVar(&onprem, "onprem", "", "bench examples/onprem (--teams, default 500) by converge sync against a plain pgx and RFC 2136 client, on the servers examples/onprem/servers.sh started in this directory")
	f.StringVar(&o.MemProfile, "memprofile", "", "write a heap profile of the control plane after the last run (go tool pprof)")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the control plane over the last run, from apply to converged (go tool pprof)")
	f.IntVar(&o.Teams, "teams", 0, "scale run: rewrite the classic BOM's team count (e.g. 33000 for ~100,000 resources, 333000 for ~1,000,000)")
	f.IntVar(&o.Roots, "roots", 1, "scale run: split --teams over this many classicbom roots (their own BOM files)")
	f.StringVar(&o.Lifecycle, "lifecycle", "", "also time the recompose of this updated BOM (replacing resources/bom.cue) and the teardown of the whole tree")
	f.StringVar(&o.ComposeCUE, "compose-cue", "examples/datadriven", "also time composing the BOM with this repository's CUE compose against the Go composer (\"\" skips; skipped when absent, and with --teams when the expression is off the fast path unless given)")
	f.BoolVar(&o.Sync, "sync", false, "also time `converge sync` of the repository from an empty store, --runs times: the user's path, a new process, loading included")
	f.IntSliceVar(&sizes, "sizes", nil, "cost against size: converge the classic BOM at each of these sizes (resources, e.g. 10000,100000,300000,1000000), each in its own process, and print time and peak RSS per resource")
	f.StringVar(&curve, "curve", "", "with --sizes: also write the figures to PREFIX.csv and draw them in PREFIX.svg")
	addOutputFlag(c, &output, "table")
	return c
}

// benchRun is one converge of the repository from an empty store.

// runBench measures (package bench) and prints the report.
func runBench(ctx context.Context, out io.Writer, o bench.Options, output string) error {
	if err := checkOutput(output, "table", "json", "yaml"); err != nil {
		return err
	}
	if o.Roots < 1 {
		return usageErr("--roots %d: want at least 1", o.Roots)
	}
	if o.Roots > 1 && o.Teams == 0 {
		return usageErr("--roots needs --teams")
	}
	if o.Teams > 0 && o.Teams < o.Roots {
		return usageErr("--teams %d: want at least one team per root (--roots %d)", o.Teams, o.Roots)
	}
	rep, err := bench.Measure(ctx, o)
	if bench.IsFailure(err) {
		return failed("%w", err)
	}
	if err != nil {
		return err
	}
	if output != "table" {
		return view.WriteData(out, output, rep)
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
	if err := view.Table(out, rows); err != nil {
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
		if err := view.Table(out, rows); err != nil {
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
			c.Children, max(o.Runs, 1), c.GoSeconds, c.GoCPUSeconds, c.GoAllocMiB, path, c.CUESeconds, c.CUECPUSeconds, c.CUEAllocMiB, c.Ratio, c.CPURatio)
	}
	if len(rep.SyncRuns) > 0 {
		rows := [][]string{{"SYNC RUN", "RESOURCES", "WALL", "RES/S", "RSS SYNC"}}
		for i, r := range rep.SyncRuns {
			rows = append(rows, []string{strconv.Itoa(i + 1), strconv.Itoa(r.Resources), fmt.Sprintf("%.3fs", r.Seconds),
				fmt.Sprintf("%.0f", r.PerSecond), fmt.Sprintf("%.0f MiB", r.PeakRSSMiB)})
		}
		fmt.Fprintln(out, "\nconverge sync from an empty store (the user's path, loading included):")
		if err := view.Table(out, rows); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nsync median: %.3fs, %.2f× the bench runs' median\n", rep.SyncMedianSeconds, rep.SyncToBench)
	}
	if rep.Floor != nil {
		fmt.Fprintf(out, "\n%s\n", rep.Floor)
	}
	return printLifecycle(out, rep.Lifecycle)
}

// printLifecycle prints bench --lifecycle's runs as a table.
func printLifecycle(out io.Writer, runs []bench.Lifecycle) error {
	if len(runs) == 0 {
		return nil
	}
	rows := [][]string{{"RUN", "RECOMPOSE DISPATCHED", "RECOMPOSE WALL", "TEARDOWN RESOURCES", "TEARDOWN DISPATCHED", "TEARDOWN WALL"}}
	for i, r := range runs {
		rows = append(rows, []string{fmt.Sprint(i + 1), fmt.Sprint(r.RecomposeDispatched), fmt.Sprintf("%.3fs", r.RecomposeSeconds),
			fmt.Sprint(r.TeardownResources), fmt.Sprint(r.TeardownDispatched), fmt.Sprintf("%.3fs", r.TeardownSeconds)})
	}
	fmt.Fprintln(out, "\nlifecycle (updated BOM recompose, then delete of the whole tree):")
	return view.Table(out, rows)
}

// runBenchOnprem runs bench --onprem (bench.Onprem) and prints its report.
func runBenchOnprem(ctx context.Context, out io.Writer, servers string, o bench.Options, output string) error {
	self, err := selfPath()
	if err != nil {
		return err
	}
	dir := o.Dir
	if dir == "examples/classic" {
		dir = "examples/onprem"
	}
	rep, err := bench.Onprem(ctx, out, bench.OnpremOptions{Servers: servers, Dir: dir, Teams: o.Teams, Converge: self})
	if err != nil {
		return err
	}
	if output != "table" {
		return view.WriteData(out, output, rep)
	}
	fmt.Fprintf(out, "baseline (pgx + RFC 2136, %d at a time): %d objects in %.2fs = %.0f objects/s\n",
		rep.Concurrency, rep.Objects, rep.BaselineSeconds, rep.BaselinePerSec)
	fmt.Fprintf(out, "converge sync from empty:               %d objects in %.2fs = %.0f objects/s\n",
		rep.Objects, rep.ConvergeSeconds, rep.ConvergePerSec)
	fmt.Fprintf(out, "ratio: %.2fx the plain client's rate (goal >= 0.8)\n", rep.Ratio)
	fmt.Fprintf(out, "no-op sync: %.2fs, %d PostgreSQL transactions committed (%d in a window without a sync), SOA serial %d -> %d\n",
		rep.NoopSeconds, rep.NoopTransactions, rep.NoopControl, rep.NoopSOABefore, rep.NoopSOAAfter)
	return nil
}

// runBenchCurve runs bench --sizes (bench.Curve) and writes its figures.
func runBenchCurve(ctx context.Context, out io.Writer, o bench.Options, sizes []int, prefix string) error {
	for i, n := range sizes {
		if n < 3 || (i > 0 && n <= sizes[i-1]) {
			return usageErr("--sizes %v: want ascending sizes of at least 3 resources", sizes)
		}
	}
	self, err := selfPath()
	if err != nil {
		return err
	}
	pts, err := bench.Curve(ctx, out, bench.CurveOptions{Sizes: sizes, Converge: self, Dir: o.Dir, Transport: o.Transport})
	if err != nil {
		return err
	}
	if prefix == "" {
		return nil
	}
	write := func(name string, f func(io.Writer) error) error {
		var b bytes.Buffer
		if err := f(&b); err != nil {
			return err
		}
		if err := os.WriteFile(name, b.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(out, "wrote", name)
		return nil
	}
	if err := write(prefix+".csv", func(w io.Writer) error { return bench.WriteCSV(w, pts) }); err != nil {
		return err
	}
	return write(prefix+".svg", func(w io.Writer) error { return bench.WriteSVG(w, pts) })
}

// selfPath is the converge executable for bench's child processes: the
// path this process was started by when it names one (a test's
// converge on PATH is its test binary under that name), else the
// running executable.
func selfPath() (string, error) {
	if p, err := exec.LookPath(os.Args[0]); err == nil {
		return filepath.Abs(p)
	}
	return os.Executable()
}
