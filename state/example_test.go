package state_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
)

// schedulerStore mirrors scheduler.Store (scheduler/ports.go). It is
// copied rather than imported so that this package's tests do not depend
// on the scheduler package building.
type schedulerStore interface {
	Load(ctx context.Context) (*converge.Snapshot, error)
	Commit(ctx context.Context, b *converge.Batch) error
}

var _ schedulerStore = (*state.Store)(nil)

func ExampleStore_Commit() {
	dir, err := os.MkdirTemp("", "state-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := state.Open(dir, state.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()

	// One batch, one transaction: a root, a child it owns, an edge and
	// the events of both.
	err = s.Commit(ctx, &converge.Batch{
		Resources: []*converge.Resource{
			{Kind: "bom", KindVersion: 1, Name: "classic", Phase: converge.PhasePending, Spec: json.RawMessage(`{}`)},
			{Kind: "vpc", KindVersion: 1, Name: "team-a", Phase: converge.PhasePending, Spec: json.RawMessage(`{}`), Owner: "bom/classic"},
		},
		Edges:  []converge.Edge{{Consumer: "vpc/team-a", Producer: "account/team-a"}},
		Events: []converge.Event{{Resource: "bom/classic", Type: "Created"}, {Resource: "vpc/team-a", Type: "Created"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	children, _ := s.Children(ctx, "bom/classic")
	events, _ := s.Events(ctx, "vpc/team-a", 0)
	st := s.Stats()
	fmt.Println(children, events[0].Seq, events[0].Type)
	fmt.Printf("commits=%d puts=%d\n", st.Commits, st.Puts)
	// Output:
	// [vpc/team-a] 2 Created
	// commits=1 puts=7
}
