package rules

import (
	"context"
	"errors"
)

// Bucket names one key space of the store. Each backend maps it to its
// own place (a bbolt bucket, an etcd key prefix); keys within a bucket
// are the rules' and the same on every backend.
type Bucket uint8

// The buckets (state's package documentation lists what each holds).
const (
	Resources  Bucket = iota // ID → row
	Owners                   // the owner index (OwnerLayout)
	Producers                // producer\x00consumer → empty: the reverse edge index
	Kinds                    // kind\x00version → JSON kind
	Configs                  // name → JSON provider config
	Bindings                 // name → JSON binding
	Deliveries               // key → JSON delivery
	Events                   // first Seq (8 bytes big-endian) → one chunk of events
	Revisions                // hash → JSON revision record
	Meta                     // format, applied, source, control, events
	Specs                    // ID → the declared spec of a row that keeps it apart (ApartSize)

	// NumBuckets is how many buckets there are.
	NumBuckets = int(Specs) + 1
)

var bucketNames = [NumBuckets]string{"resources", "owners", "producers", "kinds", "configs",
	"bindings", "deliveries", "events", "revisions", "meta", "specs"}

// String returns the bucket's name, as bbolt names it.
func (b Bucket) String() string { return bucketNames[b] }

// Meta keys.
var (
	MetaFormat  = []byte("format")
	MetaApplied = []byte("applied")
	MetaSource  = []byte("source")  // converge.AppliedSource of the applied revision
	MetaControl = []byte("control") // converge.Control: the pin and the suspensions
	MetaEvents  = []byte("events")  // last seq (8) + count (8), big-endian
)

// Range selects keys of a bucket for Scan.
type Range struct {
	// Prefix is what every key starts with (nil: every key).
	Prefix []byte
	// From is where the scan starts: ascending, at the first key not
	// below it; descending, at the last key not above it. nil starts
	// at the prefix's first (last) key.
	From []byte
	// Desc scans from the last key to the first.
	Desc bool
	// KeysOnly leaves every value nil (a backend whose reads cross a
	// network then fetches no values).
	KeysOnly bool
}

// ErrStop, returned by a Scan's fn, ends the scan; Scan then returns nil.
var ErrStop = errors.New("stop scan")

// Reader reads one consistent snapshot of the store: a bbolt read
// transaction, or one etcd revision. Values it returns are valid until
// the transaction ends; whoever keeps one copies it.
type Reader interface {
	// Get returns key's value in b, or nil when the key is absent (an
	// empty value is non-nil).
	Get(b Bucket, key []byte) ([]byte, error)
	// GetMany returns the values of keys in b, in keys' order, nil for
	// an absent one. A backend whose reads are round trips reads them
	// together.
	GetMany(b Bucket, keys [][]byte) ([][]byte, error)
	// Scan calls fn with every key of b in r, in key order (reversed
	// with r.Desc), until fn returns an error: ErrStop ends the scan
	// and Scan returns nil; any other error is returned.
	Scan(b Bucket, r Range, fn func(k, v []byte) error) error
	// Count returns how many keys of b start with prefix.
	Count(b Bucket, prefix []byte) (int, error)
	// FirstKeys returns, for each prefix, the first key of b that
	// starts with it, or nil when none does.
	FirstKeys(b Bucket, prefixes [][]byte) ([][]byte, error)
}

// Writer is one write transaction. Its reads see its own writes; its
// writes are applied all together when the function given to
// KV.Update returns nil, and not at all otherwise. A Writer is used by
// one goroutine.
type Writer interface {
	Reader
	// Put sets key to value in b. The Writer may keep value until the
	// transaction ends; the caller does not change it.
	Put(b Bucket, key, value []byte) error
	// Delete removes key from b; deleting an absent key is a no-op.
	Delete(b Bucket, key []byte) error
	// Prefetch says these keys of b will be read: a backend whose reads
	// are round trips reads them together now; others do nothing.
	Prefetch(b Bucket, keys [][]byte) error
}

// KV is the small transactional key-value store a backend provides and
// the rules are written over: bbolt's file (package state) and an etcd
// prefix (package etcdstate). What a backend does about its own limits
// (etcd's bounds on one request, made atomic by a journal) happens
// below it: a Writer's transaction is atomic whatever its size, and so
// could a value be that is bigger than one request, stored in parts.
type KV interface {
	// View runs fn over one consistent snapshot. It may run fn more than
	// once (a snapshot that went away while fn read it is retried), so
	// fn starts afresh each time.
	View(ctx context.Context, fn func(r Reader) error) error
	// Update runs fn in one write transaction and applies its writes
	// atomically and durably if fn returns nil; an error from fn is
	// returned and nothing is written. A transaction that wrote nothing
	// commits nothing.
	Update(ctx context.Context, fn func(w Writer) error) error
}
