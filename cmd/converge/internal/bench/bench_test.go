package bench

import (
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/convergehq/converge/cue"
)

// The classic example scaled to 1,000 teams over 3 roots loads as three
// classicbom roots whose teams add up, with distinct names and prefixes.
func TestScaleBOMSplitsTeamsOverRoots(t *testing.T) {
	scaled, err := ScaleBOM(os.DirFS("../../../../examples/classic"), 1000, 3)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cue.Load(scaled, ".", cue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) > 0 {
		t.Fatalf("scaled BOM is invalid: %v", res.Findings)
	}
	var names []string
	total := 0
	for _, r := range res.Desired.Resources {
		if r.Kind != "classicbom" {
			continue
		}
		names = append(names, r.Name)
		var teams int
		if _, err := fmt.Sscanf(string(BOMTeams.Find(mustRead(t, scaled, "resources/bom-"+strings.TrimPrefix(r.Name, "classic-")+".cue"))), "_teams: %d", &teams); err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		total += teams
	}
	if strings.Join(names, ",") != "classic-00,classic-01,classic-02" {
		t.Errorf("roots %v, want classic-00..02", names)
	}
	if total != 1000 {
		t.Errorf("teams add up to %d, want 1000", total)
	}
	if _, err := fs.Stat(scaled, "resources/bom.cue"); err == nil {
		t.Error("the unscaled bom.cue is still there beside the split ones")
	}
}

// A BOM without the lines ScaleBOM rewrites is an error that names the
// file, not a silently unscaled run.
func TestScaleBOMRefusesAnUnknownBOM(t *testing.T) {
	_, err := ScaleBOM(os.DirFS("../../../../examples/onprem"), 10, 1)
	if err == nil || !strings.Contains(err.Error(), "resources/bom.cue") {
		t.Fatalf("err = %v, want one naming resources/bom.cue", err)
	}
}

// An invalid repository is a Failure (exit 1), told apart from an
// error that kept the bench from running.
func TestMeasureInvalidRepositoryIsAFailure(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/converge.cue", []byte("settings: {nope: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Measure(t.Context(), Options{Runs: 1, Dir: dir})
	if err == nil {
		t.Fatal("no error for an invalid repository")
	}
	if !IsFailure(err) || !strings.Contains(err.Error(), "converge.cue") {
		t.Fatalf("err = %v, want a Failure naming converge.cue", err)
	}
	_, err = Measure(t.Context(), Options{Runs: 1, Dir: dir + "/absent"})
	if err == nil || IsFailure(err) {
		t.Fatalf("a missing directory: err = %v, want a plain error", err)
	}
}

func TestMedianIsTheMiddleRun(t *testing.T) {
	m := median([]Run{{Seconds: 3}, {Seconds: 1}, {Seconds: 2}})
	if m.Seconds != 2 {
		t.Fatalf("median %v, want the 2 s run", m.Seconds)
	}
}

func mustRead(t *testing.T, fsys fs.FS, name string) []byte {
	t.Helper()
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
