package state

import (
	"fmt"

	"github.com/convergehq/converge"
	bolt "go.etcd.io/bbolt"
)

// ResourceRow is one resource of a scan with the edges it consumes (it is
// their Consumer), sorted by producer, as its row holds them.
type ResourceRow struct {
	Resource *converge.Resource
	Consumes []converge.Edge
}

// ResourcesAfter returns up to limit resources (limit ≤ 0: no cap) of kind
// ("" for every kind) whose IDs sort after after ("" to start at the
// first), in ID order, each with the edges it consumes. It pages through a
// big store in short read transactions: pass the last ID returned as after
// to get the next page; a page shorter than limit is the last. Pages are
// read in separate transactions, so a scan that runs while the store is
// written may see some resources before and others after a commit.
func (s *Store) ResourcesAfter(kind string, after converge.ID, limit int) ([]ResourceRow, error) {
	return s.resourcesAfter(kind, after, limit, decodeResource)
}

// ResourceHeadsAfter is ResourcesAfter without each resource's declared
// spec, spec and status (nil; see Filter.Head): a scan that needs none of
// them copies none of them.
func (s *Store) ResourceHeadsAfter(kind string, after converge.ID, limit int) ([]ResourceRow, error) {
	return s.resourcesAfter(kind, after, limit, decodeResourceHead)
}

func (s *Store) resourcesAfter(kind string, after converge.ID, limit int, decode func([]byte) (*converge.Resource, error)) ([]ResourceRow, error) {
	var prefix []byte
	if kind != "" {
		prefix = []byte(kind + "/")
	}
	var out []ResourceRow
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bResources).Cursor()
		k, v := c.Seek(prefix)
		if after != "" && string(after) >= string(prefix) {
			k, v = c.Seek([]byte(after))
			if k != nil && string(k) == string(after) {
				k, v = c.Next()
			}
		}
		for ; k != nil && hasPrefix(k, prefix); k, v = c.Next() {
			rw, err := splitRow(v)
			if err != nil {
				return fmt.Errorf("resource %s: %w", k, err)
			}
			r, err := decode(v)
			if err != nil {
				return fmt.Errorf("resource %s: %w", k, err)
			}
			es, err := decodeEdges(rw.Edges)
			if err != nil {
				return fmt.Errorf("resource %s: %w", k, err)
			}
			row := ResourceRow{Resource: r}
			if len(es) > 0 {
				row.Consumes = make([]converge.Edge, len(es))
				for i, e := range es {
					row.Consumes[i] = converge.Edge{Consumer: converge.ID(k), Producer: e.Producer, Flows: e.Flows}
				}
			}
			out = append(out, row)
			if limit > 0 && len(out) >= limit {
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan resources: %w", err)
	}
	return out, nil
}
