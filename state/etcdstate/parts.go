package etcdstate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge/state/internal/rules"
)

// A value too big for one etcd request (a root whose spec is a
// 333,000-team BOM: a row of ~15 MB) is stored in parts, below the
// rules (doc.go, "Big values"): its key holds a small header listing
// its parts and its hash, and the parts live under x/. The rules never
// see a header: a write stores the parts with the header, a read puts
// them back together at the revision it read the header at.
//
// Parts are cut where the content says (a rolling hash), not every N
// bytes, and named by their own hash: a root rewritten for its rollup
// changes a few bytes of 15 MB, and only the part around them is new.

const (
	// kParts is the sub-space of the parts of values stored in parts.
	kParts = "x/"
	// partsMagic starts a header. A value that starts with it is stored
	// in parts whatever its size, so a stored value that starts with it
	// is always a header.
	partsMagic = "\x00\xffconverge:parts\x00"
	// idLen is the bytes of a part's SHA-256 that name it.
	idLen = 8
	// partSuffix is the length of what follows a part key's owner:
	// "\x00" and the part's id in hex.
	partSuffix = 1 + 2*idLen
)

// partID names a part: the first bytes of its SHA-256.
type partID [idLen]byte

// partsHeader is what a key stored in parts holds: the whole value's
// SHA-256 and size, and its parts' ids in order.
type partsHeader struct {
	sum  [sha256.Size]byte
	size int
	ids  []partID
}

func (h partsHeader) encode() []byte {
	b := append([]byte(partsMagic), h.sum[:]...)
	b = binary.AppendUvarint(b, uint64(h.size))
	b = binary.AppendUvarint(b, uint64(len(h.ids)))
	for _, id := range h.ids {
		b = append(b, id[:]...)
	}
	return b
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
	size, w := binary.Uvarint(b)
	if w <= 0 {
		return h, errors.New("malformed parts header: size")
	}
	b = b[w:]
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) != n*idLen {
		return h, errors.New("malformed parts header: part list")
	}
	b = b[w:]
	h.size, h.ids = int(size), make([]partID, n)
	for i := range h.ids {
		copy(h.ids[i][:], b[i*idLen:])
	}
	return h, nil
}

// partsPrefix is what the part keys of key (below the prefix) start with.
func partsPrefix(key string) string { return kParts + key + "\x00" }

// partsKey is the key of key's part id.
func partsKey(key string, id partID) string { return partsPrefix(key) + hex.EncodeToString(id[:]) }

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

// gear is the rolling hash's table: 256 fixed pseudo-random words
// (splitmix64 from 0). Changing it changes where parts are cut, never
// what a stored value reads as (a header lists its parts).
var gear = func() (g [256]uint64) {
	x := uint64(0)
	for i := range g {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		g[i] = z ^ (z >> 31)
	}
	return g
}()

// cutPoints returns where val's parts end: after at least lo bytes, where
// the rolling hash of the last 64 bytes has its top bits zero (a part
// of about 2·lo bytes on average), at most hi bytes. An edit moves only
// the cut points near it, so the other parts keep their ids.
func cutPoints(val []byte, lo, hi int) []int {
	bits := max(1, bitsFor(lo))
	mask := ^uint64(0) << (64 - bits)
	var ends []int
	start := 0
	for start < len(val) {
		end := min(len(val), start+hi)
		var h uint64
		for i := start + lo; i < end; i++ {
			h = (h << 1) + gear[val[i]]
			if i-start >= lo+64 && h&mask == 0 {
				end = i + 1
				break
			}
		}
		ends = append(ends, end)
		start = end
	}
	return ends
}

// bitsFor is log2(n), rounded down.
func bitsFor(n int) int {
	b := 0
	for n > 1 {
		n >>= 1
		b++
	}
	return b
}

// cut returns the header and the parts (key → bytes) of key's value val:
// parts of MaxTxnBytes/16 to MaxTxnBytes/2, MaxTxnBytes/8 on average
// (bigger for a value so big that its header would pass a quarter of
// MaxTxnBytes).
func (s *Store) cut(key string, val []byte) (kvOp, map[string][]byte) {
	h := partsHeader{sum: sha256.Sum256(val), size: len(val)}
	parts := map[string][]byte{}
	hi := s.opts.MaxTxnBytes / 2
	lo := min(hi/4, max(s.opts.MaxTxnBytes/16, 16*len(val)/s.opts.MaxTxnBytes))
	start := 0
	for _, end := range cutPoints(val, lo, hi) {
		sum := sha256.Sum256(val[start:end])
		var id partID
		copy(id[:], sum[:])
		h.ids = append(h.ids, id)
		parts[partsKey(key, id)] = val[start:end]
		start = end
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
		have := map[string]bool{}
		for _, k := range old {
			have[k] = true
			if _, keep := parts[k]; !keep {
				out = append(out, kvOp{key: k, del: true})
			}
		}
		for k, v := range parts {
			if !have[k] {
				out = append(out, kvOp{key: k, val: v})
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
	// At one revision the key's parts are its header's (a write deletes
	// the parts of the value it replaces).
	cctx, cancel := r.call()
	defer cancel()
	resp, err := r.s.cli.Get(cctx, r.s.p+partsPrefix(key), clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return nil, fmt.Errorf("%s: read its parts: %w", key, err)
	}
	byID := make(map[string][]byte, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		byID[string(kv.Key[len(r.s.p):])] = kv.Value
	}
	out := make([]byte, 0, h.size)
	for _, id := range h.ids {
		part, ok := byID[partsKey(key, id)]
		if !ok {
			return nil, fmt.Errorf("%s: its part %x is not stored (%d of %d parts are)", key, id, len(resp.Kvs), len(h.ids))
		}
		out = append(out, part...)
	}
	if len(out) != h.size || sha256.Sum256(out) != h.sum {
		return nil, fmt.Errorf("%s: its %d parts do not make the value its header names (%d bytes, SHA-256 %x…)", key, len(h.ids), h.size, h.sum[:8])
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
		cctx, cancel := r.call()
		resp, err := r.s.cli.Get(cctx, r.s.p+owner, clientv3.WithRev(r.rev))
		cancel()
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
			for _, id := range h.ids {
				want[partsKey(owner, id)] = true
			}
		}
		for _, k := range keys {
			if !want[k] {
				report("%s: a stored part (%s) that no header names", owner, k[len(k)-2*idLen:])
			}
		}
	}
	return nil
}
