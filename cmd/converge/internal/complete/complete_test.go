package complete

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/statetest"
)

// Names lists the ids beginning with what was typed; past Max of them,
// their beginnings up to the next separator, one each.
func TestNamesGroupsWhenMany(t *testing.T) {
	ctx := context.Background()
	st := statetest.Open(t)
	b := &converge.Batch{Kinds: []*converge.Kind{{Name: "vpc", Version: 1, Reactions: []string{converge.ReactionReconcile, "enable_flow_logs"}}}}
	add := func(name string) {
		b.Resources = append(b.Resources, &converge.Resource{UID: "u-" + name, Kind: "vpc", KindVersion: 1, Name: name,
			Phase: converge.PhaseReady, Generation: 1, Spec: json.RawMessage(`{}`), Declared: json.RawMessage(`{}`)})
	}
	for i := range Max + 5 {
		add(fmt.Sprintf("fd-%04d", i))
	}
	add("sample-a")
	add("sample-b")
	if err := st.Commit(ctx, b); err != nil {
		t.Fatal(err)
	}
	got, grouped := Names(ctx, st, "vpc", "sa")
	if grouped || !slices.Equal(got, []string{"vpc/sample-a", "vpc/sample-b"}) {
		t.Errorf("sa: %q (grouped %v)", got, grouped)
	}
	got, grouped = Names(ctx, st, "vpc", "")
	if !grouped || !slices.Equal(got, []string{"vpc/fd-", "vpc/sample-"}) {
		t.Errorf("all: %q (grouped %v), want the two beginnings", got, grouped)
	}
	if got := Kinds(ctx, st); !slices.Equal(got, []string{"vpc"}) {
		t.Errorf("kinds %q", got)
	}
	if got := Verbs(ctx, st, "vpc/sample-a"); !slices.Equal(got, []string{"enable_flow_logs"}) {
		t.Errorf("verbs %q", got)
	}
}
