package etcdstate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge/state/internal/rules"
)

// A value too big for one etcd request (a root whose spec is a
// 333,000-team BOM: a row of ~15 MB) is stored in parts, below the
// rules (doc.go, "Big values"): its key holds a small header naming its
// parts and their hash, and the parts live under x/. The rules never
// see a header: a write stores the parts with the header, a read puts
// them back together at the revision it read the header at.

const (
	// kParts is the sub-space of the parts of values stored in parts.
	kParts = "x/"
	// partsMagic starts a header. A value that starts with it is stored
	// in parts whatever its size, so a stored value that starts with it
	// is always a header.
	partsMagic = "\x00\xffconverge:parts\x00"
	// genLen is the length of a part key's generation: the hex of the
	// first 8 bytes of the value's SHA-256.
	genLen = 16
	// partSuffix is the length of what follows a part key's owner:
	// "\x00", the generation, "/", the part's index (4 bytes).
	partSuffix = 1 + genLen + 1 + 4
)

// partsHeader is what a key stored in parts holds: how many parts, the
// whole value's size and its SHA-256.
type partsHeader struct {
	parts, size int
	sum         [sha256.Size]byte
}

func (h partsHeader) encode() []byte {
	b := append([]byte(partsMagic), h.sum[:]...)
	b = binary.AppendUvarint(b, uint64(h.parts))
	return binary.AppendUvarint(b, uint64(h.size))
}

// isHeader reports whether a stored value is a parts header.
func isHeader(v []byte) bool { return bytes.HasPrefix(v, []byte(partsMagic)) }

func parseHeader(v []byte) (partsHeader, error) {
	var h partsHeader
	b := v[len(partsMagic):]
	if len(b) < sha256.Size {
		return h, errors.New("malformed parts header: too short")
	}
	copy(h.sum[:], b)
	b = b[sha256.Size:]
	n, w := binary.Uvarint(b)
	if w <= 0 {
		return h, errors.New("malformed parts header: part count")
	}
	size, w2 := binary.Uvarint(b[w:])
	if w2 <= 0 || w+w2 != len(b) {
		return h, errors.New("malformed parts header: size")
	}
	h.parts, h.size = int(n), int(size)
	return h, nil
}

// gen is the part keys' generation: a new value has new part keys, so
// a reader at an older revision still finds the old value's.
func (h partsHeader) gen() string { return hex.EncodeToString(h.sum[:genLen/2]) }

// partsPrefix is what the part keys of key (below the prefix) start with.
func partsPrefix(key string) string { return kParts + key + "\x00" }

// partsKey is the key of part i of key's value of header h.
func partsKey(key string, h partsHeader, i int) string {
	return partsPrefix(key) + h.gen() + "/" + string(binary.BigEndian.AppendUint32(nil, uint32(i)))
}

// partsOwner returns the key whose value a part key is part of.
func partsOwner(partKey string) (string, bool) {
	if !strings.HasPrefix(partKey, kParts) || len(partKey) < len(kParts)+partSuffix {
		return "", false
	}
	return partKey[len(kParts) : len(partKey)-partSuffix], true
}

// inParts reports whether key's value val is stored in parts: when key
// and value would not fit one transaction with room to spare, or val
// starts like a header.
func (s *Store) inParts(key string, val []byte) bool {
	return len(key)+len(val) > s.opts.MaxTxnBytes-1024 || isHeader(val)
}

// partSize is the most bytes of a value one part holds.
func (s *Store) partSize() int { return s.opts.MaxTxnBytes / 2 }

// cut returns the header and the part puts of key's value val.
func (s *Store) cut(key string, val []byte) (kvOp, []kvOp) {
	size := s.partSize()
	h := partsHeader{parts: (len(val) + size - 1) / size, size: len(val), sum: sha256.Sum256(val)}
	parts := make([]kvOp, h.parts)
	for i := range parts {
		parts[i] = kvOp{key: partsKey(key, h, i), val: val[i*size : min(len(val), (i+1)*size)]}
	}
	return kvOp{key: key, val: h.encode()}, parts
}

// storedParts returns the part keys stored now, by the key they are
// parts of.
func (s *Store) storedParts(ctx context.Context) (map[string][]string, error) {
	r := &reader{s: s, ctx: ctx}
	out := map[string][]string{}
	err := r.scan(kParts, clientv3.GetPrefixRangeEnd(kParts), false, true, pageSize, func(k string, _ []byte) error {
		if owner, ok := partsOwner(k); ok {
			out[owner] = append(out[owner], k)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the parts of big values: %w", err)
	}
	return out, nil
}

// storeParts turns a write's ops (one per key, as the rules wrote them)
// into the ops that store them: a value stored in parts becomes its
// header and its parts (those not stored already), and the parts of the
// value a put or delete replaces go, all in the same write, so the
// write stays atomic and a reader at one revision sees whole values.
func (s *Store) storeParts(ctx context.Context, ops []kvOp) ([]kvOp, error) {
	big := false
	for _, op := range ops {
		if !op.del && s.inParts(op.key, op.val) {
			big = true
			break
		}
	}
	stored, err := s.storedParts(ctx)
	if err != nil {
		return nil, err
	}
	if !big && len(stored) == 0 {
		return ops, nil
	}
	out := make([]kvOp, 0, len(ops))
	for _, op := range ops {
		old := stored[op.key]
		if op.del || !s.inParts(op.key, op.val) {
			out = append(out, op)
			for _, k := range old {
				out = append(out, kvOp{key: k, del: true})
			}
			continue
		}
		head, parts := s.cut(op.key, op.val)
		out = append(out, head)
		for _, p := range parts {
			if !slices.Contains(old, p.key) {
				out = append(out, p)
			}
		}
		for _, k := range old {
			if !slices.ContainsFunc(parts, func(p kvOp) bool { return p.key == k }) {
				out = append(out, kvOp{key: k, del: true})
			}
		}
	}
	return out, nil
}

// whole returns the value key (below the prefix) holds: v itself, or,
// when v is a parts header, its parts put together as they were at
// revision rev, checked against the header's size and hash.
func (r *reader) whole(key string, v []byte, rev int64) ([]byte, error) {
	if !isHeader(v) {
		return v, nil
	}
	h, err := parseHeader(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	p := r.s.p + partsPrefix(key) + h.gen() + "/"
	resp, err := r.s.cli.Get(r.ctx, p, clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return nil, fmt.Errorf("%s: read its parts: %w", key, err)
	}
	if len(resp.Kvs) != h.parts {
		return nil, fmt.Errorf("%s: %d of its %d parts stored", key, len(resp.Kvs), h.parts)
	}
	out := make([]byte, 0, h.size)
	for _, kv := range resp.Kvs {
		out = append(out, kv.Value...)
	}
	if len(out) != h.size || sha256.Sum256(out) != h.sum {
		return nil, fmt.Errorf("%s: its %d parts do not make the value its header names (%d bytes, hash %s)", key, h.parts, h.size, h.gen())
	}
	return out, nil
}

// Check is the rules' Check (rules.Store.CheckIn) plus the parts of
// big values, at one revision: every part belongs to the value its
// key's header names (a part no header names is left over from a write
// that was not atomic), and every header's parts make its value (the
// rules' reads put each one together and check its hash).
func (s *Store) Check(ctx context.Context) error {
	var p rules.Problems
	err := s.viewAt(ctx, func(r *reader) error {
		p = nil
		if err := s.rulesStore.CheckIn(r, p.Report); err != nil {
			return err
		}
		return checkPartsIn(r, p.Report)
	})
	return s.CheckResult(p, err)
}

// checkPartsIn reports every stored part that no header names.
func checkPartsIn(r *reader, report func(format string, args ...any)) error {
	owners := map[string][]string{}
	err := r.scan(kParts, clientv3.GetPrefixRangeEnd(kParts), false, true, pageSize, func(k string, _ []byte) error {
		owner, ok := partsOwner(k)
		if !ok {
			report("%q: not a part key", k)
			return nil
		}
		owners[owner] = append(owners[owner], k)
		return nil
	})
	if err != nil {
		return err
	}
	for owner, keys := range owners {
		resp, err := r.s.cli.Get(r.ctx, r.s.p+owner, clientv3.WithRev(r.rev))
		if err != nil {
			return err
		}
		want := map[string]bool{}
		if len(resp.Kvs) > 0 && isHeader(resp.Kvs[0].Value) {
			h, err := parseHeader(resp.Kvs[0].Value)
			if err != nil {
				report("%s: %v", owner, err)
				continue
			}
			for i := range h.parts {
				want[partsKey(owner, h, i)] = true
			}
		}
		for _, k := range keys {
			if !want[k] {
				report("%s: a stored part (%x) that no header names", owner, k[len(k)-partSuffix:])
			}
		}
	}
	return nil
}
