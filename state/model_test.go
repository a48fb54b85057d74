package state_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/statetest"
)

// model is the store's documented semantics, written independently of it:
// TestAgainstModel applies random batches to both and compares.
type model struct {
	owner map[converge.ID]converge.ID // resource → owner ("" for none)
	phase map[converge.ID]converge.Phase
	edges map[[2]converge.ID][]converge.ValueFlow
}

func (m *model) clone() *model {
	return &model{owner: maps.Clone(m.owner), phase: maps.Clone(m.phase), edges: maps.Clone(m.edges)}
}

// apply returns the model after b, or ok false if the store must reject b.
func (m *model) apply(b *converge.Batch) (*model, bool) {
	n := m.clone()
	del := map[converge.ID]bool{}
	for _, id := range b.DeletedResources {
		del[id] = true
	}
	for _, r := range b.Resources {
		if del[r.ID()] || r.Owner == r.ID() {
			return nil, false
		}
		n.owner[r.ID()], n.phase[r.ID()] = r.Owner, r.Phase
	}
	delEdge := map[[2]converge.ID]bool{}
	for _, e := range b.DeletedEdges {
		delEdge[[2]converge.ID{e.Consumer, e.Producer}] = true
	}
	for _, e := range b.Edges {
		k := [2]converge.ID{e.Consumer, e.Producer}
		if delEdge[k] || e.Consumer == e.Producer {
			return nil, false
		}
		if _, ok := n.owner[e.Consumer]; !ok {
			return nil, false
		}
		n.edges[k] = e.Flows
	}
	for k := range delEdge {
		delete(n.edges, k)
	}
	for id := range del {
		delete(n.owner, id)
		delete(n.phase, id)
		for k := range n.edges {
			if k[0] == id {
				delete(n.edges, k)
			}
		}
	}
	for _, o := range n.owner {
		if _, ok := n.owner[o]; o != "" && !ok {
			return nil, false
		}
	}
	return n, true
}

func TestAgainstModel(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { testAgainstModel(t, seed) })
	}
}

func testAgainstModel(t *testing.T, seed uint64) {
	s := statetest.Open(t)
	rng := rand.New(rand.NewPCG(seed, 11))
	var ids []converge.ID
	for _, k := range []string{"account", "vpc", "route"} {
		for i := range 6 {
			ids = append(ids, converge.NewID(k, fmt.Sprint(i)))
		}
	}
	pick := func() converge.ID { return ids[rng.IntN(len(ids))] }
	flows := [][]converge.ValueFlow{nil, {{From: "a", To: "b"}}, {{From: "c", To: "d"}, {From: "e", To: "f"}}}
	phases := []converge.Phase{converge.PhasePending, converge.PhaseRunning, converge.PhaseReady}
	m := &model{owner: map[converge.ID]converge.ID{}, phase: map[converge.ID]converge.Phase{}, edges: map[[2]converge.ID][]converge.ValueFlow{}}
	accepted, rejected := 0, 0
	for step := range 400 {
		b := &converge.Batch{}
		for range 1 + rng.IntN(8) {
			switch op := rng.IntN(10); {
			case op < 4:
				id := pick()
				r := res(id.Kind(), id.Name(), "")
				r.Phase = phases[rng.IntN(len(phases))]
				if rng.IntN(2) == 0 {
					r.Owner = pick()
				}
				b.Resources = append(b.Resources, r)
			case op < 7:
				b.Edges = append(b.Edges, edge(pick(), pick(), flows[rng.IntN(len(flows))]...))
			case op < 8:
				b.DeletedEdges = append(b.DeletedEdges, edge(pick(), pick()))
			default:
				b.DeletedResources = append(b.DeletedResources, pick())
			}
		}
		want, ok := m.apply(b)
		err := s.Commit(b)
		if ok != (err == nil) {
			t.Fatalf("step %d: Commit error = %v, model accepts = %v\nbatch: %s", step, err, ok, mustJSON(t, b))
		}
		if !ok {
			rejected++
			continue
		}
		accepted++
		m = want
		snap := load(t, s)
		got := &model{owner: map[converge.ID]converge.ID{}, phase: map[converge.ID]converge.Phase{}, edges: map[[2]converge.ID][]converge.ValueFlow{}}
		for _, r := range snap.Resources {
			got.owner[r.ID()], got.phase[r.ID()] = r.Owner, r.Phase
		}
		for _, e := range snap.Edges {
			got.edges[[2]converge.ID{e.Consumer, e.Producer}] = e.Flows
		}
		if fmt.Sprint(got) != fmt.Sprint(m) {
			t.Fatalf("step %d: store\n%v\nmodel\n%v", step, got, m)
		}
		for _, id := range ids {
			children, err := s.Children(id)
			if err != nil {
				t.Fatal(err)
			}
			var wantChildren []converge.ID
			for c, o := range m.owner {
				if o == id {
					wantChildren = append(wantChildren, c)
				}
			}
			slices.Sort(wantChildren)
			if !slices.Equal(children, wantChildren) {
				t.Fatalf("step %d: Children(%s) = %v, want %v", step, id, children, wantChildren)
			}
			_, producedFor, err := s.EdgesOf(id)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for k := range m.edges {
				if k[1] == id {
					n++
				}
			}
			if len(producedFor) != n {
				t.Fatalf("step %d: EdgesOf(%s) producedFor = %v, want %d edges", step, id, producedFor, n)
			}
		}
		if step%20 == 0 {
			if err := s.Check(); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
	}
	if accepted < 100 || rejected < 50 {
		t.Errorf("%d batches accepted, %d rejected: the generator does not exercise both", accepted, rejected)
	}
	t.Logf("%d batches accepted, %d rejected", accepted, rejected)
}

// TestOwnerIndexChunks drives one owner through many children (chunks
// split, emptied, rekeyed) and checks Children, Check and the put cost.
func TestOwnerIndexChunks(t *testing.T) {
	s := statetest.Open(t)
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("bom", "r", ""), res("bom", "q", "")}})
	rng := rand.New(rand.NewPCG(3, 4))
	want := map[converge.ID]bool{}
	name := func(i int) string { return fmt.Sprintf("c%04d", i) }
	for step := range 40 {
		b := &converge.Batch{}
		switch {
		case step < 4: // 500 new children per batch, shuffled
			for _, i := range rng.Perm(500) {
				id := converge.NewID("vpc", name(step*500+i))
				b.Resources = append(b.Resources, res("vpc", id.Name(), "bom/r"))
				want[id] = true
			}
		case step%3 == 0: // re-parent some to bom/q
			for id := range want {
				if rng.IntN(8) == 0 {
					b.Resources = append(b.Resources, res("vpc", id.Name(), "bom/q"))
					delete(want, id)
				}
			}
		default: // delete a random range, add some back
			lo := rng.IntN(2000)
			for i := lo; i < lo+rng.IntN(400); i++ {
				id := converge.NewID("vpc", name(i))
				if want[id] {
					b.DeletedResources = append(b.DeletedResources, id)
					delete(want, id)
				}
			}
			for range 50 {
				id := converge.NewID("vpc", name(rng.IntN(2000)))
				if !want[id] && !slices.Contains(b.DeletedResources, id) {
					if _, err := s.Resource(id); err != nil {
						b.Resources = append(b.Resources, res("vpc", id.Name(), "bom/r"))
						want[id] = true
					}
				}
			}
		}
		before := s.Stats()
		commit(t, s, b)
		if step < 4 {
			if got := s.Stats().Puts - before.Puts - 500; got > 12 {
				t.Errorf("step %d: 500 children cost %d owner-index puts, want ≤ 12", step, got)
			}
		}
		got, err := s.Children("bom/r")
		if err != nil {
			t.Fatal(err)
		}
		wantIDs := slices.Sorted(maps.Keys(want))
		if !slices.Equal(got, wantIDs) {
			t.Fatalf("step %d: Children = %d ids, want %d", step, len(got), len(wantIDs))
		}
		if err := s.Check(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	// Empty the owner entirely: its chunks go.
	b := &converge.Batch{}
	for id := range want {
		b.DeletedResources = append(b.DeletedResources, id)
	}
	b.DeletedResources = append(b.DeletedResources, "bom/r")
	commit(t, s, b)
	if got, _ := s.Children("bom/r"); len(got) != 0 {
		t.Errorf("Children after deleting everything = %d ids", len(got))
	}
}

// TestOwnerIndexFirstChunkEmptied empties an owner's first chunk while
// later chunks remain: the next chunk must take the empty bound.
func TestOwnerIndexFirstChunkEmptied(t *testing.T) {
	s := statetest.Open(t)
	b := &converge.Batch{Resources: []*converge.Resource{res("bom", "r", "")}}
	for i := range 300 {
		b.Resources = append(b.Resources, res("vpc", fmt.Sprintf("c%04d", i), "bom/r"))
	}
	commit(t, s, b)
	del := &converge.Batch{}
	for i := range 200 {
		del.DeletedResources = append(del.DeletedResources, converge.NewID("vpc", fmt.Sprintf("c%04d", i)))
	}
	commit(t, s, del)
	got, err := s.Children("bom/r")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 100 || got[0] != "vpc/c0200" {
		t.Errorf("Children = %d ids from %v, want 100 from vpc/c0200", len(got), got[:min(1, len(got))])
	}
	// Statetest's cleanup Check verifies the chunk layout.
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("vpc", "a0000", "bom/r")}})
	if got, _ := s.Children("bom/r"); len(got) != 101 || got[0] != "vpc/a0000" {
		t.Errorf("after adding vpc/a0000: %d ids from %v", len(got), got[:min(1, len(got))])
	}
}
