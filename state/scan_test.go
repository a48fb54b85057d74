package state_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/statetest"
)

// TestResourcesAfter pages through a store with every page size and kind
// filter and checks the pages put together are Resources(kind) in order,
// each with the edges EdgesOf says it consumes.
func TestResourcesAfter(t *testing.T) {
	s := statetest.Open(t)
	b := &converge.Batch{}
	for i := range 7 {
		acct := res("account", fmt.Sprintf("a%d", i), "")
		vpc := res("vpc", fmt.Sprintf("v%d", i), "")
		b.Resources = append(b.Resources, acct, vpc)
		b.Edges = append(b.Edges, edge(vpc.ID(), acct.ID(), converge.ValueFlow{From: "account_id", To: "account_id"}))
		if i > 0 {
			b.Edges = append(b.Edges, edge(vpc.ID(), converge.ID(fmt.Sprintf("vpc/v%d", i-1))))
		}
	}
	b.Resources = append(b.Resources, res("zone", "z", ""))
	commit(t, s, b)
	tests := []struct {
		name  string
		kind  string
		limit int
	}{
		{"all at once", "", 0},
		{"all by one", "", 1},
		{"all by four", "", 4},
		{"vpc by three", "vpc", 3},
		{"account by seven", "account", 7},
		{"zone by two", "zone", 2},
		{"absent kind", "bucket", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := s.Resources(state.Filter{Kind: tt.kind})
			if err != nil {
				t.Fatal(err)
			}
			var got []state.ResourceRow
			after := converge.ID("")
			for calls := 0; ; calls++ {
				if calls > len(want)+1 {
					t.Fatal("the scan does not end")
				}
				page, err := s.ResourcesAfter(tt.kind, after, tt.limit)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, page...)
				if tt.limit <= 0 || len(page) < tt.limit {
					break
				}
				after = page[len(page)-1].Resource.ID()
			}
			if g, w := len(got), len(want); g != w {
				t.Fatalf("scanned %d resources, want %d", g, w)
			}
			for i, row := range got {
				if g, w := row.Resource.ID(), want[i].ID(); g != w {
					t.Errorf("row %d = %s, want %s", i, g, w)
				}
				consumes, _, err := s.EdgesOf(row.Resource.ID())
				if err != nil {
					t.Fatal(err)
				}
				if len(consumes) == 0 {
					consumes = nil
				}
				if !reflect.DeepEqual(row.Consumes, consumes) {
					t.Errorf("%s consumes %v, want %v", row.Resource.ID(), row.Consumes, consumes)
				}
			}
		})
	}
}

// TestResourceHeadsAfter checks that a scan of heads is the scan of
// resources less their declared spec, spec and status.
func TestResourceHeadsAfter(t *testing.T) {
	s := statetest.Open(t)
	acct, vpc := res("account", "a", ""), res("vpc", "v", "")
	acct.Status = []byte(`{"id":"1"}`)
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{acct, vpc},
		Edges: []converge.Edge{edge(vpc.ID(), acct.ID(), converge.ValueFlow{From: "id", To: "account_id"})}})
	full, err := s.ResourcesAfter("", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	heads, err := s.ResourceHeadsAfter("", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(full) != 2 || len(heads) != len(full) {
		t.Fatalf("%d heads, %d resources; want 2 of each", len(heads), len(full))
	}
	for i, row := range full {
		want := *row.Resource
		want.Declared, want.Spec, want.Status = nil, nil, nil
		if !reflect.DeepEqual(heads[i].Resource, &want) || !reflect.DeepEqual(heads[i].Consumes, row.Consumes) {
			t.Errorf("head %d = %+v consuming %v, want %+v consuming %v", i, heads[i].Resource, heads[i].Consumes, &want, row.Consumes)
		}
	}
}
