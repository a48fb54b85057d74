package sync

import (
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/sync/gittest"
)

// examplePass checks the head of a git repository holding the example
// directory dir (../examples/NAME).
func examplePass(t *testing.T, dir string) *Pass {
	t.Helper()
	files := map[string]string{}
	err := fs.WalkDir(os.DirFS(dir), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(dir + "/" + p)
		files[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	src, err := OpenLocal(gittest.Repo(t, files), "")
	if err != nil {
		t.Fatal(err)
	}
	head, err := src.Head()
	if err != nil {
		t.Fatal(err)
	}
	pass, err := (&Syncer{Source: src}).CheckContext(t.Context(), head)
	if err != nil {
		t.Fatal(err)
	}
	if !pass.Valid() {
		t.Fatalf("%s is invalid: %v", dir, pass.Record.Errors)
	}
	return pass
}

// Plan against an empty store creates the declared resources and the
// children their CUE composers' dry runs make; against its own revision
// as the base (a pull request that changes nothing) it changes nothing.
func TestPlanComposesInProcessAndAgainstABase(t *testing.T) {
	pass := examplePass(t, "../examples/datadriven")
	rv, snap, p, err := Plan(t.Context(), pass, PlanOptions{Stored: &converge.Snapshot{}, Lint: cue.LintTrees})
	if err != nil {
		t.Fatal(err)
	}
	declared := len(pass.Loaded.Desired.Resources)
	if rv.Summary.Create <= declared {
		t.Errorf("creates %d, want more than the %d declared (the BOM's children)", rv.Summary.Create, declared)
	}
	if len(p.Unanswered) > 0 || len(snap.Resources) != 0 {
		t.Errorf("unanswered %v, snapshot of %d: want every dry run answered, against the empty store", p.Unanswered, len(snap.Resources))
	}
	rv, snap, p, err = Plan(t.Context(), pass, PlanOptions{Base: pass, Lint: cue.LintTrees})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Empty() || len(rv.Breaking) > 0 {
		t.Errorf("against itself: plan %+v, breaking %v; want nothing", rv.Summary, rv.Breaking)
	}
	if len(snap.Resources) <= declared {
		t.Errorf("base snapshot of %d resources, want the composed graph", len(snap.Resources))
	}
}

// A base whose composer a worker runs, with no worker to ask, leaves
// the base's graph unknown: ErrBaseUnknown, not a plan against half a
// graph.
func TestPlanBaseWithoutAnswersIsUnknown(t *testing.T) {
	pass := examplePass(t, "../examples/classic")
	_, _, _, err := Plan(t.Context(), pass, PlanOptions{Base: pass})
	if !errors.Is(err, ErrBaseUnknown) {
		t.Fatalf("err = %v, want ErrBaseUnknown", err)
	}
}
