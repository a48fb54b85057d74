package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/sync/gittest"
)

// syncExample copies examples/NAME into a git repository, syncs it (real
// workers, a real store) and returns the stored snapshot.
func syncExample(t *testing.T, name string) *converge.Snapshot {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(repoRoot(t), "examples", name))); err != nil {
		t.Fatal(err)
	}
	gittest.Run(t, dir, "init", "-q", "-b", "main")
	gittest.Run(t, dir, "add", "-A")
	gittest.Run(t, dir, "commit", "-q", "-m", name)
	stateDir := t.TempDir()
	out, err := runCLI("--repo", dir, "--state", stateDir, "sync", "--timeout", "3m")
	if err != nil {
		t.Fatalf("sync %s: %v\n%s", name, err, out)
	}
	return loadState(t, stateDir)
}

// loadState returns everything the store in dir holds.
func loadState(t *testing.T, dir string) *converge.Snapshot {
	t.Helper()
	st, err := state.Open(dir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	snap, err := st.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// graphOf renders a snapshot's graph: every resource "kind/name" (with
// its owner), and every edge "consumer <- producer [from>to ...]", sorted;
// and the resources not Ready.
func graphOf(snap *converge.Snapshot) (resources, edges, notReady []string) {
	for _, r := range snap.Resources {
		resources = append(resources, fmt.Sprintf("%s owner=%s", r.ID(), r.Owner))
		if r.Phase != converge.PhaseReady {
			notReady = append(notReady, fmt.Sprintf("%s %s %s", r.ID(), r.Phase, r.Reason))
		}
	}
	for _, e := range snap.Edges {
		var fl []string
		for _, f := range e.Flows {
			fl = append(fl, f.From+">"+f.To)
		}
		slices.Sort(fl)
		edges = append(edges, fmt.Sprintf("%s <- %s [%s]", e.Consumer, e.Producer, strings.Join(fl, " ")))
	}
	slices.Sort(resources)
	slices.Sort(edges)
	return resources, edges, notReady
}

// TestDatadrivenMatchesClassic: examples/datadriven, whose classicbom
// composes in CUE with no worker serving it, converges to the same graph
// as examples/classic's Go composer: the same resources (kind/name and
// owner), the same edges with the same flows, every resource Ready.
func TestDatadrivenMatchesClassic(t *testing.T) {
	if testing.Short() {
		t.Skip("syncs two 3,652-resource examples")
	}
	classic := syncExample(t, "classic")
	data := syncExample(t, "datadriven")
	cr, ce, cn := graphOf(classic)
	dr, de, dn := graphOf(data)
	if len(cn) > 0 || len(dn) > 0 {
		t.Errorf("not Ready: classic %v, datadriven %v", cn, dn)
	}
	if len(cr) != 3652 {
		t.Errorf("classic has %d resources, want 3652", len(cr))
	}
	if !slices.Equal(cr, dr) {
		t.Errorf("resources differ: classic %d, datadriven %d; first difference %s", len(cr), len(dr), firstDiff(cr, dr))
	}
	if !slices.Equal(ce, de) {
		t.Errorf("edges differ: classic %d, datadriven %d; first difference %s", len(ce), len(de), firstDiff(ce, de))
	}
	// The specs the leaves saw are the same too (the CUE composer's
	// cidr is the Go composer's).
	specs := map[converge.ID]string{}
	for _, r := range classic.Resources {
		specs[r.ID()] = string(r.Spec)
	}
	for _, r := range data.Resources {
		if r.Owner != "" && specs[r.ID()] != string(r.Spec) {
			t.Errorf("%s spec %s, classic %s", r.ID(), r.Spec, specs[r.ID()])
			break
		}
	}
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("%q vs %q", a[i], b[i])
		}
	}
	return "(one is a prefix of the other)"
}
