package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/gittest"
)

// TestDatadrivenOneTeamDelta: examples/datadriven at 116 teams, synced
// (real workers, a real store); one team more is one more sync whose
// compose of the CUE-composed classicbom is answered as a delta: the
// root's Composed event says so, its row records the CUE revision that
// composed it, and only the new team's leaves are dispatched.
func TestDatadrivenOneTeamDelta(t *testing.T) {
	if testing.Short() {
		t.Skip("syncs examples/datadriven twice")
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(repoRoot(t), "examples", "datadriven"))); err != nil {
		t.Fatal(err)
	}
	bom := filepath.Join(dir, "resources", "bom.cue")
	setTeams := func(n string) {
		b, err := os.ReadFile(bom)
		if err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(`(?m)^_teams:\s+\d+`)
		if !re.Match(b) {
			t.Fatal("resources/bom.cue has no _teams line")
		}
		if err := os.WriteFile(bom, re.ReplaceAll(b, []byte("_teams: "+n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setTeams("116") // two teams in each of the 58 domains
	gittest.Run(t, dir, "init", "-q", "-b", "main")
	gittest.Run(t, dir, "add", "-A")
	gittest.Run(t, dir, "commit", "-q", "-m", "116 teams")
	stateDir := t.TempDir()
	if out, err := runCLI("--repo", dir, "--state", stateDir, "sync", "--timeout", "3m"); err != nil {
		t.Fatalf("sync: %v\n%s", err, out)
	}
	setTeams("117") // fd-00 gets team-002
	gittest.Run(t, dir, "commit", "-q", "-am", "117 teams")
	planDelta(t, dir, stateDir)
	out, err := runCLI("--repo", dir, "--state", stateDir, "sync", "--timeout", "3m")
	if err != nil {
		t.Fatalf("sync: %v\n%s", err, out)
	}
	// The compose, the new account, VPC and route, and statussink's
	// react to the BOM being synced again.
	if !strings.Contains(out, " 5 dispatched") {
		t.Errorf("the one-team sync: %s, want 5 dispatched", strings.TrimSpace(out))
	}
	st, err := state.Open(stateDir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	evs, err := st.Events(context.Background(), "classicbom/classic", 50)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for _, e := range evs {
		if e.Type == "Composed" {
			last = e.Message
		}
	}
	if want := "composed 467 children as a delta (3 created, 0 updated, 464 kept, 0 pruned)"; !strings.HasPrefix(last, want) {
		t.Errorf("last Composed event %q, want it to begin %q", last, want)
	}
	snap, err := st.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range snap.Resources {
		if r.ID() == converge.ID("classicbom/classic") && !strings.HasPrefix(r.ComposedBy, "cue-") {
			t.Errorf("classicbom/classic ComposedBy = %q, want the CUE revision", r.ComposedBy)
		}
		if r.Phase != converge.PhaseReady {
			t.Errorf("%s is %s: %s", r.ID(), r.Phase, r.Reason)
		}
	}
}

// planDelta plans the head of dir against the store in stateDir as plan
// and sync's prune guard do (Diff, then Fanout's dry runs): the BOM's dry
// run is answered as a delta, and it creates the new team's account, VPC
// and route.
func planDelta(t *testing.T, dir, stateDir string) {
	t.Helper()
	src, err := gitsync.OpenLocal(dir, "main")
	if err != nil {
		t.Fatal(err)
	}
	rev, err := src.Head()
	if err != nil {
		t.Fatal(err)
	}
	pass, err := (&gitsync.Syncer{Source: src}).CheckContext(context.Background(), rev)
	if err != nil || !pass.Valid() {
		t.Fatalf("check %s: %v %v", rev, err, pass.Record.Errors)
	}
	snap := loadState(t, stateDir)
	d := pass.Loaded.Desired
	d.Revision = rev
	p := scheduler.Diff(snap, &d)
	schemas := pass.Loaded.Schemas
	before := schemas.ComposeStats()
	scheduler.Fanout(context.Background(), scheduler.SnapshotGraph(snap), &d, p, schemas, nil)
	if st := schemas.ComposeStats(); st.Delta != before.Delta+1 || st.Fast != before.Fast || st.CUE != before.CUE {
		t.Errorf("the dry run's compose stats %+v (before %+v): want one delta, nothing else", st, before)
	}
	var created []string
	for _, it := range p.Create {
		created = append(created, string(it.ID))
	}
	slices.Sort(created)
	if want := []string{"account/fd-00-team-002", "route/fd-00-team-002", "vpc/fd-00-team-002"}; !slices.Equal(created, want) ||
		len(p.Prune) > 0 || len(p.Refused) > 0 || len(p.Unanswered) > 0 {
		t.Errorf("plan creates %v (want %v), prunes %v, refuses %v, unanswered %v", created, want, p.Prune, p.Refused, p.Unanswered)
	}
}
