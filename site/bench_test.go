package site

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/statetest"
)

// benchSizes are the classic example's size (1 + 4×(2+3×303) + 2 = 3,647
// resources) and a 100,000-resource store; with CONVERGE_SCALE=1 also a
// million-resource store (1 + 58×(2+3×5,747) + 2 = 1,000,097: the classic
// example's 58 domains).
var benchSizes = func() []struct {
	name           string
	domains, teams int
} {
	sizes := []struct {
		name           string
		domains, teams int
	}{
		{"classic", 4, 303},
		{"100k", 20, 1666},
	}
	if os.Getenv("CONVERGE_SCALE") == "1" {
		sizes = append(sizes, struct {
			name           string
			domains, teams int
		}{"1M", 58, 5747})
	}
	return sizes
}()

// benchDir returns where a benchmark writes its site: under
// $SITE_BENCH_DIR when set (to compare file systems, e.g. /dev/shm),
// else in b.TempDir().
func benchDir(b *testing.B) string {
	if d := os.Getenv("SITE_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "site-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return filepath.Join(dir, "site")
	}
	return filepath.Join(b.TempDir(), "site")
}

// cpuTime returns the user and system CPU time this process has used, to
// report a cost that does not depend on how loaded the machine is.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBuild measures a full Build from a real store (NoSync): "fresh"
// into a new directory each time (every file created), "rebuild" into the
// directory of the previous Build of the same store (every file compared,
// none rewritten).
func BenchmarkBuild(b *testing.B) {
	for _, sz := range benchSizes {
		for _, mode := range []string{"fresh", "rebuild"} {
			b.Run(sz.name+"/"+mode, func(b *testing.B) {
				s := statetest.Open(b)
				fill(b, s, sz.domains, sz.teams)
				dir := benchDir(b)
				if mode == "rebuild" {
					if _, err := Build(context.Background(), s, dir, Options{Now: fixedNow}); err != nil {
						b.Fatal(err)
					}
				}
				var st *Stats
				var cpu time.Duration
				n := 0
				runtime.GC()
				b.ResetTimer()
				for b.Loop() {
					out := dir
					if mode == "fresh" {
						b.StopTimer()
						os.RemoveAll(dir)
						out = fmt.Sprintf("%s-%d", dir, n)
						n++
						b.StartTimer()
					}
					cpu0 := cpuTime(b)
					var err error
					if st, err = Build(context.Background(), s, out, Options{Now: fixedNow}); err != nil {
						b.Fatal(err)
					}
					cpu += cpuTime(b) - cpu0
					dir = out
				}
				b.StopTimer()
				os.RemoveAll(dir)
				b.ReportMetric(float64(cpu)/float64(b.N)/1e6, "cpu-ms/op")
				b.ReportMetric(float64(st.Resources), "resources")
				b.ReportMetric(float64(st.Files), "written")
				b.ReportMetric(float64(st.Unchanged), "unchanged")
				b.ReportMetric(float64(st.Largest)/1024, "largest-KiB")
				b.Logf("largest file %s: %d bytes; %d resources, %d files", st.LargestFile, st.Largest, st.Resources, st.Files+st.Unchanged)
			})
		}
	}
}

// BenchmarkUpdateOne measures Update after one resource changed phase (and
// got an event): its page, its list pages, its root's graph and page, the
// index and summary.json.
func BenchmarkUpdateOne(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			s := statetest.Open(b)
			fill(b, s, sz.domains, sz.teams)
			bld := NewBuilder(s, benchDir(b), Options{})
			if _, err := bld.Build(context.Background()); err != nil {
				b.Fatal(err)
			}
			id := converge.ID(fmt.Sprintf("vpc/fd0-team%d", sz.teams/2))
			var st *Stats
			var cpu time.Duration
			i := 0
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				r, err := s.Resource(context.Background(), id)
				if err != nil {
					b.Fatal(err)
				}
				r.Phase = converge.PhaseReady
				if i%2 == 0 {
					r.Phase = converge.PhaseFailed
				}
				i++
				ev := converge.Event{Time: epoch, Resource: id, Type: string(r.Phase), Message: "flip"}
				if err := s.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{r}, Events: []converge.Event{ev}}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				cpu0 := cpuTime(b)
				if st, err = bld.Update(context.Background(), []converge.ID{id}); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime(b) - cpu0
			}
			b.ReportMetric(float64(cpu)/float64(b.N)/1e6, "cpu-ms/op")
			b.ReportMetric(float64(st.Files), "files")
		})
	}
}

// BenchmarkRenderResource measures rendering one resource's page (a shard
// holding it alone), without writing it.
func BenchmarkRenderResource(b *testing.B) {
	s := statetest.Open(b)
	fill(b, s, 1, 10)
	bld := NewBuilder(s, filepath.Join(b.TempDir(), "site"), Options{})
	if _, err := bld.Build(context.Background()); err != nil {
		b.Fatal(err)
	}
	r, err := s.Resource(context.Background(), "route/fd0-team3")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := bld.renderShard(shardOf(r.ID()), []*converge.Resource{r}); err != nil {
			b.Fatal(err)
		}
	}
}
