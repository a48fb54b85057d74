// Package profile profiles a whole converge command when the
// environment asks (CONVERGE_CPUPROFILE, CONVERGE_HEAPPROFILE): the CPU
// for the command's duration, the heap at each new high. It is how the
// figures of docs/BENCHMARKS.md that are not `bench` runs were taken
// apart (go tool pprof).
package profile

import (
	"fmt"
	"os"
	"runtime/metrics"
	"runtime/pprof"
	"time"
)

// EnvCPU names a file that receives a CPU profile of the whole
// command (go tool pprof): how the figures of docs/BENCHMARKS.md that
// are not `bench` runs were taken apart.
const EnvCPU = "CONVERGE_CPUPROFILE"

// StartCPU profiles the process into the file f until the
// returned function runs.
func StartCPU(f string) (func(), error) {
	out, err := os.Create(f)
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", EnvCPU, err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		out.Close()
		return nil, fmt.Errorf("$%s: %w", EnvCPU, err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := out.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "converge: $%s: %v\n", EnvCPU, err)
		}
	}, nil
}

// EnvHeap names a file that receives a heap profile of the
// command (go tool pprof) each time its live heap reaches a new high by
// a tenth: the profile left is the heap near its peak, which a profile
// at exit (after a delete, say) would not show.
const EnvHeap = "CONVERGE_HEAPPROFILE"

// EnvHeapEvery, a duration (e.g. "10s"), adds to EnvHeap's profile one
// every that long into FILE.SECONDS (seconds since the start): the heap
// in the middle of a run, which the peak's profile does not show.
const EnvHeapEvery = "CONVERGE_HEAPPROFILE_EVERY"

// WatchHeap checks the live heap every second until the returned
// function runs, and writes a heap profile into the file f at each new
// high (and every $CONVERGE_HEAPPROFILE_EVERY into f.SECONDS).
func WatchHeap(f string) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	every, _ := time.ParseDuration(os.Getenv(EnvHeapEvery))
	go func() {
		defer close(stopped)
		sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		var peak uint64
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		start, next := time.Now(), time.Now().Add(every)
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				if every > 0 && now.After(next) {
					next = next.Add(every)
					if err := writeHeapProfile(fmt.Sprintf("%s.%d", f, int(now.Sub(start).Seconds()))); err != nil {
						fmt.Fprintf(os.Stderr, "converge: $%s: %v\n", EnvHeapEvery, err)
					}
				}
			}
			metrics.Read(sample)
			if sample[0].Value.Kind() != metrics.KindUint64 {
				return
			}
			live := sample[0].Value.Uint64()
			if live < peak+peak/10 || live < 16<<20 {
				continue
			}
			peak = live
			if err := writeHeapProfile(f); err != nil {
				fmt.Fprintf(os.Stderr, "converge: $%s: %v\n", EnvHeap, err)
				return
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// writeHeapProfile replaces the file f with a heap profile.
func writeHeapProfile(f string) error {
	tmp := f + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(out); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, f)
}
