package codec

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/convergehq/converge"
)

// Validate checks what can be checked of b without reading a store: the
// rules of state's package documentation that need no stored row. Rows it
// refuses come back together as a *converge.RejectedError.
func Validate(b *converge.Batch) error {
	deleted := make(map[converge.ID]bool, len(b.DeletedResources))
	for _, id := range b.DeletedResources {
		if err := CheckID(id); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		deleted[id] = true
	}
	var rejected []converge.RowError
	for i, r := range b.Resources {
		if r == nil {
			return fmt.Errorf("resource %d: nil", i)
		}
		if err := checkRow(r, deleted); err != nil {
			rejected = append(rejected, converge.RowError{ID: r.ID(), Err: err})
		}
	}
	if len(rejected) > 0 {
		return &converge.RejectedError{Rows: rejected}
	}
	type pair struct{ c, p converge.ID }
	delEdges := make(map[pair]bool, len(b.DeletedEdges))
	for _, e := range b.DeletedEdges {
		// A self edge cannot exist; deleting one is a no-op like any
		// delete of what is absent.
		if err := CheckEdge(e); err != nil && e.Consumer != e.Producer {
			return fmt.Errorf("delete %w", err)
		}
		delEdges[pair{e.Consumer, e.Producer}] = true
	}
	for _, e := range b.Edges {
		if err := CheckEdge(e); err != nil {
			return err
		}
		if delEdges[pair{e.Consumer, e.Producer}] {
			return fmt.Errorf("edge %s→%s: both put and deleted", e.Consumer, e.Producer)
		}
	}
	for i, k := range b.Kinds {
		if k == nil || k.Name == "" {
			return fmt.Errorf("kind %d: empty name", i)
		}
	}
	for i, c := range b.Configs {
		if c == nil || c.Name == "" {
			return fmt.Errorf("provider config %d: empty name", i)
		}
	}
	for i, bd := range b.Bindings {
		if bd == nil || bd.Name == "" {
			return fmt.Errorf("binding %d: empty name", i)
		}
	}
	putDeliv := make(map[string]bool, len(b.Deliveries))
	for i, d := range b.Deliveries {
		if d == nil || d.Key == "" {
			return fmt.Errorf("delivery %d: empty key", i)
		}
		putDeliv[d.Key] = true
	}
	for _, k := range b.DeletedDeliveries {
		if putDeliv[k] {
			return fmt.Errorf("delivery %s: both put and deleted", k)
		}
	}
	if b.Applied != nil && b.Applied.Hash == "" && !b.Applied.Dirty {
		return fmt.Errorf("applied revision: empty hash")
	}
	if b.Record != nil && b.Record.Revision.Hash == "" {
		return fmt.Errorf("revision record: empty hash")
	}
	return nil
}

// checkRow checks what can be checked of one resource without reading the
// store.
func checkRow(r *converge.Resource, deleted map[converge.ID]bool) error {
	if err := CheckName("kind", r.Kind); err != nil {
		return err
	}
	if err := CheckName("name", r.Name); err != nil {
		return err
	}
	if r.Owner != "" {
		if err := CheckID(r.Owner); err != nil {
			return fmt.Errorf("owner: %w", err)
		}
		if r.Owner == r.ID() {
			return errors.New("owns itself")
		}
	}
	if deleted[r.ID()] {
		return errors.New("both put and deleted")
	}
	return nil
}

// CheckEdge returns an error unless e joins two well-formed IDs that differ.
func CheckEdge(e converge.Edge) error {
	if err := CheckID(e.Consumer); err != nil {
		return fmt.Errorf("edge %s→%s: consumer: %w", e.Consumer, e.Producer, err)
	}
	if err := CheckID(e.Producer); err != nil {
		return fmt.Errorf("edge %s→%s: producer: %w", e.Consumer, e.Producer, err)
	}
	if e.Consumer == e.Producer {
		return fmt.Errorf("edge %s→%s: depends on itself", e.Consumer, e.Producer)
	}
	return nil
}

// ResourceNeedle returns the bytes every stored event of id holds: its
// "resource" member as encoding/json (and so appendEventsJSON) writes it.
// A chunk without them holds no event of id.
func ResourceNeedle(id converge.ID) []byte {
	j, _ := json.Marshal(string(id)) // a string always encodes
	return append([]byte(`"resource":`), j...)
}
