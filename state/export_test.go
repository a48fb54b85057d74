package state

import (
	bolt "go.etcd.io/bbolt"

	"github.com/convergehq/converge/state/internal/codec"
)

// RawPut writes key=value into bucket, bypassing every invariant: tests
// use it to corrupt a store on purpose.
func (s *Store) RawPut(bucket, key, value []byte) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put(key, value) })
}

// RawDelete deletes key from bucket, bypassing every invariant.
func (s *Store) RawDelete(bucket, key []byte) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Delete(key) })
}

// RawDropBucket deletes bucket name and everything in it.
func (s *Store) RawDropBucket(name string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte(name)) })
}

// Bucket names and key encodings for tests.
var (
	BucketResources = bResources
	BucketOwners    = bOwners
	BucketProducers = bProducers
	BucketEvents    = bEvents
	BucketMeta      = bMeta
	MetaFormat      = mFormat
	PairKey         = codec.PairKey
	U64             = u64
)

// RawGet returns a copy of bucket[key].
func (s *Store) RawGet(bucket, key []byte) ([]byte, error) {
	var v []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		v = append([]byte(nil), tx.Bucket(bucket).Get(key)...)
		return nil
	})
	return v, err
}

// EncodeResource is the row encoder, for benchmarks.
var EncodeResource = codec.EncodeResource

// SetFillPercent changes the page fill for benchmarks; it returns the old.
func SetFillPercent(f float64) float64 { old := fillPercent; fillPercent = f; return old }

// SetBeforeSwap replaces the hook Compact runs before its rename; it
// returns a function restoring the old one.
func SetBeforeSwap(f func(tmp string) error) (restore func()) {
	old := beforeSwap
	beforeSwap = f
	return func() { beforeSwap = old }
}

// SetBeforeMetaRead replaces the hook Open runs between its size check
// and its read of the meta pages; it returns a function restoring it.
func SetBeforeMetaRead(f func(path string)) (restore func()) {
	old := beforeMetaRead
	beforeMetaRead = f
	return func() { beforeMetaRead = old }
}
