package providers

import (
	"slices"
	"testing"

	"github.com/convergehq/converge"
	convergev1 "github.com/convergehq/converge/proto/converge/v1"
)

// TestResultSharesFlowLists: the edges of one result that carry equal
// flow lists share one converted list; other lists keep their own, in
// order, and a flow's ends are not run together ("a"+"b\x00" is not
// "a\x00"+"b").
func TestResultSharesFlowLists(t *testing.T) {
	vf := func(pairs ...string) []*convergev1.ValueFlow {
		var out []*convergev1.ValueFlow
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, &convergev1.ValueFlow{From: pairs[i], To: pairs[i+1]})
		}
		return out
	}
	p := &convergev1.Result{TaskId: "t", Outcome: convergev1.Outcome_OUTCOME_OK, Edges: []*convergev1.Edge{
		{Consumer: "vpc/a", Producer: "account/a", Flows: vf("account_id", "account_id")},
		{Consumer: "vpc/b", Producer: "account/b", Flows: vf("account_id", "account_id")},
		{Consumer: "route/a", Producer: "vpc/a", Flows: vf("vpc_id", "vpc_id", "cidr", "net.cidr")},
		{Consumer: "route/b", Producer: "vpc/b", Flows: vf("vpc_id", "vpc_id")},
		{Consumer: "route/c", Producer: "vpc/c"},
	}}
	r := resultFromProto(p, "w1")
	want := [][]converge.ValueFlow{
		{{From: "account_id", To: "account_id"}},
		{{From: "account_id", To: "account_id"}},
		{{From: "vpc_id", To: "vpc_id"}, {From: "cidr", To: "net.cidr"}},
		{{From: "vpc_id", To: "vpc_id"}},
		nil,
	}
	for i, e := range r.Edges {
		if !slices.Equal(e.Flows, want[i]) {
			t.Errorf("edge %d flows %v, want %v", i, e.Flows, want[i])
		}
	}
	if &r.Edges[0].Flows[0] != &r.Edges[1].Flows[0] {
		t.Error("two equal flow lists were converted twice")
	}
	if &r.Edges[2].Flows[0] == &r.Edges[3].Flows[0] {
		t.Error("a list and its prefix share one converted list")
	}
}
