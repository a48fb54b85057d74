package etcdstate

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/internal/rules"
)

// FormatVersion is the version of the key layout this build writes
// (meta key "m/format"). Open refuses a prefix written by a newer one,
// and a writer raises an older one's: layout 2 adds s/ID, a big declared
// spec kept apart from its row, which layout 1 binaries cannot read.
const FormatVersion = 2

// ErrFenced is returned by a write when the store no longer holds its
// writer's lock (its lease expired, or another writer took the prefix
// over) or a fence of Options.Fence failed: the write was refused, and
// nothing of it was applied past the batch journal's commit point.
var ErrFenced = errors.New("write refused: this store no longer holds the writer's lock")

// ErrReadOnly is returned by a write to a store opened with
// Options.ReadOnly.
var ErrReadOnly = errors.New("store is open read-only")

// Options configure Open. Endpoints and Prefix are required unless
// Client is set (then only Prefix).
type Options struct {
	// Endpoints are the etcd members' client URLs or host:port pairs.
	Endpoints []string
	// Prefix is the key prefix everything lives under, e.g.
	// "/converge/prod"; a trailing "/" is added.
	Prefix string
	// TLS, if set, is the client's TLS configuration.
	TLS *tls.Config
	// Username and Password authenticate to etcd when Username is set.
	Username, Password string
	// DialTimeout bounds connecting; default 5s.
	DialTimeout time.Duration
	// Client, if set, is used instead of dialing Endpoints; Close leaves
	// it open.
	Client *clientv3.Client

	// ReadOnly opens without taking the writer's lock: reads work
	// alongside a writer, writes return ErrReadOnly.
	ReadOnly bool
	// LockTimeout is how long Open waits for another writer to release
	// the prefix before returning state.ErrLocked; default 1s.
	LockTimeout time.Duration
	// LockTTL is the writer lease's time to live: a writer that stops
	// renewing it (crashed, paused, cut off) loses the lock this long
	// after, and its later writes are refused (ErrFenced). Default 10s.
	LockTTL time.Duration
	// Fence, if set, returns comparisons every write transaction is also
	// conditioned on (e.g. that an election key still holds this
	// replica's revision); when one fails the write returns ErrFenced.
	Fence func() []clientv3.Cmp

	// MaxEvents and MaxRevisions are state.Options' retention limits
	// (defaults 200000 and 1000).
	MaxEvents, MaxRevisions int
	// MaxTxnOps is the most operations one etcd transaction may hold:
	// the server's --max-txn-ops, default 128. A batch needing more is
	// written through the batch journal (doc.go).
	MaxTxnOps int
	// MaxTxnBytes bounds the keys and values of one transaction, under
	// the server's --max-request-bytes (1.5 MiB by default); default
	// 1 MiB. A value bigger than it less 1 KiB is stored in parts of
	// half of it (doc.go, "Big values").
	MaxTxnBytes int

	// CompactRetention is how much of etcd's history the writer keeps:
	// after its writes, it compacts etcd to the revision it wrote this
	// long ago, at most every quarter of it (doc.go, "Compaction").
	// etcd's compaction is the cluster's, every prefix's: a cluster
	// that compacts itself (--auto-compaction-retention) or whose
	// operator does sets it below 0, which turns it off. Default 1m.
	CompactRetention time.Duration
	// DefragSlack, when above 0, has the writer defragment a member
	// after a compaction when the member's database file is bigger than
	// what it uses by this many bytes and by half of what it uses: one
	// member every 10 minutes at most, followers first, the raft leader
	// after it handed its leadership on (defrag.go). 0 leaves
	// defragmenting to the operator.
	DefragSlack int64

	// now is the clock compaction reads; time.Now unless a test sets it.
	now func() time.Time

	// termLease, when set (Term.Open), is the lease the writer's lock is
	// taken under instead of one of the store's own: the election
	// session's, so the lock and the leadership end together. Its owner
	// keeps it alive; Close deletes the lock key but leaves the lease.
	termLease clientv3.LeaseID
	// termCtx, when set (Term.Open), is done once the term is lost:
	// every write in flight is cut short then, and refused after.
	termCtx context.Context
	// termLost, when set (Term.Open), ends the term: a write found its
	// fence gone (another replica leads), which etcd says before the
	// session's keep-alive does.
	termLost func()
}

const (
	defaultLockTimeout = time.Second
	defaultLockTTL     = 10 * time.Second
	defaultMaxRevs     = 1000
	defaultMaxTxnOps   = 128
	defaultMaxTxnBytes = 1 << 20
	defaultCompact     = time.Minute
)

// opTimeout bounds one request to etcd (a read's page, a transaction):
// a member that does not answer in this long is taken as gone. A var
// for the tests of reads that outlast it.
var opTimeout = 30 * time.Second

// Store is converge's durable state under one etcd key prefix. It
// implements state.Backend. It is safe for concurrent use: writes are
// serialised by mu, and every read is one consistent etcd revision. Its
// reads, Commit and Check are the store's rules (state/internal/rules)
// over the prefix (kv.go).
type Store struct {
	*rulesStore
	cli     *clientv3.Client
	ownCli  bool
	p       string // the key prefix, ending in "/"
	opts    Options
	lease   clientv3.LeaseID // the store's own lock lease (0 under a term's)
	lockRev int64            // the lock key's create revision; 0 when read-only
	stopKA  context.CancelFunc

	mu sync.Mutex // serialises writes; guards pending and failAfter
	// pending is set when a batch journal may be committed but not
	// fully applied: the next write finishes it first.
	pending bool
	// failAfter, when > 0, makes the journal apply stop with an error
	// after that many chunks (tests of a crash between chunks).
	failAfter int
	// failBeforeCommit makes a journal write stop before its commit
	// marker (tests of a crash before the commit point).
	failBeforeCommit bool

	compact compactor
	pace    pacer // the journal's transactions in flight (pace.go)

	statsMu sync.Mutex // guards stats
	stats   state.Stats
}

// rulesStore is the store's rules, embedded in Store under a name that
// is not exported.
type rulesStore = rules.Store

// Key sub-spaces under the prefix (doc.go, "Keys").
const (
	kResources  = "r/"
	kOwners     = "o/"
	kProducers  = "p/"
	kKinds      = "k/"
	kConfigs    = "c/"
	kBindings   = "b/"
	kDeliveries = "d/"
	kEvents     = "e/"
	kRevisions  = "v/"
	kMeta       = "m/"
	kSpecs      = "s/"
	kJournal    = "j/"
	kLock       = "lock"
	// kVerifyProbe is never written: Verify deletes it to make its
	// transaction a write.
	kVerifyProbe = "verify-probe"

	mFormat = kMeta + "format"

	jCommit = kJournal + "commit"
	jParts  = kJournal + "p/"
)

// Open connects to etcd and opens the store under opts.Prefix. Unless
// opts.ReadOnly, it takes the prefix's writer lock (waiting up to
// opts.LockTimeout, then returning state.ErrLocked, wrapped) and
// finishes a batch a crashed writer left committed in its journal.
func Open(opts Options) (*Store, error) {
	if err := fill(&opts); err != nil {
		return nil, fmt.Errorf("open etcd state: %w", err)
	}
	s := &Store{p: opts.Prefix, opts: opts, cli: opts.Client}
	s.compact.stop, s.compact.cancel = context.WithCancel(context.Background())
	if s.cli == nil {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   opts.Endpoints,
			TLS:         opts.TLS,
			Username:    opts.Username,
			Password:    opts.Password,
			DialTimeout: opts.DialTimeout,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			return nil, fmt.Errorf("open etcd state %s: %w", s.where(), noAnswer(err))
		}
		s.cli, s.ownCli = cli, true
	}
	s.rulesStore = rules.New(etcdKV{s}, rules.Options{
		Name: s.where(), Owners: rules.PerChild,
		MaxEvents: opts.MaxEvents, MaxRevisions: opts.MaxRevisions,
		// A batch's events are chunks well under one etcd request (a
		// value over it is stored in parts: chunk.go).
		MaxChunk: opts.MaxTxnBytes / 4,
	})
	if err := s.open(); err != nil {
		s.Close()
		return nil, fmt.Errorf("open etcd state %s: %w", s.where(), err)
	}
	return s, nil
}

// noAnswer says what a timeout reaching the cluster most likely means.
func noAnswer(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no member answered in time (a wrong address, or a cluster that wants TLS?): %w", err)
	}
	return err
}

func fill(o *Options) error {
	if o.Client == nil && len(o.Endpoints) == 0 {
		return errors.New("no endpoints")
	}
	if o.Prefix == "" || strings.Trim(o.Prefix, "/") == "" {
		return errors.New("empty key prefix")
	}
	if !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = defaultLockTimeout
	}
	if o.LockTTL <= 0 {
		o.LockTTL = defaultLockTTL
	}
	if o.MaxEvents <= 0 {
		o.MaxEvents = state.DefaultMaxEvents
	}
	if o.MaxRevisions <= 0 {
		o.MaxRevisions = defaultMaxRevs
	}
	if o.MaxTxnOps <= 0 {
		o.MaxTxnOps = defaultMaxTxnOps
	}
	if o.MaxTxnOps < 4 {
		return fmt.Errorf("MaxTxnOps %d: want at least 4", o.MaxTxnOps)
	}
	if o.MaxTxnBytes <= 0 {
		o.MaxTxnBytes = defaultMaxTxnBytes
	}
	if o.CompactRetention == 0 {
		o.CompactRetention = defaultCompact
	}
	if o.now == nil {
		o.now = time.Now
	}
	return nil
}

// where names the store in errors: endpoints and prefix.
func (s *Store) where() string {
	eps := s.opts.Endpoints
	if s.cli != nil && len(eps) == 0 {
		eps = s.cli.Endpoints()
	}
	return strings.Join(eps, ",") + s.p
}

// URL returns the store's address in --state form,
// etcd://HOST:PORT[,HOST:PORT…]/PREFIX.
func (s *Store) URL() string {
	var hosts []string
	eps := s.opts.Endpoints
	if len(eps) == 0 {
		eps = s.cli.Endpoints()
	}
	for _, e := range eps {
		_, h, ok := strings.Cut(e, "://")
		if !ok {
			h = e
		}
		hosts = append(hosts, h)
	}
	return "etcd://" + strings.Join(hosts, ",") + "/" + strings.Trim(s.p, "/")
}

func (s *Store) open() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.DialTimeout+s.opts.LockTimeout)
	defer cancel()
	if err := s.checkFormat(clientv3.WithRequireLeader(ctx)); err != nil {
		if ctx.Err() != nil {
			return noAnswer(err)
		}
		return quorumLost(err)
	}
	if s.opts.ReadOnly {
		return nil
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	if err := s.writeFormat(ctx); err != nil {
		return err
	}
	s.pending = true
	wctx, wcancel := s.writeContext(context.Background())
	defer wcancel()
	return s.finish(wctx)
}

// checkFormat refuses a prefix written by a newer layout.
func (s *Store) checkFormat(ctx context.Context) error {
	resp, err := s.cli.Get(ctx, s.p+mFormat)
	if err != nil {
		return fmt.Errorf("read format: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	v := resp.Kvs[0].Value
	if len(v) != 8 {
		return fmt.Errorf("meta: format: malformed value %x", v)
	}
	if f := binary.BigEndian.Uint64(v); f > FormatVersion {
		return fmt.Errorf("format %d: %w (%d)", f, state.ErrNewerFormat, FormatVersion)
	}
	return nil
}

// writeFormat records the layout version in a fresh prefix, or raises an
// older one's (versions are 8 bytes big-endian, so they compare as bytes).
func (s *Store) writeFormat(ctx context.Context) error {
	k, v := s.p+mFormat, string(u64(FormatVersion))
	_, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, v)).
		Else(clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(k), "<", v)}, []clientv3.Op{clientv3.OpPut(k, v)}, nil)).
		Commit()
	if err != nil {
		return fmt.Errorf("write format: %w", err)
	}
	return nil
}

// lock takes the prefix's writer lock: the lock key, created under a
// lease this store keeps alive. Every write is conditioned on the key
// still having the create revision it got here.
func (s *Store) lock(ctx context.Context) error {
	leaseID := s.opts.termLease
	if leaseID == 0 {
		lease, err := s.cli.Grant(ctx, int64((s.opts.LockTTL+time.Second-1)/time.Second))
		if err != nil {
			return fmt.Errorf("grant lease: %w", err)
		}
		s.lease, leaseID = lease.ID, lease.ID
	}
	key := s.p + kLock
	host, _ := os.Hostname()
	holder := fmt.Sprintf("%s pid %d", host, os.Getpid())
	deadline := time.Now().Add(s.opts.LockTimeout)
	for {
		resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, holder, clientv3.WithLease(leaseID))).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return fmt.Errorf("take lock: %w", err)
		}
		if resp.Succeeded {
			s.lockRev = resp.Header.Revision
			break
		}
		if time.Now().After(deadline) {
			by := ""
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				by = " (held by " + string(kvs[0].Value) + ")"
			}
			return fmt.Errorf("%s%s: %w (waited %v)", key, by, state.ErrLocked, s.opts.LockTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if s.lease == 0 {
		return nil // the term's session keeps its lease alive
	}
	kctx, stop := context.WithCancel(context.Background())
	ch, err := s.cli.KeepAlive(kctx, s.lease)
	if err != nil {
		stop()
		return fmt.Errorf("keep lock alive: %w", err)
	}
	s.stopKA = stop
	go func() {
		for range ch { // drain: the client renews as long as we listen
		}
	}()
	return nil
}

// Close releases the writer's lock (revoking its lease) and the client
// if Open dialed it. It is safe to call more than once.
func (s *Store) Close() error {
	var err error
	if s.stopKA != nil {
		s.stopKA()
		s.stopKA = nil
	}
	s.compact.cancel()
	s.compact.wg.Wait()
	if s.lease != 0 && s.cli != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		// A lease already gone (expired, revoked) released the lock too.
		if _, rerr := s.cli.Revoke(ctx, s.lease); rerr != nil && !errors.Is(rerr, rpctypes.ErrLeaseNotFound) {
			err = fmt.Errorf("close etcd state: release lock (it expires by itself within %v): %w", s.opts.LockTTL, rerr)
		}
		cancel()
		s.lease = 0
	}
	if s.opts.termLease != 0 && s.lockRev != 0 && s.cli != nil && (s.opts.termCtx == nil || s.opts.termCtx.Err() == nil) {
		// (A lost term's lease took the lock with it.)
		// The lease is the term's: release the lock alone, if still ours.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		key := s.p + kLock
		_, derr := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", s.lockRev)).
			Then(clientv3.OpDelete(key)).Commit()
		cancel()
		if derr != nil {
			err = fmt.Errorf("close etcd state: release lock (it goes with the term's lease): %w", derr)
		}
	}
	if s.ownCli && s.cli != nil {
		if cerr := s.cli.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close etcd state: %w", cerr)
		}
		s.cli = nil
	}
	return err
}

// Stats returns the counters of committed writes since Open. PageBytes
// is always 0 (etcd has no pages to count from here).
func (s *Store) Stats() state.Stats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	return s.stats
}

// count adds one committed write to Stats.
func (s *Store) count(w written, took time.Duration) {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if w.puts+w.dels == 0 {
		return
	}
	s.stats.Commits++
	s.stats.Puts += w.puts
	s.stats.Deletes += w.dels
	s.stats.Bytes += w.bytes
	s.stats.LongestCommit = max(s.stats.LongestCommit, took)
}

// writeContext bounds one write: ctx, opTimeout, and the term's end.
func (s *Store) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return s.termContext(ctx)
}

// termEnded reports whether the store is a term's (Term.Open) whose
// term has ended: it can neither write nor vouch for what it read.
func (s *Store) termEnded() bool { return s.opts.termCtx != nil && s.opts.termCtx.Err() != nil }

// termContext bounds one request: ctx, opTimeout, and the term's end.
func (s *Store) termContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	return s.termBound(ctx, cancel)
}

// termBound ends ctx (with cancel) when the term ends, if the store is
// a term's.
func (s *Store) termBound(ctx context.Context, cancel context.CancelFunc) (context.Context, context.CancelFunc) {
	if s.opts.termCtx == nil {
		return ctx, cancel
	}
	stop := context.AfterFunc(s.opts.termCtx, cancel)
	return ctx, func() { stop(); cancel() }
}

// fence returns the comparisons every write is conditioned on.
func (s *Store) fence() []clientv3.Cmp {
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.p+kLock), "=", s.lockRev)}
	if s.opts.Fence != nil {
		cmps = append(cmps, s.opts.Fence()...)
	}
	return cmps
}

var u64 = rules.U64

var _ state.Backend = (*Store)(nil)

// Verify returns nil while this store still holds the prefix's writer
// lock, its prefix still holds the store (its format key) and every
// fence of Options.Fence holds; otherwise ErrFenced, wrapped: a replica
// that lost its election, or whose prefix was wiped, must not report
// success. A read-only store holds nothing to verify.
func (s *Store) Verify(ctx context.Context) error {
	if s.opts.ReadOnly {
		return nil
	}
	if s.termEnded() {
		// Its lease, which holds the lock, is gone or cannot be renewed:
		// say so at once rather than ask a cluster that may not answer.
		return fmt.Errorf("verify etcd state %s: %w: the leader's term ended", s.where(), ErrFenced)
	}
	ctx, cancel := s.termContext(ctx)
	defer cancel()
	cmps := append(s.fence(), clientv3.Compare(clientv3.CreateRevision(s.p+mFormat), ">", 0))
	// A txn without writes may be answered from a member behind the
	// store's own last write (seen on a three-member cluster: a header
	// revision below the lock's); deleting a key that never exists makes
	// it a write, ordered after every earlier one, that changes nothing.
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(clientv3.OpDelete(s.p + kVerifyProbe)).Commit()
	if err != nil && s.termEnded() {
		return fmt.Errorf("verify etcd state %s: %w: the leader's term ended (%v)", s.where(), ErrFenced, err)
	}
	if err != nil {
		return fmt.Errorf("verify etcd state %s: %w", s.where(), err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("verify etcd state %s: %w (its lock, its leadership or its prefix is gone)", s.where(), ErrFenced)
	}
	return nil
}

// Drop deletes every key under the store's prefix, the writer's lock
// included, in one transaction, and closes the store. It is for scratch
// stores (a benchmark's runs); it returns ErrReadOnly on a reader.
func (s *Store) Drop() error {
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	s.mu.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	_, err := s.txn(ctx, nil, []clientv3.Op{clientv3.OpDelete(s.p, clientv3.WithPrefix())})
	cancel()
	s.mu.Unlock()
	if err != nil {
		s.Close()
		return fmt.Errorf("drop etcd state %s: %w", s.where(), err)
	}
	return s.Close()
}
