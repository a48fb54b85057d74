package etcdstate

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/internal/codec"
)

// maxCheckErrors caps how many problems Check reports.
const maxCheckErrors = 20

// Check runs a full consistency check at one revision and returns every
// problem found (up to 20, joined), or nil. It checks the invariants
// the bbolt store's Check does, over this layout:
//   - every resource key is its row's ID, the row well formed, its owner
//     prefix equal to the JSON owner, and its owner existing;
//   - the owner index holds exactly one key per resource, under its
//     owner ("" for a root), and no key for a resource that is absent;
//   - the edges in consumers' rows and the reverse index hold the same
//     pairs, edges sorted by producer;
//   - kinds, configs, bindings, deliveries and revision records are
//     keyed by their content, and the applied revision decodes;
//   - event chunks are keyed by their first Seq, Seqs increase across
//     chunks, and the events meta agrees with them.
func (s *Store) Check() error {
	var errs []error
	report := func(format string, args ...any) {
		if len(errs) < maxCheckErrors {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	err := s.view(func(v *view) error {
		errs = nil
		return s.check(v, report)
	})
	if err != nil {
		return fmt.Errorf("check state: %w", err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("check state: %s: %w", s.where(), errors.Join(errs...))
	}
	return nil
}

func (s *Store) check(v *view, report func(string, ...any)) error {
	owners := map[converge.ID]converge.ID{} // resource → owner, from rows
	edges := map[string]bool{}              // producer\x00consumer, from rows
	err := v.scan(kResources, "", false, func(k string, val []byte) error {
		id := converge.ID(k[len(kResources):])
		rw, err := codec.SplitRow(val)
		if err != nil {
			report("resource %s: %v", id, err)
			return nil
		}
		r, err := codec.DecodeResource(val)
		if err != nil {
			report("resource %s: %v", id, err)
			return nil
		}
		if r.ID() != id {
			report("resource %s: value is %s", id, r.ID())
		}
		if r.Owner != rw.Owner {
			report("resource %s: owner prefix %q, JSON owner %q", id, rw.Owner, r.Owner)
		}
		owners[id] = r.Owner
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
	if err != nil {
		return err
	}
	for id, o := range owners {
		if _, ok := owners[o]; o != "" && !ok {
			report("resource %s: owner %s does not exist", id, o)
		}
	}

	indexed := map[converge.ID]converge.ID{}
	err = v.scan(kOwners, "", true, func(k string, _ []byte) error {
		owner, child, ok := codec.SplitPair([]byte(k[len(kOwners):]))
		if !ok {
			report("owner index: malformed key %q", k)
			return nil
		}
		if o, dup := indexed[child]; dup {
			report("owner index: %s listed under %s and %s", child, o, owner)
		}
		indexed[child] = owner
		o, exists := owners[child]
		switch {
		case !exists:
			report("owner index: %s → %s: child does not exist", owner, child)
		case o != owner:
			report("owner index: %s → %s: child's owner is %q", owner, child, o)
		}
		return nil
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

	reverse := map[string]bool{}
	err = v.scan(kProducers, "", true, func(k string, _ []byte) error {
		pair := k[len(kProducers):]
		p, c, ok := codec.SplitPair([]byte(pair))
		if !ok {
			report("reverse edge index: malformed key %q", k)
			return nil
		}
		reverse[pair] = true
		if _, ok := owners[c]; !ok {
			report("reverse edge index: %s→%s: consumer does not exist", c, p)
		} else if !edges[pair] {
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

	if err := checkKeyed(v, report); err != nil {
		return err
	}
	return checkEvents(v, report)
}

// checkKeyed checks that every JSON row is keyed by its content.
func checkKeyed(v *view, report func(string, ...any)) error {
	rows := []struct {
		prefix string
		key    func(val []byte) (string, error)
	}{
		{kKinds, func(val []byte) (string, error) {
			var k converge.Kind
			err := json.Unmarshal(val, &k)
			return string(codec.KindKey(k.Ref())), err
		}},
		{kConfigs, func(val []byte) (string, error) {
			var c converge.ProviderConfig
			err := json.Unmarshal(val, &c)
			return c.Name, err
		}},
		{kBindings, func(val []byte) (string, error) {
			var b converge.Binding
			err := json.Unmarshal(val, &b)
			return b.Name, err
		}},
		{kDeliveries, func(val []byte) (string, error) {
			var d converge.Delivery
			err := json.Unmarshal(val, &d)
			return d.Key, err
		}},
		{kRevisions, func(val []byte) (string, error) {
			var r converge.RevisionRecord
			err := json.Unmarshal(val, &r)
			return r.Revision.Hash, err
		}},
	}
	for _, row := range rows {
		err := v.scan(row.prefix, "", false, func(k string, val []byte) error {
			want, err := row.key(val)
			if err != nil {
				report("%s: %v", k, err)
			} else if got := k[len(row.prefix):]; got != want {
				report("%s: key %q, value is %q", strings.TrimSuffix(row.prefix, "/"), got, want)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if _, err := applied(v); err != nil {
		report("meta: %v", err)
	}
	return nil
}

func checkEvents(v *view, report func(string, ...any)) error {
	var prev, count uint64
	err := v.scan(kEvents, "", false, func(k string, val []byte) error {
		key := []byte(k[len(kEvents):])
		if len(key) != 8 {
			report("event chunk key %x: want 8 bytes", key)
			return nil
		}
		first := binary.BigEndian.Uint64(key)
		evs, err := codec.DecodeChunk(val)
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
	mv, err := v.get(mEvents)
	if err != nil {
		return err
	}
	lastSeq, n := eventsMeta(mv)
	if n != count {
		report("meta: %d events recorded, %d stored", n, count)
	}
	if prev > lastSeq {
		report("meta: last event seq %d below stored seq %d", lastSeq, prev)
	}
	return nil
}
