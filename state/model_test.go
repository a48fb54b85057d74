package state_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/statetest"
)

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
					if _, err := s.Resource(context.Background(), id); err != nil {
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
		got, err := s.Children(context.Background(), "bom/r")
		if err != nil {
			t.Fatal(err)
		}
		wantIDs := slices.Sorted(maps.Keys(want))
		if !slices.Equal(got, wantIDs) {
			t.Fatalf("step %d: Children = %d ids, want %d", step, len(got), len(wantIDs))
		}
		if err := s.Check(context.Background()); err != nil {
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
	if got, _ := s.Children(context.Background(), "bom/r"); len(got) != 0 {
		t.Errorf("Children after deleting everything = %d ids", len(got))
	}
}
