package bench

import (
	"fmt"
	"io"
	"strconv"

	"github.com/convergehq/converge/cmd/converge/internal/view"
)

// WriteText prints rep as converge bench's table: the raw limits, each
// run, the medians, then the comparisons measured (etcd, compose, sync,
// the floor, lifecycle); runs is how many runs the compose median took.
func (rep *Report) WriteText(out io.Writer, runs int) error {
	fmt.Fprintf(out, "raw limits (same run):\n")
	fmt.Fprintf(out, "  grpc unary loopback, no-op:        %8.0f rt/s (1 in flight)  %8.0f rt/s (32 in flight)  %8.0f rt/s (256 in flight)\n",
		rep.RawGRPC1, rep.RawGRPC32, rep.RawGRPC256)
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
	fmt.Fprintf(out, "\nmedian: %.3fs, %.0f resources/s, %.2f × raw grpc (1 in flight), %.2f × raw grpc (32 in flight)\n",
		rep.MedianSeconds, rep.MedianPerSec, rep.MedianRatioRaw, rep.MedianRatioRaw32)
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
			c.Children, runs, c.GoSeconds, c.GoCPUSeconds, c.GoAllocMiB, path, c.CUESeconds, c.CUECPUSeconds, c.CUEAllocMiB, c.Ratio, c.CPURatio)
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
	return writeLifecycle(out, rep.Lifecycle)
}

// writeLifecycle prints bench --lifecycle's runs as a table.
func writeLifecycle(out io.Writer, runs []Lifecycle) error {
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

// WriteText prints r as converge bench --onprem's lines.
func (r *OnpremReport) WriteText(out io.Writer) error {
	fmt.Fprintf(out, "baseline (pgx + RFC 2136, %d at a time): %d objects in %.2fs = %.0f objects/s\n",
		r.Concurrency, r.Objects, r.BaselineSeconds, r.BaselinePerSec)
	fmt.Fprintf(out, "converge sync from empty:               %d objects in %.2fs = %.0f objects/s\n",
		r.Objects, r.ConvergeSeconds, r.ConvergePerSec)
	fmt.Fprintf(out, "ratio: %.2fx the plain client's rate (goal >= 0.8)\n", r.Ratio)
	fmt.Fprintf(out, "no-op sync: %.2fs, %d PostgreSQL transactions committed (%d in a window without a sync), SOA serial %d -> %d\n",
		r.NoopSeconds, r.NoopTransactions, r.NoopControl, r.NoopSOABefore, r.NoopSOAAfter)
	return nil
}
