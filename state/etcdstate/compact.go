package etcdstate

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The writer compacts etcd's history (doc.go, "Compaction"): etcd keeps
// every revision of every key until someone compacts it, and a default
// etcd 3.4 never does. Each write's revision is sampled with the time it
// was written; once a sample is Options.CompactRetention old and the
// last compaction is a quarter of that ago, the writer compacts to it,
// off the commit path. Readers read one revision for the length of a
// read; one that outlives the retention reads again (view retries on
// ErrCompacted). A batch whose journal is committed but not applied is
// read at the revision before its commit marker, so nothing is
// compacted while one is pending.

// revAt is a revision and when it was written.
type revAt struct {
	t   time.Time
	rev int64
}

// compactor is the writer's compaction state.
type compactor struct {
	mu      sync.Mutex
	samples []revAt   // oldest first, at most one a second
	done    int64     // the revision last compacted to
	last    time.Time // when
	running bool
	wg      sync.WaitGroup // the compaction in flight
	err     error          // the last compaction's failure, nil once one succeeds

	// stop ends a defragmentation in flight (Close).
	stop       context.Context
	cancel     context.CancelFunc
	lastDefrag time.Time // when a member was last defragmented (defrag.go)
	defrags    []Defrag
	defragErr  error
}

// compactEvery is how often the writer compacts at most: a quarter of
// the retention, at least a second.
func (s *Store) compactEvery() time.Duration {
	return max(time.Second, s.opts.CompactRetention/4)
}

// noteWrite samples a write's revision and starts a compaction when one
// is due. Callers hold s.mu (so s.pending is stable).
func (s *Store) noteWrite(rev int64) {
	if s.opts.CompactRetention < 0 || rev == 0 {
		return
	}
	c := &s.compact
	now := s.opts.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.samples); n > 0 && now.Sub(c.samples[n-1].t) < time.Second {
		c.samples[n-1] = revAt{now, rev}
	} else {
		c.samples = append(c.samples, revAt{now, rev})
	}
	// The newest sample at least the retention old, and drop the older.
	due := -1
	for i, sm := range c.samples {
		if now.Sub(sm.t) >= s.opts.CompactRetention {
			due = i
		}
	}
	if due < 0 {
		return
	}
	target := c.samples[due].rev
	c.samples = c.samples[due:]
	if s.pending || c.running || target <= c.done || now.Sub(c.last) < s.compactEvery() {
		return
	}
	c.running, c.last = true, now
	c.wg.Add(1)
	go s.compactTo(target)
}

// compactTo compacts etcd's history below rev (physical=false: etcd
// frees the space in the background and the call returns at once;
// physical when a defragmentation may follow), then defragments a
// member if one is due (defrag.go).
func (s *Store) compactTo(rev int64) {
	c := &s.compact
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	var opts []clientv3.CompactOption
	if s.opts.DefragSlack > 0 {
		// The defragmentation after it must see the pages it frees.
		opts = append(opts, clientv3.WithCompactPhysical())
	}
	_, err := s.cli.Compact(ctx, rev, opts...)
	cancel()
	if errors.Is(err, rpctypes.ErrCompacted) {
		err = nil // compacted past it already (etcd's own, or another's)
	}
	c.mu.Lock()
	if err == nil {
		c.done = max(c.done, rev)
	}
	c.err = err
	c.mu.Unlock()
	if err == nil {
		s.maybeDefrag() // still running: no compaction meanwhile
	}
	c.mu.Lock()
	c.running = false
	c.mu.Unlock()
}

// Compacted returns the revision this writer last compacted etcd to (0:
// none yet) and the last compaction's failure, if it failed.
func (s *Store) Compacted() (int64, error) {
	s.compact.mu.Lock()
	defer s.compact.mu.Unlock()
	return s.compact.done, s.compact.err
}
