package rules

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/convergehq/converge"
)

// Options are what differs between backends above the KV: how the
// owner index is laid out, and the limits of one value.
type Options struct {
	// Name names the store in Check's error: the file's path, or etcd's
	// endpoints and prefix.
	Name string
	// Owners is the owner index's layout.
	Owners OwnerLayout
	// MaxEvents and MaxRevisions are the retention limits
	// (state.Options).
	MaxEvents, MaxRevisions int
	// MaxChunk, when > 0, is the most bytes one event chunk may have: a
	// batch's events are split in chunks under it (one event bigger
	// than that gets a chunk of its own). 0 writes a batch's events as
	// one chunk.
	MaxChunk int
}

// Store is the store's rules over a KV: it implements every read,
// Commit and Check of state.Backend once, for every backend.
type Store struct {
	kv KV
	o  Options
}

// New returns the rules over kv.
func New(kv KV, o Options) *Store { return &Store{kv: kv, o: o} }

// view runs fn over one snapshot of the store.
func (s *Store) view(ctx context.Context, fn func(r Reader) error) error {
	return s.kv.View(ctx, fn)
}

// update runs fn in one write transaction.
func (s *Store) update(ctx context.Context, fn func(w Writer) error) error {
	return s.kv.Update(ctx, fn)
}

// Filter selects resources. Zero fields match everything.
type Filter struct {
	Kind  string
	Phase converge.Phase
	// Owner selects the direct children of Owner.
	Owner converge.ID
	// RootsOnly selects resources without an owner.
	RootsOnly bool
	// Limit caps the result; 0 means no cap.
	Limit int
	// Head leaves out each resource's Declared, Spec and Status (nil),
	// for callers that do not show them: they are checked but not
	// copied, and a root's spec can be megabytes.
	Head bool
}

// ResourceRow is one resource of a scan with the edges it consumes (it is
// their Consumer), sorted by producer, as its row holds them.
type ResourceRow struct {
	Resource *converge.Resource
	Consumes []converge.Edge
}

// U64 returns v as 8 bytes, big-endian: an event chunk's key, the format.
func U64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// empty is the value of index entries. It is non-nil on purpose.
var empty = []byte{}

// EventsMeta returns the last event Seq and the number of events kept,
// from the events meta value.
func EventsMeta(v []byte) (lastSeq, count uint64) {
	if len(v) != 16 {
		return 0, 0
	}
	return binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])
}

func eventsMeta(r Reader) (lastSeq, count uint64, err error) {
	v, err := r.Get(Meta, MetaEvents)
	if err != nil {
		return 0, 0, err
	}
	lastSeq, count = EventsMeta(v)
	return lastSeq, count, nil
}

// putJSON puts key=JSON(v) unless the stored value is equal.
func putJSON(w Writer, b Bucket, key []byte, v any) error {
	j, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	old, err := w.Get(b, key)
	if err != nil {
		return err
	}
	if old != nil && string(old) == string(j) {
		return nil
	}
	return w.Put(b, key, j)
}

// getJSON decodes key's value into v; it reports whether the key exists.
func getJSON(r Reader, b Bucket, key []byte, v any) (bool, error) {
	val, err := r.Get(b, key)
	if err != nil || val == nil {
		return false, err
	}
	return true, json.Unmarshal(val, v)
}

func applied(r Reader) (*converge.Revision, error) {
	rev := new(converge.Revision)
	ok, err := getJSON(r, Meta, MetaApplied, rev)
	if err != nil {
		return nil, fmt.Errorf("applied revision: %w", err)
	}
	if !ok {
		return nil, nil
	}
	return rev, nil
}
