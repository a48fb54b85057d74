package site_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/site"
	"github.com/convergehq/converge/state"
)

// ExampleBuild writes the site of a store with one root and one child,
// then updates it after the child fails.
func ExampleBuild() {
	tmp, err := os.MkdirTemp("", "site-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	st, err := state.Open(filepath.Join(tmp, "state"), state.Options{NoSync: true})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	root := &converge.Resource{Kind: "classicbom", KindVersion: 1, Name: "classic", Phase: converge.PhaseReady, Spec: json.RawMessage(`{}`)}
	vpc := &converge.Resource{Kind: "vpc", KindVersion: 1, Name: "team-a", Owner: root.ID(), Phase: converge.PhaseReady, Spec: json.RawMessage(`{}`)}
	if err := st.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{root, vpc}}); err != nil {
		log.Fatal(err)
	}

	b := site.NewBuilder(st, filepath.Join(tmp, "site"), site.Options{})
	stats, err := b.Build(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("resources:", stats.Resources)
	fmt.Println(site.ResourcePath(vpc.ID()), site.GraphPath(root.ID()))

	vpc.Phase, vpc.Reason = converge.PhaseFailed, "quota exceeded"
	if err := st.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{vpc}}); err != nil {
		log.Fatal(err)
	}
	if _, err := b.Update(context.Background(), []converge.ID{vpc.ID()}); err != nil {
		log.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(tmp, "site", "summary.json"))
	if err != nil {
		log.Fatal(err)
	}
	var sum site.Summary
	if err := json.Unmarshal(raw, &sum); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d/%d ready, %d failed\n", sum.Counts.Ready, sum.Counts.Total, sum.Counts.Failed)
	// Output:
	// resources: 2
	// r/vpc/3d6.html#team-a graph/classicbom/classic.svg
	// 1/2 ready, 1 failed
}
