package etcdstate

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge/state/internal/rules"
)

// SetFailAfter makes the next journal writes stop after chunks applied
// transactions, as a crash between chunks would (0: never).
func (s *Store) SetFailAfter(chunks int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failAfter = chunks
}

// SetFailBeforeCommit makes journal writes stop before their commit
// marker, as a crash before the commit point would.
func (s *Store) SetFailBeforeCommit(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failBeforeCommit = on
}

// Lease returns the writer lock's lease.
func (s *Store) Lease() clientv3.LeaseID { return s.lease }

// IgnoreTermEnd makes the store write on after its term ended, as a
// process does whose writes reach etcd before it notices the lost
// lease: only the server's fence can refuse them then.
func (s *Store) IgnoreTermEnd() { s.opts.termCtx = nil }

// Pause stops renewing the term's lease without revoking it, as a leader
// process that was stopped (SIGSTOP, a long GC pause, a partition)
// does: the lease expires a TTL later and another replica can win.
func (t *Term) Pause() { t.session.Orphan() }

// KV returns the store's rules' key-value store.
func (s *Store) KV() rules.KV { return etcdKV{s} }

// PartsMagic is what a value stored in parts holds first.
const PartsMagic = partsMagic

// WithClock returns o with the clock compaction reads set to now.
func WithClock(o Options, now func() time.Time) Options {
	o.now = now
	return o
}

// Follow is follow, for the tests of its retries.
var Follow = follow

// SetOpTimeout sets the bound of one request until the returned func
// puts it back.
func SetOpTimeout(d time.Duration) func() {
	old := opTimeout
	opTimeout = d
	return func() { opTimeout = old }
}

// ReadApart reads the meta bucket's format key twice in one view, pause
// apart: a read that outlasts one request's bound.
func (s *Store) ReadApart(ctx context.Context, pause time.Duration) error {
	return s.view(ctx, func(r rules.Reader) error {
		if _, err := r.Get(rules.Meta, rules.MetaFormat); err != nil {
			return err
		}
		time.Sleep(pause)
		_, err := r.Get(rules.Meta, rules.MetaFormat)
		return err
	})
}
