package codec

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/convergehq/converge"
)

// resourceFormat is the first byte of every resources value written.
// Format 4 stores a spec equal to the declared spec as null (the spec of
// a resource without flows, a 15 MB BOM's among them, is not written
// twice); format 3, still read, always wrote it. Format 5 is format 4
// whose declared spec is stored apart (Row.Apart): its head holds the
// spec's digest and its JSON no declared spec. An older binary refuses
// a row of a newer format instead of misreading it.
const (
	resourceFormat      = 4
	resourceFormatApart = 5
	resourceFormatV3    = 3
)

// A resources value (a "row") is: a format byte; the owner ID as a
// uvarint-length-prefixed string; the edges the resource consumes as a
// uvarint-length-prefixed JSON array of StoredEdge sorted by producer
// (length 0: none); then the resource's JSON. The owner prefix lets
// Commit maintain the owner index without decoding JSON; keeping a
// consumer's edges in its row makes an edge cost no put of its own when
// it is written with its consumer (the reverse index still costs one).
type Row struct {
	Owner converge.ID
	Edges []byte // JSON []StoredEdge, or empty
	// Apart is the SHA-256 digest of the declared spec when it is stored
	// apart from the row (format 5), else nil; the JSON then has no
	// declared spec.
	Apart []byte
	JSON  []byte
}

// StoredEdge is one edge inside its consumer's row.
type StoredEdge struct {
	Producer converge.ID          `json:"producer"`
	Flows    []converge.ValueFlow `json:"flows,omitempty"`
}

// EncodeResource returns the row of r with the given edges section. An
// empty (non-nil) Declared, Spec or Status is stored as absent; invalid
// JSON in one is an error naming the field.
func EncodeResource(r *converge.Resource, edges []byte) ([]byte, error) {
	return AppendResource(nil, r, edges)
}

// AppendResource is EncodeResource appending the row to dst's spare
// capacity: a commit encodes its rows into a few large buffers instead of
// one allocation (with room to spare) each. The row returned is in dst's
// memory when it fits, else in a new allocation.
func AppendResource(dst []byte, r *converge.Resource, edges []byte) ([]byte, error) {
	return appendResource(dst, r, edges, nil)
}

// AppendResourceApart is AppendResource for a row whose declared spec is
// stored apart: the row keeps apart, the spec's digest, in its head and
// leaves the declared spec out of its JSON (a spec equal to it too).
func AppendResourceApart(dst []byte, r *converge.Resource, edges, apart []byte) ([]byte, error) {
	c := *r
	if bytes.Equal(c.Spec, c.Declared) {
		c.Spec = nil // read back as the declared spec, once attached
	}
	c.Declared = nil
	return appendResource(dst, &c, edges, apart)
}

func appendResource(dst []byte, r *converge.Resource, edges, apart []byte) ([]byte, error) {
	buf := bytes.NewBuffer(dst[len(dst):])
	buf.Grow(2 + 2*binary.MaxVarintLen64 + len(r.Owner) + len(edges) + 512 + len(r.Declared) + len(r.Spec) + len(r.Status))
	writeRowHead(buf, r.Owner, edges, apart)
	head := buf.Len()
	if len(r.Declared) > 0 && bytes.Equal(r.Spec, r.Declared) {
		c := *r
		c.Spec = nil // read back as the declared spec (DecodeResource)
		r = &c
	}
	if appendResourceJSON(buf, r) {
		return buf.Bytes(), nil
	}
	// The slow path: encoding/json, which also names what is wrong.
	buf.Truncate(head)
	if (r.Declared != nil && len(r.Declared) == 0) || (r.Spec != nil && len(r.Spec) == 0) || (r.Status != nil && len(r.Status) == 0) {
		c := *r
		for _, m := range []*json.RawMessage{&c.Declared, &c.Spec, &c.Status} {
			if len(*m) == 0 {
				*m = nil
			}
		}
		r = &c
	}
	j, err := json.Marshal(r)
	if err != nil {
		for _, f := range []struct {
			name string
			m    json.RawMessage
		}{{"declared", r.Declared}, {"spec", r.Spec}, {"status", r.Status}} {
			if f.m != nil && !json.Valid(f.m) {
				return nil, fmt.Errorf("%s: invalid JSON", f.name)
			}
		}
		return nil, err
	}
	buf.Write(j)
	return buf.Bytes(), nil
}

func writeRowHead(buf *bytes.Buffer, owner converge.ID, edges, apart []byte) {
	var n [binary.MaxVarintLen64]byte
	if apart != nil {
		buf.WriteByte(resourceFormatApart)
	} else {
		buf.WriteByte(resourceFormat)
	}
	buf.Write(binary.AppendUvarint(n[:0], uint64(len(owner))))
	buf.WriteString(string(owner))
	buf.Write(binary.AppendUvarint(n[:0], uint64(len(edges))))
	buf.Write(edges)
	if apart != nil {
		buf.Write(binary.AppendUvarint(n[:0], uint64(len(apart))))
		buf.Write(apart)
	}
}

// WithEdges returns row with its edges section replaced.
func (r Row) WithEdges(edges []byte) []byte {
	var buf bytes.Buffer
	buf.Grow(2 + 3*binary.MaxVarintLen64 + len(r.Owner) + len(edges) + len(r.Apart) + len(r.JSON))
	writeRowHead(&buf, r.Owner, edges, r.Apart)
	buf.Write(r.JSON)
	return buf.Bytes()
}

// ErrMalformedRow is returned by SplitRow for a value it cannot split.
var ErrMalformedRow = errors.New("malformed resource value")

// SplitRow splits a resources value into its parts (sharing v's memory).
func SplitRow(v []byte) (Row, error) {
	bad := ErrMalformedRow
	if len(v) < 3 || v[0] != resourceFormat && v[0] != resourceFormatApart && v[0] != resourceFormatV3 {
		return Row{}, bad
	}
	rest := v[1:]
	part := func() ([]byte, bool) {
		n, w := binary.Uvarint(rest)
		if w <= 0 || uint64(len(rest)-w) < n {
			return nil, false
		}
		p := rest[w : w+int(n)]
		rest = rest[w+int(n):]
		return p, true
	}
	owner, ok1 := part()
	edges, ok2 := part()
	if !ok1 || !ok2 {
		return Row{}, bad
	}
	var apart []byte
	if v[0] == resourceFormatApart {
		var ok bool
		if apart, ok = part(); !ok || len(apart) == 0 {
			return Row{}, bad
		}
	}
	return Row{Owner: converge.ID(owner), Edges: edges, Apart: apart, JSON: rest}, nil
}

// ErrApart is returned by DecodeResource for a row whose declared spec is
// stored apart: DecodeResourceWith decodes it, given that spec.
var ErrApart = errors.New("declared spec stored apart from the row")

// DecodeResource decodes a resources value (ErrApart for a row whose
// declared spec is stored apart).
func DecodeResource(v []byte) (*converge.Resource, error) {
	return DecodeResourceWith(v, nil)
}

// SpecDigest is the digest a row keeps of its declared spec stored apart.
func SpecDigest(declared []byte) []byte {
	d := sha256.Sum256(declared)
	return d[:]
}

// DecodeResourceWith decodes a resources value; declared is its declared
// spec when the row keeps it apart (the caller's own copy, checked
// against the row's digest), else ignored.
func DecodeResourceWith(v, declared []byte) (*converge.Resource, error) {
	rw, err := SplitRow(v)
	if err != nil {
		return nil, err
	}
	if rw.Apart != nil && declared == nil {
		return nil, ErrApart
	}
	if rw.Apart != nil && !bytes.Equal(SpecDigest(declared), rw.Apart) {
		return nil, errors.New("declared spec stored apart: digest differs from the row's")
	}
	r, ok := decodeResourceJSON(rw.JSON, false)
	if !ok {
		r = new(converge.Resource)
		if err := json.Unmarshal(rw.JSON, r); err != nil {
			return nil, fmt.Errorf("decode resource: %w", err)
		}
	}
	if rw.Apart != nil {
		r.Declared = declared
	}
	if r.Declared != nil && (r.Spec == nil || string(r.Spec) == "null") {
		r.Spec = r.Declared // stored once (format 4)
	}
	return r, nil
}

// DecodeResourceHead decodes a resources value without its declared
// spec, spec and status (left nil).
func DecodeResourceHead(v []byte) (*converge.Resource, error) {
	rw, err := SplitRow(v)
	if err != nil {
		return nil, err
	}
	if r, ok := decodeResourceJSON(rw.JSON, true); ok {
		return r, nil
	}
	r := new(converge.Resource)
	if err := json.Unmarshal(rw.JSON, r); err != nil {
		return nil, fmt.Errorf("decode resource: %w", err)
	}
	r.Declared, r.Spec, r.Status = nil, nil, nil
	return r, nil
}

// DecodeEdges decodes a row's edges section.
func DecodeEdges(section []byte) ([]StoredEdge, error) {
	if len(section) == 0 {
		return nil, nil
	}
	if es, ok := decodeEdgesJSON(section); ok {
		return es, nil
	}
	var es []StoredEdge
	if err := json.Unmarshal(section, &es); err != nil {
		return nil, fmt.Errorf("decode edges: %w", err)
	}
	return es, nil
}

// EncodeEdges encodes a row's edges section, sorted by producer.
func EncodeEdges(es []StoredEdge) ([]byte, error) {
	if len(es) == 0 {
		return nil, nil
	}
	slices.SortFunc(es, func(a, b StoredEdge) int { return cmp.Compare(a.Producer, b.Producer) })
	return json.Marshal(es)
}

// PairKey returns a\x00b, the key of the owner index and both edge indexes.
func PairKey(a, b converge.ID) []byte {
	k := make([]byte, 0, len(a)+1+len(b))
	k = append(k, a...)
	k = append(k, 0)
	return append(k, b...)
}

// PrefixKey returns a\x00, the prefix of every pair key starting with a.
func PrefixKey(a converge.ID) []byte { return append([]byte(a), 0) }

// SplitPair splits a pair key.
func SplitPair(k []byte) (a, b converge.ID, ok bool) {
	i := bytes.IndexByte(k, 0)
	if i < 0 {
		return "", "", false
	}
	return converge.ID(k[:i]), converge.ID(k[i+1:]), true
}

// KindKey returns kind\x00version with the version big-endian, so a kind's
// versions sort numerically.
func KindKey(ref converge.KindRef) []byte {
	k := make([]byte, 0, len(ref.Kind)+9)
	k = append(k, ref.Kind...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, uint64(int64(ref.Version)))
}

// EncodeChunk returns an events value: the event count as a uvarint, then
// the JSON array of the events.
func EncodeChunk(evs []converge.Event) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(binary.MaxVarintLen64 + 2 + 160*len(evs))
	var n [binary.MaxVarintLen64]byte
	buf.Write(binary.AppendUvarint(n[:0], uint64(len(evs))))
	head := buf.Len()
	if appendEventsJSON(&buf, evs) {
		return buf.Bytes(), nil
	}
	buf.Truncate(head)
	j, err := json.Marshal(evs)
	if err != nil {
		return nil, err
	}
	buf.Write(j)
	return buf.Bytes(), nil
}

// ChunkLen returns the number of events in an events value.
func ChunkLen(v []byte) (int, error) {
	n, w := binary.Uvarint(v)
	if w <= 0 {
		return 0, fmt.Errorf("malformed event chunk")
	}
	return int(n), nil
}

// DecodeChunk decodes an events value.
func DecodeChunk(v []byte) ([]converge.Event, error) {
	n, w := binary.Uvarint(v)
	if w <= 0 {
		return nil, fmt.Errorf("malformed event chunk")
	}
	evs := make([]converge.Event, 0, n)
	if err := json.Unmarshal(v[w:], &evs); err != nil {
		return nil, fmt.Errorf("decode event chunk: %w", err)
	}
	if uint64(len(evs)) != n {
		return nil, fmt.Errorf("event chunk: header says %d events, holds %d", n, len(evs))
	}
	return evs, nil
}

// CheckName returns an error if a kind or name part of an ID is empty or
// holds "/" or NUL.
func CheckName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty %s", what)
	case strings.ContainsAny(s, "/\x00"):
		return fmt.Errorf("%s %q contains %q or NUL", what, s, "/")
	}
	return nil
}

// CheckID returns an error unless id is a well-formed "kind/name".
func CheckID(id converge.ID) error {
	k, n, ok := strings.Cut(string(id), "/")
	if !ok {
		return fmt.Errorf("resource %q: want KIND/NAME", id)
	}
	if err := CheckName("kind", k); err != nil {
		return fmt.Errorf("resource %q: %w", id, err)
	}
	if err := CheckName("name", n); err != nil {
		return fmt.Errorf("resource %q: %w", id, err)
	}
	return nil
}

// ChunkSeq returns the first Seq an events key names (0 if malformed).
func ChunkSeq(k []byte) uint64 {
	if len(k) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(k)
}
