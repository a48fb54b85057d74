package etcdstate

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge/state/internal/rules"
)

// etcdKV is the store's rules' key-value store (rules.KV) over the
// prefix: View reads one etcd revision, Update collects its writes in an
// overlay and commits them in one transaction or through the batch
// journal (journal.go).
type etcdKV struct{ s *Store }

func (kv etcdKV) View(ctx context.Context, fn func(rules.Reader) error) error {
	return kv.s.view(ctx, fn)
}

func (kv etcdKV) Update(ctx context.Context, fn func(rules.Writer) error) error {
	return kv.s.update(ctx, fn)
}

// bucketPrefix is each bucket's key sub-space under the prefix (doc.go,
// "Keys").
var bucketPrefix = [rules.NumBuckets]string{
	rules.Resources:  kResources,
	rules.Owners:     kOwners,
	rules.Producers:  kProducers,
	rules.Kinds:      kKinds,
	rules.Configs:    kConfigs,
	rules.Bindings:   kBindings,
	rules.Deliveries: kDeliveries,
	rules.Events:     kEvents,
	rules.Revisions:  kRevisions,
	rules.Meta:       kMeta,
	rules.Specs:      kSpecs,
}

// pageSize is the keys of the first page of a scan (scan grows the next).
const pageSize = 1000

// readWidth is how many read requests one read has in flight at once.
const readWidth = 16

// view runs fn at one revision: the newest, or, while a batch journal
// is committed but not yet applied, the one before its commit marker
// (the state before that batch, whole). A revision compacted away
// meanwhile starts the read again. Each request is bounded by
// opTimeout, the read as a whole only by ctx (and a term's end): a
// Load or Check of a million rows is hundreds of requests, minutes on a
// loaded machine.
//
// Its requests require a leader: a member cut off from its quorum
// answers at once that it has none (quorumLost), instead of leaving the
// read to time out as if no member answered.
func (s *Store) view(ctx context.Context, fn func(rules.Reader) error) error {
	return s.viewAt(ctx, func(r *reader) error { return fn(r) })
}

// viewAt is view with the reader itself.
func (s *Store) viewAt(ctx context.Context, fn func(*reader) error) error {
	for try := 0; ; try++ {
		// A term store's reads end with the term, like its writes: a
		// leader cut off from etcd must not wait out opTimeout.
		tctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		tctx, cancel = s.termBound(tctx, cancel)
		err := s.viewOnce(tctx, fn)
		cancel()
		if err != nil && s.termEnded() {
			return fmt.Errorf("%w: the leader's term ended (%v)", ErrFenced, err)
		}
		if errors.Is(err, rpctypes.ErrCompacted) && try < 3 {
			continue
		}
		return quorumLost(err)
	}
}

// quorumLost says what etcd's "no leader" means, or returns err.
func quorumLost(err error) error {
	if errors.Is(err, rpctypes.ErrNoLeader) {
		return fmt.Errorf("etcd has lost its quorum (the members that answer have no leader): %w", err)
	}
	return err
}

func (s *Store) viewOnce(ctx context.Context, fn func(*reader) error) error {
	cctx, cancel := context.WithTimeout(ctx, opTimeout)
	resp, err := s.cli.Get(cctx, s.p+jCommit)
	cancel()
	if err != nil {
		return err
	}
	rev := resp.Header.Revision
	if len(resp.Kvs) > 0 {
		rev = resp.Kvs[0].CreateRevision - 1
	}
	return fn(&reader{s: s, ctx: ctx, rev: rev})
}

// reader reads the prefix at one revision (0: the newest).
type reader struct {
	s   *Store
	ctx context.Context
	rev int64
}

// call bounds one request of the read by opTimeout.
func (r *reader) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.ctx, opTimeout)
}

// at is the revision r reads: its own, or, reading the newest, the
// revision an answer was at (so a value's parts are read as its header).
func (r *reader) at(answered int64) int64 {
	if r.rev != 0 {
		return r.rev
	}
	return answered
}

func (r *reader) Get(b rules.Bucket, key []byte) ([]byte, error) {
	vals, err := r.get([]string{bucketPrefix[b] + string(key)})
	if err != nil {
		return nil, err
	}
	return vals[0], nil
}

func (r *reader) GetMany(b rules.Bucket, keys [][]byte) ([][]byte, error) {
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = bucketPrefix[b] + string(k)
	}
	return r.get(ks)
}

// get returns the values of keys (below the prefix; nil for an absent
// one), MaxTxnOps a transaction, a few transactions at once.
func (r *reader) get(keys []string) ([][]byte, error) {
	out := make([][]byte, len(keys))
	n := r.s.opts.MaxTxnOps
	groups := (len(keys) + n - 1) / n
	if groups == 0 {
		return out, nil
	}
	err := parallel(groups, readWidth, func(g int) error {
		lo, hi := g*n, min(len(keys), (g+1)*n)
		gets := make([]clientv3.Op, 0, hi-lo)
		for _, k := range keys[lo:hi] {
			gets = append(gets, clientv3.OpGet(r.s.p+k, clientv3.WithRev(r.rev)))
		}
		cctx, cancel := r.call()
		resp, err := r.s.cli.Txn(cctx).Then(gets...).Commit()
		cancel()
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		for i, rr := range resp.Responses {
			if kvs := rr.GetResponseRange().Kvs; len(kvs) > 0 {
				v, err := r.whole(keys[lo+i], kvs[0].Value, r.at(resp.Header.Revision))
				if err != nil {
					return fmt.Errorf("read: %w", err)
				}
				if v == nil {
					v = []byte{}
				}
				out[lo+i] = v
			}
		}
		return nil
	})
	return out, err
}

// keyRange returns the keys (below the prefix) a scan of b over rg
// reads: from lo (inclusive) to hi (exclusive).
func keyRange(b rules.Bucket, rg rules.Range) (lo, hi string) {
	p := bucketPrefix[b] + string(rg.Prefix)
	lo, hi = p, clientv3.GetPrefixRangeEnd(p)
	switch {
	case rg.From == nil:
	case !rg.Desc:
		lo = max(lo, bucketPrefix[b]+string(rg.From))
	default:
		hi = min(hi, bucketPrefix[b]+string(rg.From)+"\x00")
	}
	return lo, hi
}

func (r *reader) Scan(b rules.Bucket, rg rules.Range, fn func(k, v []byte) error) error {
	lo, hi := keyRange(b, rg)
	n := len(bucketPrefix[b])
	err := r.scan(lo, hi, rg.Desc, rg.KeysOnly, pageSize, func(k string, v []byte) error {
		return fn([]byte(k[n:]), v)
	})
	if err == rules.ErrStop {
		return nil
	}
	return err
}

// scan calls fn with every key from lo to hi (below the prefix), in key
// order or reversed, first page keys at a time, then pages that grow
// while their values are small (about pageBytes, at most maxPage keys),
// until fn returns an error, which scan returns. The next page is read
// while fn goes through this one: a Load of a million rows is a few
// hundred round trips, overlapped with decoding them.
func (r *reader) scan(lo, hi string, desc, keysOnly bool, page int, fn func(k string, v []byte) error) error {
	if lo >= hi {
		return nil
	}
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel() // a page still being read when fn stops the scan
	type answer struct {
		resp *clientv3.GetResponse
		err  error
	}
	read := func(lo, hi string, page int) <-chan answer {
		opts := []clientv3.OpOption{clientv3.WithRange(r.s.p + hi), clientv3.WithLimit(int64(page)), clientv3.WithRev(r.rev)}
		if keysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		if desc {
			opts = append(opts, clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
		}
		ch := make(chan answer, 1)
		go func() {
			cctx, ccancel := context.WithTimeout(ctx, opTimeout)
			resp, err := r.s.cli.Get(cctx, r.s.p+lo, opts...)
			ccancel()
			ch <- answer{resp, err}
		}()
		return ch
	}
	next := read(lo, hi, page)
	for {
		a := <-next
		if a.err != nil {
			return a.err
		}
		resp := a.resp
		more := resp.More && len(resp.Kvs) > 0
		if more {
			last := string(resp.Kvs[len(resp.Kvs)-1].Key[len(r.s.p):])
			if desc {
				hi = last
			} else {
				lo = last + "\x00"
			}
			more = lo < hi
		}
		if more {
			next = read(lo, hi, nextPage(page, resp.Kvs))
			page = nextPage(page, resp.Kvs)
		}
		for _, kv := range resp.Kvs {
			k := string(kv.Key[len(r.s.p):])
			v := kv.Value
			if !keysOnly {
				var err error
				if v, err = r.whole(k, v, r.at(resp.Header.Revision)); err != nil {
					return err
				}
				if v == nil {
					v = []byte{}
				}
			}
			if err := fn(k, v); err != nil {
				return err
			}
		}
		if !more {
			return nil
		}
	}
}

// Pages of a scan: about pageBytes of keys and values, at most maxPage
// keys, growing at most fourfold a page.
const (
	pageBytes = 4 << 20
	maxPage   = 10000
)

// nextPage is the size of the page after one of page keys that returned
// kvs.
func nextPage(page int, kvs []*mvccpb.KeyValue) int {
	n := 0
	for _, kv := range kvs {
		n += len(kv.Key) + len(kv.Value)
	}
	avg := max(1, n/max(1, len(kvs)))
	return max(1, min(maxPage, 4*page, pageBytes/avg))
}

func (r *reader) Count(b rules.Bucket, prefix []byte) (int, error) {
	lo, hi := keyRange(b, rules.Range{Prefix: prefix})
	return r.count(lo, hi)
}

func (r *reader) count(lo, hi string) (int, error) {
	cctx, cancel := r.call()
	defer cancel()
	resp, err := r.s.cli.Get(cctx, r.s.p+lo, clientv3.WithRange(r.s.p+hi), clientv3.WithCountOnly(), clientv3.WithRev(r.rev))
	if err != nil {
		return 0, err
	}
	return int(resp.Count), nil
}

func (r *reader) FirstKeys(b rules.Bucket, prefixes [][]byte) ([][]byte, error) {
	return firstKeys(b, prefixes, r.Scan)
}

// firstKeys returns the first key under each prefix, scanning a few
// prefixes at once.
func firstKeys(b rules.Bucket, prefixes [][]byte, scan func(rules.Bucket, rules.Range, func(k, v []byte) error) error) ([][]byte, error) {
	out := make([][]byte, len(prefixes))
	err := parallel(max(1, len(prefixes)), readWidth, func(i int) error {
		if len(prefixes) == 0 {
			return nil
		}
		return scan(b, rules.Range{Prefix: prefixes[i], KeysOnly: true}, func(k, _ []byte) error {
			out[i] = bytes.Clone(k)
			return rules.ErrStop
		})
	})
	return out, err
}

// kvOp is one absolute write under the prefix: put key=val, or delete
// key. Applying the same ops twice leaves what applying them once does,
// which is what makes the batch journal safe to replay.
type kvOp struct {
	key string // below the prefix
	val []byte
	del bool
}

// update runs fn over a fresh write overlay, then writes what it
// changed (nothing if it changed nothing) and counts it in Stats.
func (s *Store) update(ctx context.Context, fn func(rules.Writer) error) error {
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	err := s.updateOnce(ctx, fn)
	if err != nil && s.opts.termLost != nil && !s.termEnded() && (errors.Is(err, ErrFenced) || s.fenceGone()) {
		// Another replica leads (a refused write, or one whose rules
		// failed on what the next leader wrote): the term is over, and
		// etcd said so before the session's keep-alive.
		s.opts.termLost()
	}
	if err != nil && s.termEnded() && !errors.Is(err, ErrFenced) {
		// The leader's term ended (its lease is gone): whatever was in
		// flight was cut short, and nothing more will be accepted.
		return fmt.Errorf("%w: the leader's term ended (%v)", ErrFenced, err)
	}
	return err
}

// fenceGone reports whether etcd says a fence of this store's writes no
// longer holds (a second's wait at most; false when it does not say).
func (s *Store) fenceGone() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := s.cli.Txn(ctx).If(s.fence()...).Commit()
	return err == nil && !resp.Succeeded
}

func (s *Store) updateOnce(ctx context.Context, fn func(rules.Writer) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := s.writeContext(ctx)
	defer cancel()
	if err := s.finish(ctx); err != nil {
		return err
	}
	start := time.Now()
	w := &writer{reader: reader{s: s, ctx: ctx}, read: map[string][]byte{}, ops: map[string]kvOp{}}
	if err := fn(w); err != nil {
		return err
	}
	if len(w.ops) == 0 {
		return nil
	}
	ops := make([]kvOp, 0, len(w.ops))
	for _, op := range w.ops {
		ops = append(ops, op)
	}
	ops, err := s.storeParts(ctx, ops)
	if err != nil {
		return err
	}
	slices.SortFunc(ops, func(a, b kvOp) int { return cmp.Compare(a.key, b.key) })
	done, err := s.write(ctx, ops)
	if err != nil {
		return err
	}
	s.count(done, time.Since(start))
	s.noteWrite(done.rev)
	return nil
}

// writer is one write: it reads the newest revision once per key (and
// sees its own changes), and collects its writes in ops, one per key,
// the last winning.
type writer struct {
	reader
	mu     sync.Mutex        // guards read (prefetch fills it concurrently)
	read   map[string][]byte // key → stored value, nil if absent
	ops    map[string]kvOp
	sorted []string // the keys of ops, sorted; nil once a key is added
}

func (w *writer) Get(b rules.Bucket, key []byte) ([]byte, error) {
	return w.get(bucketPrefix[b] + string(key))
}

// get returns key's value as this write leaves it, or nil.
func (w *writer) get(key string) ([]byte, error) {
	if op, ok := w.ops[key]; ok {
		if op.del {
			return nil, nil
		}
		return op.val, nil
	}
	w.mu.Lock()
	v, ok := w.read[key]
	w.mu.Unlock()
	if ok {
		return v, nil
	}
	if err := w.prefetch([]string{key}); err != nil {
		return nil, err
	}
	return w.read[key], nil
}

func (w *writer) GetMany(b rules.Bucket, keys [][]byte) ([][]byte, error) {
	if err := w.Prefetch(b, keys); err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	for i, k := range keys {
		var err error
		if out[i], err = w.Get(b, k); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (w *writer) Prefetch(b rules.Bucket, keys [][]byte) error {
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = bucketPrefix[b] + string(k)
	}
	return w.prefetch(ks)
}

// prefetch reads the keys not read yet, MaxTxnOps a transaction, a few
// transactions at once.
func (w *writer) prefetch(keys []string) error {
	var missing []string
	seen := map[string]bool{}
	for _, k := range keys {
		if _, ok := w.read[k]; !ok && !seen[k] {
			if _, ok := w.ops[k]; !ok {
				missing = append(missing, k)
				seen[k] = true
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	vals, err := w.reader.get(missing)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, k := range missing {
		w.read[k] = vals[i]
	}
	return nil
}

func (w *writer) Put(b rules.Bucket, key, val []byte) error {
	w.set(kvOp{key: bucketPrefix[b] + string(key), val: val})
	return nil
}

// Delete deletes key unless it is known to be absent.
func (w *writer) Delete(b rules.Bucket, key []byte) error {
	k := bucketPrefix[b] + string(key)
	if _, ok := w.ops[k]; !ok {
		w.mu.Lock()
		v, read := w.read[k]
		w.mu.Unlock()
		if read && v == nil {
			return nil
		}
	}
	w.set(kvOp{key: k, del: true})
	return nil
}

func (w *writer) set(op kvOp) {
	if _, ok := w.ops[op.key]; !ok {
		w.sorted = nil
	}
	w.ops[op.key] = op
}

// overlay returns the keys this write changed from lo to hi, sorted.
func (w *writer) overlay(lo, hi string) []string {
	if w.sorted == nil {
		w.sorted = make([]string, 0, len(w.ops))
		for k := range w.ops {
			w.sorted = append(w.sorted, k)
		}
		slices.Sort(w.sorted)
	}
	i := sort.SearchStrings(w.sorted, lo)
	j := sort.SearchStrings(w.sorted, hi)
	return w.sorted[i:j]
}

// Scan merges what is stored with this write's own changes.
func (w *writer) Scan(b rules.Bucket, rg rules.Range, fn func(k, v []byte) error) error {
	lo, hi := keyRange(b, rg)
	over := w.overlay(lo, hi)
	if rg.Desc {
		over = slices.Clone(over)
		slices.Reverse(over)
	}
	n := len(bucketPrefix[b])
	before := func(a, b string) bool { return a < b != rg.Desc }
	// emit passes over's keys up to stored (all with stored ""), the
	// ones put to fn.
	emit := func(stored string, all bool) error {
		for len(over) > 0 && (all || before(over[0], stored) || over[0] == stored) {
			k := over[0]
			over = over[1:]
			if op := w.ops[k]; !op.del {
				v := op.val
				if rg.KeysOnly {
					v = nil
				}
				if err := fn([]byte(k[n:]), v); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := w.scan(lo, hi, rg.Desc, rg.KeysOnly, 64, func(k string, v []byte) error {
		if err := emit(k, false); err != nil {
			return err
		}
		if _, changed := w.ops[k]; changed {
			return nil // emitted as this write leaves it
		}
		return fn([]byte(k[n:]), v)
	})
	if err == nil {
		err = emit("", true)
	}
	if err == rules.ErrStop {
		return nil
	}
	return err
}

// Count counts what is stored and corrects it for this write's changes.
func (w *writer) Count(b rules.Bucket, prefix []byte) (int, error) {
	lo, hi := keyRange(b, rules.Range{Prefix: prefix})
	n, err := w.count(lo, hi)
	if err != nil {
		return 0, err
	}
	over := w.overlay(lo, hi)
	// Whether each key this write changed is stored: read those it
	// never read (prefetch skips a key it wrote).
	var unread []string
	for _, k := range over {
		if _, ok := w.read[k]; !ok {
			unread = append(unread, k)
		}
	}
	vals, err := w.reader.get(unread)
	if err != nil {
		return 0, err
	}
	w.mu.Lock()
	for i, k := range unread {
		w.read[k] = vals[i]
	}
	w.mu.Unlock()
	for _, k := range over {
		stored := w.read[k] != nil
		switch op := w.ops[k]; {
		case op.del && stored:
			n--
		case !op.del && !stored:
			n++
		}
	}
	return n, nil
}

func (w *writer) FirstKeys(b rules.Bucket, prefixes [][]byte) ([][]byte, error) {
	w.overlay("", "") // sorted before the scans run side by side
	return firstKeys(b, prefixes, w.Scan)
}
