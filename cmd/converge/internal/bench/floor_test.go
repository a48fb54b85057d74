package bench

import (
	"os"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/scheduler"
)

// The depth counts a composer before its children and a producer
// before its consumers: root → account → vpc → route is 4; every
// resource reached from the declared roots is counted and validated.
func TestGraphFactsDepthAndValidations(t *testing.T) {
	res, err := cue.Load(os.DirFS("../../../../examples/classic"), ".", cue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	root := &converge.Resource{Kind: "classicbom", KindVersion: 1, Name: "classic"}
	child := func(kind, name string) *converge.Resource {
		return &converge.Resource{Kind: kind, KindVersion: 1, Name: name, Owner: root.ID(), Spec: []byte(`{}`)}
	}
	snap := &converge.Snapshot{Resources: []*converge.Resource{root,
		child("account", "a"), child("vpc", "a"), child("route", "a"), child("tgw", "t")}}
	snap.Edges = []converge.Edge{
		{Consumer: "vpc/a", Producer: "account/a"},
		{Consumer: "route/a", Producer: "vpc/a"},
		{Consumer: "route/a", Producer: "tgw/t"},
	}
	n, depth, perSec, err := graphFacts(t.Context(), scheduler.SnapshotGraph(snap), []*converge.Resource{root}, res.Schemas)
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 || depth != 4 {
		t.Errorf("n %d, depth %d: want 5 resources at depth 4", n, depth)
	}
	if perSec <= 0 {
		t.Errorf("validations/s %v: want a rate", perSec)
	}
}
