package controlplane

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// tuneMemoryLimit starts followLiveHeap once a process: the limit is the
// process's, whatever number of engines it starts.
var tuneMemoryLimit sync.Once

// memoryLimitFor is the soft memory limit for a live heap of live bytes:
// floor, or two fifths above the live heap plus 64 MiB for what else the
// runtime holds (stacks, buffers) when that is more. The collector then
// runs once about 40% of the live heap was allocated again, not back to
// back as it does under a limit below the live heap, and the heap stays
// under the twice-live that GOGC alone would let it reach. (A quarter
// above left the collector 65% of a 1M etcd leader's CPU: each cycle
// marks a 1.5 GB heap of pointers. Half above kept a 1M bbolt converge
// at 1.3 GiB of heap; two fifths cost it 2-5 s of its ~55 s, in
// docs/BENCHMARKS.md.)
func memoryLimitFor(live, floor int64) int64 {
	return max(floor, live+live*2/5+64<<20)
}

// followLiveHeap sets the soft memory limit from the live heap after
// every second, for the life of the process.
func followLiveHeap(floor int64) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	last := floor
	for range time.Tick(time.Second) {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return // a runtime without the metric: the floor stays
		}
		if l := memoryLimitFor(int64(sample[0].Value.Uint64()), floor); l != last {
			debug.SetMemoryLimit(l)
			last = l
		}
	}
}
