package scheduler

import (
	"testing"

	"github.com/convergehq/converge"
)

// TestChildIndex: every child is found at its position, an ID twice is
// refused at its second position, and an ID never added is not found,
// whatever the table's collisions (a table of 8 slots for 3 IDs, and one
// of thousands).
func TestChildIndex(t *testing.T) {
	for _, n := range []int{0, 1, 3, 5000} {
		ids := make([]converge.ID, n)
		for i := range ids {
			ids[i] = converge.NewID("vpc", "team-"+itoa(int64(i)))
		}
		x := newChildIndex(ids)
		for i := range ids {
			if !x.add(i) {
				t.Fatalf("%d ids: %s refused as a duplicate", n, ids[i])
			}
		}
		if x.len() != n || len(x.slots) < 2*n {
			t.Fatalf("%d ids: len %d, %d slots", n, x.len(), len(x.slots))
		}
		for i, id := range ids {
			if at, ok := x.find(id); !ok || at != i {
				t.Fatalf("%d ids: %s at %d (%v), want %d", n, id, at, ok, i)
			}
		}
		if x.has("vpc/team-none") || x.has("") {
			t.Fatalf("%d ids: found an ID never added", n)
		}
	}
	dup := []converge.ID{"vpc/a", "vpc/b", "vpc/a"}
	x := newChildIndex(dup)
	if !x.add(0) || !x.add(1) || x.add(2) {
		t.Fatal("vpc/a added twice without a refusal")
	}
	if at, _ := x.find("vpc/a"); at != 0 {
		t.Fatalf("vpc/a at %d after its duplicate, want its first position", at)
	}
	var none *childIndex
	if none.has("vpc/a") || none.len() != 0 {
		t.Fatal("a nil index holds something")
	}
}
