package etcdstate

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
)

// written is what a write did, for Stats.
type written struct {
	puts, dels, bytes uint64
	rev               int64 // the newest revision a transaction of it made
}

// add adds what another transaction of the same write did.
func (w *written) add(o written) {
	w.puts += o.puts
	w.dels += o.dels
	w.bytes += o.bytes
	w.rev = max(w.rev, o.rev)
}

// writeWidth is how many transactions of one journal are in flight at
// once: etcd batches concurrent proposals into one raft round and one
// fsync, so a big batch costs a few rounds, not one per 128 operations.
const writeWidth = 128

// writeInFlight bounds the bytes of one journal's transactions in
// flight at once: 128 parts of 1 MiB queue ahead of everything else on
// the connection and in etcd's apply loop (a lease renewal, a reader),
// for many seconds on a loaded machine; 16 MiB keeps each wait short and
// the raft rounds full.
const writeInFlight = 16 << 20

// widthFor is how many transactions of about size bytes each go in
// flight at once.
func widthFor(size int) int {
	return max(1, min(writeWidth, writeInFlight/max(1, size)))
}

// errInjected is the failure the test hooks inject.
var errInjected = errors.New("injected failure")

// write applies ops (one per key) atomically: as one transaction when
// they fit in one (Options.MaxTxnOps, MaxTxnBytes), else through the
// batch journal. Callers hold s.mu.
func (s *Store) write(ctx context.Context, ops []kvOp) (written, error) {
	if s.opts.ReadOnly {
		return written{}, ErrReadOnly
	}
	if len(ops) <= s.opts.MaxTxnOps && opsSize(ops) <= s.opts.MaxTxnBytes {
		return s.txn(ctx, ops, nil)
	}
	return s.journal(ctx, ops)
}

func opsSize(ops []kvOp) int {
	n := 0
	for _, op := range ops {
		n += len(op.key) + len(op.val) + 16
	}
	return n
}

// txn applies ops and extra in one transaction conditioned on the fence.
func (s *Store) txn(ctx context.Context, ops []kvOp, extra []clientv3.Op) (written, error) {
	var w written
	then := make([]clientv3.Op, 0, len(ops)+len(extra))
	for _, op := range ops {
		if op.del {
			then = append(then, clientv3.OpDelete(s.p+op.key))
			continue
		}
		then = append(then, clientv3.OpPut(s.p+op.key, string(op.val)))
		w.puts++
		w.bytes += uint64(len(op.key) + len(op.val))
	}
	then = append(then, extra...)
	resp, err := s.cli.Txn(ctx).If(s.fence()...).Then(then...).Commit()
	if err != nil {
		return written{}, err
	}
	if !resp.Succeeded {
		return written{}, ErrFenced
	}
	w.rev = resp.Header.Revision
	for _, r := range resp.Responses {
		if d := r.GetResponseDeleteRange(); d != nil {
			w.dels += uint64(d.Deleted)
		}
	}
	return w, nil
}

// journal writes ops that do not fit one transaction so that they apply
// all or nothing (doc.go, "Big batches"): the encoded ops as parts
// (j/p/N), then the commit marker (j/commit: the commit point), then
// the ops themselves in transactions of at most MaxTxnOps, then the
// journal's deletion. Once the marker is written the batch is durable:
// if applying it fails, the next write (or the next writer's Open)
// finishes it, and until then readers read the revision before the
// marker.
func (s *Store) journal(ctx context.Context, ops []kvOp) (written, error) {
	parts := encodeOps(ops, s.opts.MaxTxnBytes-1024)
	err := s.pace.paced(len(parts), widthFor(len(parts[0])), func(i int) error {
		if _, err := s.txn(ctx, []kvOp{{key: partKey(i), val: parts[i]}}, nil); err != nil {
			return fmt.Errorf("write batch journal part %d: %w", i, err)
		}
		return nil
	})
	if err != nil {
		return written{}, err
	}
	if s.failBeforeCommit {
		return written{}, errInjected
	}
	s.pending = true
	if _, err := s.txn(ctx, []kvOp{{key: jCommit, val: u64(uint64(len(parts)))}}, nil); err != nil {
		return written{}, fmt.Errorf("commit batch journal: %w", err)
	}
	w, err := s.applyJournal(ctx, ops)
	if err != nil {
		// Durable, not yet applied: the next write finishes it.
		return w, nil
	}
	s.pending = false
	return w, nil
}

// applyJournal applies ops in transactions of at most MaxTxnOps and
// MaxTxnBytes, several at once (they touch distinct keys, and no reader
// looks at them before the journal goes), then deletes the journal.
func (s *Store) applyJournal(ctx context.Context, ops []kvOp) (written, error) {
	var chunks [][]kvOp
	total := opsSize(ops)
	for len(ops) > 0 {
		n, size := 0, 0
		for n < len(ops) && n < s.opts.MaxTxnOps {
			sz := len(ops[n].key) + len(ops[n].val) + 16
			if n > 0 && size+sz > s.opts.MaxTxnBytes {
				break
			}
			size += sz
			n++
		}
		chunks = append(chunks, ops[:n])
		ops = ops[n:]
	}
	injected := s.failAfter > 0 && s.failAfter < len(chunks)
	if injected {
		chunks = chunks[:s.failAfter]
	}
	var (
		mu  sync.Mutex // guards did
		did written
	)
	err := s.pace.paced(len(chunks), widthFor(total/max(1, len(chunks))), func(i int) error {
		w, err := s.txn(ctx, chunks[i], nil)
		if err != nil {
			return fmt.Errorf("apply batch journal: %w", err)
		}
		mu.Lock()
		defer mu.Unlock()
		did.add(w)
		return nil
	})
	if err != nil {
		return did, err
	}
	if injected {
		return did, errInjected
	}
	del, err := s.txn(ctx, nil, []clientv3.Op{clientv3.OpDelete(s.p+kJournal, clientv3.WithPrefix())})
	if err != nil {
		return did, fmt.Errorf("delete batch journal: %w", err)
	}
	did.rev = max(did.rev, del.rev)
	return did, nil
}

// finish completes a batch journal left committed by this store or by a
// writer that crashed, and removes the parts of one that never reached
// its commit point. Callers hold s.mu (or are Open).
func (s *Store) finish(ctx context.Context) error {
	if !s.pending {
		return nil
	}
	marker, err := s.cli.Get(ctx, s.p+jCommit)
	if err != nil {
		return fmt.Errorf("read batch journal: %w", err)
	}
	if len(marker.Kvs) == 0 {
		if _, err := s.txn(ctx, nil, []clientv3.Op{clientv3.OpDelete(s.p+kJournal, clientv3.WithPrefix())}); err != nil {
			return fmt.Errorf("delete uncommitted batch journal: %w", err)
		}
		s.pending = false
		return nil
	}
	v := marker.Kvs[0].Value
	if len(v) != 8 {
		return fmt.Errorf("batch journal: malformed commit marker %x", v)
	}
	want := int(binary.BigEndian.Uint64(v))
	var ops []kvOp
	for i := range want {
		resp, err := s.cli.Get(ctx, s.p+partKey(i))
		if err != nil {
			return fmt.Errorf("read batch journal part %d: %w", i, err)
		}
		if len(resp.Kvs) == 0 {
			return fmt.Errorf("batch journal: part %d of %d missing", i, want)
		}
		part, err := decodeOps(resp.Kvs[0].Value)
		if err != nil {
			return fmt.Errorf("batch journal: part %d: %w", i, err)
		}
		ops = append(ops, part...)
	}
	w, err := s.applyJournal(ctx, ops)
	if err != nil {
		return err
	}
	s.count(w, 0)
	s.pending = false
	s.noteWrite(w.rev)
	return nil
}

func partKey(i int) string { return jParts + string(u64(uint64(i))) }

// encodeOps encodes ops as parts of at most max bytes (an op bigger
// than max gets a part of its own): per op a flag byte (1 delete), the
// key and the value, each uvarint-length-prefixed.
func encodeOps(ops []kvOp, max int) [][]byte {
	var parts [][]byte
	var cur []byte
	for _, op := range ops {
		n := 1 + 2*binary.MaxVarintLen64 + len(op.key) + len(op.val)
		if len(cur) > 0 && len(cur)+n > max {
			parts = append(parts, cur)
			cur = nil
		}
		flag := byte(0)
		if op.del {
			flag = 1
		}
		cur = append(cur, flag)
		cur = binary.AppendUvarint(cur, uint64(len(op.key)))
		cur = append(cur, op.key...)
		cur = binary.AppendUvarint(cur, uint64(len(op.val)))
		cur = append(cur, op.val...)
	}
	if len(cur) > 0 {
		parts = append(parts, cur)
	}
	return parts
}

func decodeOps(b []byte) ([]kvOp, error) {
	var ops []kvOp
	for len(b) > 0 {
		op := kvOp{del: b[0] == 1}
		b = b[1:]
		field := func() ([]byte, error) {
			n, w := binary.Uvarint(b)
			if w <= 0 || uint64(len(b)-w) < n {
				return nil, errors.New("malformed op")
			}
			f := b[w : w+int(n)]
			b = b[w+int(n):]
			return f, nil
		}
		k, err := field()
		if err != nil {
			return nil, err
		}
		v, err := field()
		if err != nil {
			return nil, err
		}
		op.key, op.val = string(k), v
		ops = append(ops, op)
	}
	return ops, nil
}

// parallel runs fn(0..n-1) on up to width goroutines and returns the
// first error; once one failed, no more are started.
func parallel(n, width int, fn func(i int) error) error {
	if n == 1 {
		return fn(0)
	}
	var g errgroup.Group
	g.SetLimit(width)
	var failed atomic.Bool
	for i := range n {
		if failed.Load() {
			break
		}
		g.Go(func() error {
			err := fn(i)
			if err != nil {
				failed.Store(true)
			}
			return err
		})
	}
	return g.Wait()
}
