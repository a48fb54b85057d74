package state

import (
	"context"

	bolt "go.etcd.io/bbolt"

	"github.com/convergehq/converge/state/internal/rules"
)

// Check runs a full consistency check in one read transaction and returns
// every problem found (up to 20, joined), or nil: bbolt's own page
// structure (tx.Check), every bucket present, then converge's invariants
// (the store's rules' check: rows, the owner index's chunks, edges and
// their reverse index, keyed rows, event chunks and their meta).
func (s *Store) Check(ctx context.Context) error {
	var p rules.Problems
	err := s.view(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			p.Report("bbolt: %v", err)
		}
		for _, name := range allBuckets {
			if tx.Bucket(name) == nil {
				p.Report("bucket %s: missing", name)
			}
		}
		if len(p) > 0 {
			return nil
		}
		return s.CheckIn(reader{tx}, p.Report)
	})
	return s.CheckResult(p, err)
}
