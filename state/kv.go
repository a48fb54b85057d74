package state

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/convergehq/converge/state/internal/rules"
)

// boltKV is the store's rules' key-value store (rules.KV) over the
// bbolt file: View is a read transaction, Update a write transaction.
type boltKV struct{ s *Store }

func (kv boltKV) View(_ context.Context, fn func(rules.Reader) error) error {
	return kv.s.view(func(tx *bolt.Tx) error { return fn(reader{tx}) })
}

func (kv boltKV) Update(_ context.Context, fn func(rules.Writer) error) error {
	return kv.s.update(func(w *writer) error { return fn(w) })
}

// bucketNames are the bbolt buckets of the rules' buckets.
var bucketNames = func() (names [rules.NumBuckets][]byte) {
	for b := range names {
		names[b] = []byte(rules.Bucket(b).String())
	}
	return names
}()

// reader reads one bbolt transaction.
type reader struct{ tx *bolt.Tx }

func (r reader) bucket(b rules.Bucket) *bolt.Bucket { return r.tx.Bucket(bucketNames[b]) }

// Get returns key's value, or nil if absent; a key with an empty value
// gives a non-nil empty slice (bbolt's Get cannot tell an empty value
// put in this transaction from a missing key: a cursor can).
func (r reader) Get(b rules.Bucket, key []byte) ([]byte, error) {
	return get(r.bucket(b), key), nil
}

func get(bk *bolt.Bucket, key []byte) []byte { return seek(bk.Cursor(), key) }

// seek returns key's value through c (repositioned), as get.
func seek(c *bolt.Cursor, key []byte) []byte {
	k, v := c.Seek(key)
	if k == nil || string(k) != string(key) {
		return nil
	}
	if v == nil {
		v = empty
	}
	return v
}

func (r reader) GetMany(b rules.Bucket, keys [][]byte) ([][]byte, error) {
	out := make([][]byte, len(keys))
	bk := r.bucket(b)
	for i, key := range keys {
		out[i] = get(bk, key)
	}
	return out, nil
}

func (r reader) Scan(b rules.Bucket, rg rules.Range, fn func(k, v []byte) error) error {
	c := r.bucket(b).Cursor()
	var k, v []byte
	switch {
	case !rg.Desc:
		from := rg.Prefix
		if string(rg.From) > string(from) {
			from = rg.From
		}
		k, v = c.Seek(from)
	case rg.From != nil:
		if k, v = c.Seek(rg.From); k == nil {
			k, v = c.Last()
		} else if string(k) != string(rg.From) {
			k, v = c.Prev()
		}
	default:
		k, v = seekLast(c, rg.Prefix)
	}
	var rel scanRelease // a scan of a million rows would map the whole file
	for ; k != nil && hasPrefix(k, rg.Prefix); k, v = step(c, rg.Desc) {
		rel.passed(r.tx, k, v)
		if rg.KeysOnly {
			v = nil
		}
		if err := fn(k, v); err != nil {
			if err == rules.ErrStop {
				return nil
			}
			return err
		}
	}
	return nil
}

// seekLast moves c to the last key with prefix p (or, if none, to a key
// without it, or nil).
func seekLast(c *bolt.Cursor, p []byte) (k, v []byte) {
	end := prefixEnd(p)
	if end == nil {
		return c.Last()
	}
	if k, _ = c.Seek(end); k == nil {
		return c.Last()
	}
	return c.Prev()
}

// prefixEnd returns the first key after every key with prefix p, or nil
// if there is none (p empty or all 0xff).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func step(c *bolt.Cursor, desc bool) (k, v []byte) {
	if desc {
		return c.Prev()
	}
	return c.Next()
}

// Count walks every key with the prefix, and so maps every page that
// holds one: it releases them as a scan does (a start counts a million
// rows before it loads them, and the count mapped the whole file).
func (r reader) Count(b rules.Bucket, prefix []byte) (int, error) {
	n := 0
	var rel scanRelease
	c := r.bucket(b).Cursor()
	for k, v := c.Seek(prefix); k != nil && hasPrefix(k, prefix); k, v = c.Next() {
		rel.passed(r.tx, k, v)
		n++
	}
	return n, nil
}

// scanRelease releases the pages a walk of keys mapped, every
// releaseScanned bytes of keys and values passed, each key counted as
// keyCharge bytes more: a page holds what it holds with room to spare,
// and each fault maps 64 KiB around it, so bytes read alone let a count
// of 40,000 rows of 1 KB map 69 MiB before its first release.
type scanRelease struct{ read int }

// keyCharge is what passing a key costs a walk beside its bytes: a
// release at the latest every 4,096 keys.
const keyCharge = releaseScanned / 4096

// passed counts k and v walked in tx, releasing the mapped pages when
// enough were. What the walk passed is not needed again (slices into the
// map stay valid: a released page comes back from the page cache).
func (s *scanRelease) passed(tx *bolt.Tx, k, v []byte) {
	if s.read += len(k) + len(v) + keyCharge; s.read >= releaseScanned {
		s.read = 0
		releaseTx(tx, releaseMin)
	}
}

func (r reader) FirstKeys(b rules.Bucket, prefixes [][]byte) ([][]byte, error) {
	out := make([][]byte, len(prefixes))
	c := r.bucket(b).Cursor()
	for i, p := range prefixes {
		if k, _ := c.Seek(p); k != nil && hasPrefix(k, p) {
			out[i] = k
		}
	}
	return out, nil
}

// writer wraps a write transaction and counts what it does.
type writer struct {
	reader
	puts  uint64
	dels  uint64
	bytes uint64
	// walks counts key lookups since the mapped pages were last
	// released (see releaseWalks).
	walks int
	// cursors are the transaction's cursors of each bucket, made once:
	// a Seek repositions one after any change, and a new cursor for
	// each lookup was a gigabyte of cursor stacks in a million-row
	// converge.
	cursors [rules.NumBuckets]*bolt.Cursor
}

// cursor returns the transaction's cursor of bucket b.
func (w *writer) cursor(b rules.Bucket) *bolt.Cursor {
	if w.cursors[b] == nil {
		w.cursors[b] = w.bucket(b).Cursor()
	}
	return w.cursors[b]
}

// releaseWalks is how many key lookups a write transaction makes between
// two releases of the pages they mapped. A lookup in a big store maps
// its leaf page and the kernel maps up to 15 pages around it (fault
// around, 64 KiB), so a commit of 8,192 rows all over the key space
// would otherwise add half a gigabyte of file pages to the resident set
// before the releaser's next turn. 512 lookups map at most ~32 MiB.
const releaseWalks = 512

// releaseScanned is how many bytes of keys and values a scan reads
// between two releases of the pages it mapped.
const releaseScanned = 16 << 20

// walked counts one key lookup and releases the mapped pages every
// releaseWalks. The release is safe in the middle of a transaction: the
// map is read-only and stays put until the commit (which alone grows
// it), and a released page is only faulted in again from the page cache.
func (w *writer) walked() {
	if w.walks++; w.walks >= releaseWalks {
		w.walks = 0
		releaseTx(w.tx, releaseMin)
	}
}

// Get is reader.Get, counted for the release of mapped pages.
func (w *writer) Get(b rules.Bucket, key []byte) ([]byte, error) {
	w.walked()
	return seek(w.cursor(b), key), nil
}

// GetMany is reader.GetMany, counted for the release of mapped pages.
func (w *writer) GetMany(b rules.Bucket, keys [][]byte) ([][]byte, error) {
	out := make([][]byte, len(keys))
	for i, key := range keys {
		v, err := w.Get(b, key)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// Put stores key=value in bucket; it is the only way the store writes.
func (w *writer) Put(b rules.Bucket, key, value []byte) error {
	w.walked()
	if err := w.bucket(b).Put(key, value); err != nil {
		return fmt.Errorf("put %s/%q: %w", b, key, err)
	}
	w.puts++
	w.bytes += uint64(len(key) + len(value))
	return nil
}

// Delete removes key from bucket if present.
func (w *writer) Delete(b rules.Bucket, key []byte) error {
	w.walked()
	if k, _ := w.cursor(b).Seek(key); k == nil || string(k) != string(key) {
		return nil
	}
	if err := w.bucket(b).Delete(key); err != nil {
		return fmt.Errorf("delete %s/%q: %w", b, key, err)
	}
	w.dels++
	return nil
}

// Prefetch does nothing: a bbolt read is a walk of mapped pages.
func (w *writer) Prefetch(rules.Bucket, [][]byte) error { return nil }

func hasPrefix(k, p []byte) bool { return len(k) >= len(p) && string(k[:len(p)]) == string(p) }

// empty is the value of index entries. It is non-nil on purpose.
var empty = []byte{}
