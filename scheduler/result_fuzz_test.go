package scheduler

import (
	"encoding/json"
	"testing"

	"github.com/convergehq/converge"
)

// FuzzCheckResult puts any compose result, full or delta, through the
// checks every worker result passes before it is applied
// (checkComposition, checkDelta, and checkObject on the status), beside a
// standing composition: never a panic, and what they accept is sound —
// one ID per child, edges only from sent children, no self-edge, no
// cycle, nothing both sent and removed, a status that is a JSON object.
func FuzzCheckResult(f *testing.F) {
	f.Add([]byte(`{"Status":{"id":"x"},"Children":[{"Kind":"vpc","KindVersion":1,"Name":"a","Spec":{"x":1}},{"Kind":"tgw","KindVersion":1,"Name":"b","Spec":{}}],"Edges":[{"Consumer":"vpc/a","Producer":"tgw/b","Flows":[{"From":"status.id","To":"spec.tgw"}]}],"Removed":["vpc/kept"]}`), uint8(0))
	f.Add([]byte(`{"Children":[{"Kind":"vpc","KindVersion":1,"Name":"kept","Added":true}],"Edges":[{"Consumer":"vpc/kept","Producer":"vpc/kept"}]}`), uint8(2))
	f.Add([]byte(`{"Children":[{"Kind":"vpc","KindVersion":1,"Name":"a"},{"Kind":"vpc","KindVersion":1,"Name":"b"}],"Edges":[{"Consumer":"vpc/a","Producer":"vpc/b"},{"Consumer":"vpc/b","Producer":"vpc/a"}]}`), uint8(1))
	f.Add([]byte(`{"Status":[1],"Children":[{"Kind":"","KindVersion":0,"Name":"a/b\u0000"}]}`), uint8(3))
	owner := converge.ID("classicbom/root")
	standing := map[converge.ID]*converge.Resource{
		"vpc/kept": {Kind: "vpc", KindVersion: 1, Name: "kept", Owner: owner, Declared: json.RawMessage(`{"x":1}`)},
		"tgw/git":  {Kind: "tgw", KindVersion: 1, Name: "git"},
		"vpc/gone": {Kind: "vpc", KindVersion: 1, Name: "gone", Owner: owner, Deleting: true},
	}
	get := func(id converge.ID) (ChildHead, bool) {
		if r := standing[id]; r != nil {
			return headOf(r), true
		}
		return ChildHead{}, false
	}
	producers := func(id converge.ID) []converge.ID {
		if id == "vpc/kept" {
			return []converge.ID{"tgw/git"}
		}
		return nil
	}
	f.Fuzz(func(t *testing.T, data []byte, maxChildren uint8) {
		var res converge.Result
		if json.Unmarshal(data, &res) != nil {
			return
		}
		if len(res.Status) > 0 {
			if err := checkObject(res.Status); err == nil {
				var m map[string]any
				if json.Unmarshal(res.Status, &m) != nil {
					t.Fatalf("checkObject accepted status %q", res.Status)
				}
			}
		}
		k := &converge.Kind{Name: "classicbom", Version: 1, MaxChildren: int(maxChildren % 4)}
		if ids, seen, err := checkComposition(owner, &res, get, k, nil); err == nil {
			sound(t, &res, ids, seen)
		}
		if ids, seen, err := checkDelta(owner, &res, get, func() int { return 1 }, producers, k, nil); err == nil {
			sound(t, &res, ids, seen)
			for _, id := range res.Removed {
				if seen.has(id) {
					t.Fatalf("%s both sent and removed", id)
				}
			}
		}
	})
}

// sound checks what an accepted compose result must be.
func sound(t *testing.T, res *converge.Result, ids []converge.ID, seen *childIndex) {
	t.Helper()
	if len(ids) != len(res.Children) || seen.len() != len(ids) {
		t.Fatalf("%d children, %d ids, %d distinct", len(res.Children), len(ids), seen.len())
	}
	for i, id := range ids {
		if _, err := converge.ParseID(string(id)); err != nil {
			t.Fatalf("child %d: id %q: %v", i, id, err)
		}
		if at, ok := seen.find(id); !ok || at != i {
			t.Fatalf("child %d: id %q indexed at %d (%v)", i, id, at, ok)
		}
	}
	for _, e := range res.Edges {
		if !seen.has(e.Consumer) || e.Consumer == e.Producer {
			t.Fatalf("edge %s -> %s accepted", e.Consumer, e.Producer)
		}
	}
	if c := findCycle(res.Edges); c != "" {
		t.Fatalf("cycle through %s accepted", c)
	}
}
