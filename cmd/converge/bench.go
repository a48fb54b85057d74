package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
	return rep.WriteText(out, max(o.Runs, 1))
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
	return rep.WriteText(out)
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
