package rules

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/internal/codec"
)

// maxCheckErrors caps how many problems Check reports.
const maxCheckErrors = 20

type reportFunc func(format string, args ...any)

// Check runs a full consistency check over one snapshot and returns
// every problem found (up to 20, joined), or nil; CheckIn says what it
// checks.
func (s *Store) Check(ctx context.Context) error {
	var p Problems
	err := s.view(ctx, func(r Reader) error {
		p = nil
		return s.CheckIn(r, p.Report)
	})
	return s.CheckResult(p, err)
}

// Problems collects what a check reports: the first 20 problems.
type Problems []error

// Report adds a problem.
func (p *Problems) Report(format string, args ...any) {
	if len(*p) < maxCheckErrors {
		*p = append(*p, fmt.Errorf(format, args...))
	}
}

// CheckResult is Check's error for the problems a check reported and
// the error that stopped it (err).
func (s *Store) CheckResult(p Problems, err error) error {
	if err != nil {
		return fmt.Errorf("check state: %w", err)
	}
	if len(p) > 0 {
		return fmt.Errorf("check state: %s: %w", s.o.Name, errors.Join(p...))
	}
	return nil
}

// CheckIn checks converge's invariants over r and reports every problem
// it finds:
//   - every resources key is its row's ID, the row well formed, its owner
//     prefix equal to the JSON owner, and its owner existing;
//   - the owner index is well formed for its layout, every child it
//     lists exists and is owned by that owner, and every resource is
//     listed once (a root under the empty owner);
//   - the edges in consumers' rows and the reverse index hold the same
//     pairs, edges sorted by producer (an edge's producer may not exist:
//     see state's package doc);
//   - kinds, configs, bindings, deliveries and revision records are
//     keyed by their content, and the applied revision decodes;
//   - event chunks are keyed by their first Seq, Seqs increase across all
//     chunks, and the events meta agrees with them;
//   - a row that keeps its declared spec apart has it in Specs, with the
//     digest the row holds, and Specs holds nothing else.
func (s *Store) CheckIn(r Reader, report func(format string, args ...any)) error {
	owners, edges, err := checkRows(r, report)
	if err != nil {
		return err
	}
	if err := s.checkOwnerIndex(r, owners, report); err != nil {
		return err
	}
	if err := checkReverse(r, owners, edges, report); err != nil {
		return err
	}
	if err := checkKeyed(r, report); err != nil {
		return err
	}
	if err := checkSpecs(r, report); err != nil {
		return err
	}
	return checkEvents(r, report)
}

// checkSpecs checks the declared specs kept apart against their rows (a
// row that keeps one apart is checked for it by checkRows).
func checkSpecs(r Reader, report reportFunc) error {
	return r.Scan(Specs, Range{KeysOnly: true}, func(k, _ []byte) error {
		v, err := r.Get(Resources, k)
		if err != nil {
			return err
		}
		if v == nil {
			report("spec apart of %s: no such resource", k)
			return nil
		}
		if rw, err := codec.SplitRow(v); err == nil && rw.Apart == nil {
			report("spec apart of %s: its row keeps its declared spec", k)
		}
		return nil
	})
}

// checkRows checks every resource row and returns each resource's owner
// and the edges the rows hold (producer\x00consumer).
func checkRows(r Reader, report reportFunc) (owners map[converge.ID]converge.ID, edges map[string]bool, err error) {
	owners, edges = map[converge.ID]converge.ID{}, map[string]bool{}
	err = r.Scan(Resources, Range{}, func(k, v []byte) error {
		id := converge.ID(k)
		rw, err := codec.SplitRow(v)
		if err != nil {
			report("resource %s: %v", id, err)
			return nil
		}
		res, err := decodeFull(r, k, v) // a spec apart is there, with its digest
		if err != nil {
			report("resource %s: %v", id, err)
			return nil
		}
		if res.ID() != id {
			report("resource %s: value is %s", id, res.ID())
		}
		if res.Owner != rw.Owner {
			report("resource %s: owner prefix %q, JSON owner %q", id, rw.Owner, res.Owner)
		}
		owners[id] = res.Owner
		es, err := codec.DecodeEdges(rw.Edges)
		if err != nil {
			report("resource %s: %v", id, err)
			return nil
		}
		for i, e := range es {
			if codec.CheckID(e.Producer) != nil || e.Producer == id {
				report("edge %s→%s: bad producer", id, e.Producer)
			}
			if i > 0 && es[i-1].Producer >= e.Producer {
				report("resource %s: edges not sorted by producer at %s", id, e.Producer)
			}
			edges[string(codec.PairKey(e.Producer, id))] = true
		}
		return nil
	})
	for id, o := range owners {
		if _, ok := owners[o]; o != "" && !ok {
			report("resource %s: owner %s does not exist", id, o)
		}
	}
	return owners, edges, err
}

// checkOwnerIndex checks the owner index against the rows' owners.
func (s *Store) checkOwnerIndex(r Reader, owners map[converge.ID]converge.ID, report reportFunc) error {
	indexed := map[converge.ID]converge.ID{}
	err := s.o.Owners.entries(r, report, func(owner, child converge.ID) {
		if o, dup := indexed[child]; dup {
			report("owner index: %s listed under %s and %s", child, o, owner)
		}
		indexed[child] = owner
		switch o, exists := owners[child]; {
		case !exists:
			report("owner index: %s → %s: child does not exist", owner, child)
		case o != owner:
			report("owner index: %s → %s: child's owner is %q", owner, child, o)
		}
	})
	if err != nil {
		return err
	}
	for id, o := range owners {
		if got, ok := indexed[id]; !ok || got != o {
			if o == "" {
				report("resource %s: the roots index lacks it", id)
			} else {
				report("resource %s: owner index lacks %s → %s", id, o, id)
			}
		}
	}
	return nil
}

// checkReverse checks the reverse edge index against the rows' edges.
func checkReverse(r Reader, owners map[converge.ID]converge.ID, edges map[string]bool, report reportFunc) error {
	reverse := map[string]bool{}
	err := r.Scan(Producers, Range{KeysOnly: true}, func(k, _ []byte) error {
		p, c, ok := codec.SplitPair(k)
		if !ok {
			report("reverse edge index: malformed key %q", k)
			return nil
		}
		reverse[string(k)] = true
		if _, ok := owners[c]; !ok {
			report("reverse edge index: %s→%s: consumer does not exist", c, p)
		} else if !edges[string(k)] {
			report("reverse edge index: %s→%s: no forward edge", c, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for pair := range edges {
		if !reverse[pair] {
			p, c, _ := codec.SplitPair([]byte(pair))
			report("edge %s→%s: missing from the reverse index", c, p)
		}
	}
	return nil
}

// checkKeyed checks that every JSON row is keyed by its content.
func checkKeyed(r Reader, report reportFunc) error {
	rows := []struct {
		b   Bucket
		key func(val []byte) (string, error)
	}{
		{Kinds, func(val []byte) (string, error) {
			var k converge.Kind
			err := json.Unmarshal(val, &k)
			return string(codec.KindKey(k.Ref())), err
		}},
		{Configs, func(val []byte) (string, error) {
			var c converge.ProviderConfig
			err := json.Unmarshal(val, &c)
			return c.Name, err
		}},
		{Bindings, func(val []byte) (string, error) {
			var b converge.Binding
			err := json.Unmarshal(val, &b)
			return b.Name, err
		}},
		{Deliveries, func(val []byte) (string, error) {
			var d converge.Delivery
			err := json.Unmarshal(val, &d)
			return d.Key, err
		}},
		{Revisions, func(val []byte) (string, error) {
			var r converge.RevisionRecord
			err := json.Unmarshal(val, &r)
			return r.Revision.Hash, err
		}},
	}
	for _, row := range rows {
		err := r.Scan(row.b, Range{}, func(k, v []byte) error {
			want, err := row.key(v)
			if err != nil {
				report("%s %q: %v", row.b, k, err)
			} else if string(k) != want {
				report("%s key %q: value is %q", row.b, k, want)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if _, err := applied(r); err != nil {
		report("meta: %v", err)
	}
	return nil
}

func checkEvents(r Reader, report reportFunc) error {
	var prev, count uint64
	err := r.Scan(Events, Range{}, func(k, v []byte) error {
		if len(k) != 8 {
			report("event chunk key %x: want 8 bytes", k)
			return nil
		}
		first := binary.BigEndian.Uint64(k)
		evs, err := codec.DecodeChunk(v)
		if err != nil {
			report("event chunk %d: %v", first, err)
			return nil
		}
		if len(evs) == 0 {
			report("event chunk %d: empty", first)
			return nil
		}
		if evs[0].Seq != first {
			report("event chunk %d: first event has seq %d", first, evs[0].Seq)
		}
		for _, e := range evs {
			if e.Seq <= prev {
				report("event chunk %d: seq %d not above %d", first, e.Seq, prev)
			}
			prev = e.Seq
		}
		count += uint64(len(evs))
		return nil
	})
	if err != nil {
		return err
	}
	lastSeq, n, err := eventsMeta(r)
	if err != nil {
		return err
	}
	if n != count {
		report("meta: %d events recorded, %d stored", n, count)
	}
	if prev > lastSeq {
		report("meta: last event seq %d below stored seq %d", lastSeq, prev)
	}
	return nil
}
