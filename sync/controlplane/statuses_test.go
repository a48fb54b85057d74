package controlplane

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/forge"
	"github.com/convergehq/converge/sync/forge/forgetest"
	"github.com/convergehq/converge/sync/gittest"
)

// statusRepo makes a real repository with one commit whose note holds
// statuses (none: no note), and returns its directory and the commit's
// hash.
func statusRepo(t *testing.T, statuses []converge.CommitStatus) (string, string) {
	t.Helper()
	dir := gittest.Repo(t, map[string]string{"README": "a repository\n"})
	hash := gittest.Run(t, dir, "rev-parse", "HEAD")
	if len(statuses) > 0 {
		src, err := gitsync.OpenLocal(dir, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := src.WriteStatuses(hash, statuses); err != nil {
			t.Fatal(err)
		}
	}
	return dir, hash
}

// githubReporter posts to the fake GitHub f.
func githubReporter(f *forgetest.GitHubServer) forge.Reporter {
	return forge.NewGitHub(f.URL(), forgetest.Owner, forgetest.Repo, forgetest.Token)
}

// TestStatusRecords: records stored through Statuses.Records (the follow
// loop's hook) become the commit's note and reach the forge.
func TestStatusRecords(t *testing.T) {
	dir, hash := statusRepo(t, nil)
	src, err := gitsync.OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(src.Root(), gitsync.DefaultStateDir) // the repository's own state
	st, err := state.Open(stateDir, state.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f := forgetest.NewGitHub(t, false)
	var errOut bytes.Buffer
	o, err := StartStatuses(context.Background(), src, stateDir, StatusOptions{Reporter: githubReporter(f), Log: slog.New(slog.NewTextHandler(&errOut, nil))})
	if err != nil {
		t.Fatal(err)
	}
	recs := o.Records(st, &errOut)
	rec := &converge.RevisionRecord{Revision: converge.Revision{Ref: "main", Hash: hash}}
	for _, s := range []converge.CommitStatus{
		{Context: converge.ContextSync, State: converge.StatePending, Description: "applied, converging"},
		{Context: converge.ContextSync, State: converge.StateSuccess, Description: "1/1 Ready"},
	} {
		rec.SetStatus(s)
		if err := recs.PutRevision(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		note, err := src.ReadStatuses(hash)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := note[0].State, s.State; got != want {
			t.Errorf("note state: got %q, want %q", got, want)
		}
	}
	o.Stop()
	if errOut.Len() > 0 {
		t.Errorf("errors: %s", errOut.String())
	}
	var got []string
	for _, p := range f.Statuses() {
		got = append(got, p.State)
	}
	if want := []string{"pending", "success"}; !reflect.DeepEqual(got, want) {
		t.Errorf("forge got %v, want %v", got, want)
	}
	if stored, err := st.Revision(context.Background(), hash); err != nil || len(stored.Statuses) != 1 {
		t.Errorf("stored record: %+v, %v", stored, err)
	}
}

// TestStatusRecordsNotOwner: a run on a state that does not own the
// repository's notes (a scratch --state) leaves the note another state
// wrote alone and posts nothing to the forge, saying so; once
// `git config converge.state` names it, it writes both.
func TestStatusRecordsNotOwner(t *testing.T) {
	owned := []converge.CommitStatus{{Context: converge.ContextSync, State: converge.StateSuccess, Description: "3652/3652 Ready"}}
	dir, hash := statusRepo(t, owned)
	scratch := t.TempDir()
	st, err := state.Open(scratch, state.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f := forgetest.NewGitHub(t, false)
	failure := &converge.RevisionRecord{Revision: converge.Revision{Ref: "main", Hash: hash}}
	failure.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StateFailure, Description: "timed out: 0/3652 Ready"})
	run := func() string {
		t.Helper()
		src, err := gitsync.OpenLocal(dir, "")
		if err != nil {
			t.Fatal(err)
		}
		var errOut bytes.Buffer
		o, err := StartStatuses(context.Background(), src, scratch, StatusOptions{Reporter: githubReporter(f), Log: slog.New(slog.NewTextHandler(&errOut, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Records(st, &errOut).PutRevision(context.Background(), failure); err != nil {
			t.Fatal(err)
		}
		if err := o.Report(&gitsync.Pass{Revision: failure.Revision, Record: failure}); err != nil {
			t.Error(err)
		}
		o.Stop()
		return errOut.String()
	}

	msg := run()
	if want := "not written: another state owns them (git config converge.state names it); this one keeps its verdicts in its store\" owner=" + filepath.Join(dir, ".converge"); !strings.Contains(msg, want) {
		t.Errorf("output %q, want it to contain %q", msg, want)
	}
	if note, err := gitsync.OpenLocal(dir, ""); err != nil {
		t.Fatal(err)
	} else if got, err := note.ReadStatuses(hash); err != nil || !reflect.DeepEqual(got, owned) {
		t.Errorf("note after a scratch run = %+v, %v; want the owner's %+v", got, err, owned)
	}
	if got := f.Statuses(); len(got) != 0 {
		t.Errorf("forge got %+v from a scratch run, want nothing", got)
	}
	if stored, err := st.Revision(context.Background(), hash); err != nil || stored.Statuses[0].State != converge.StateFailure {
		t.Errorf("scratch store's record = %+v, %v; want its own failure kept", stored, err)
	}

	gittest.Run(t, dir, "config", "converge.state", scratch)
	if msg := run(); msg != "" {
		t.Errorf("output %q from the owning state, want none", msg)
	}
	src, err := gitsync.OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := src.ReadStatuses(hash); err != nil || got[0].State != converge.StateFailure {
		t.Errorf("note after the owner's run = %+v, %v; want its failure", got, err)
	}
	if got := f.Statuses(); len(got) == 0 {
		t.Error("forge got nothing from the owning state")
	}
}

// TestStatusesPush: with Push every reported verdict reaches origin's
// notes, and a status links to the status site.
func TestStatusesPush(t *testing.T) {
	dir, hash := statusRepo(t, nil)
	bare := filepath.Join(t.TempDir(), "origin.git")
	gittest.Run(t, dir, "init", "-q", "--bare", bare)
	gittest.Run(t, dir, "remote", "add", "origin", "file://"+bare)
	gittest.Run(t, dir, "push", "-q", "origin", "main")
	src, err := gitsync.OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	f := forgetest.NewGitHub(t, false)
	o, err := StartStatuses(context.Background(), src, filepath.Join(src.Root(), gitsync.DefaultStateDir),
		StatusOptions{Reporter: githubReporter(f), Push: true, SiteURL: "https://converge.example/"})
	if err != nil {
		t.Fatal(err)
	}
	rec := &converge.RevisionRecord{Revision: converge.Revision{Ref: "main", Hash: hash}}
	rec.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StateSuccess, Description: "pushed by the run", Time: time.Now()})
	if err := o.Report(&gitsync.Pass{Revision: rec.Revision, Record: rec}); err != nil {
		t.Fatal(err)
	}
	o.Stop()
	out, err := gittest.Command(bare, "notes", "--ref", "converge", "show", hash).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "pushed by the run") {
		t.Errorf("origin's note: %v\n%s", err, out)
	}
	got := f.Statuses()
	if len(got) != 1 {
		t.Fatalf("forge got %+v, want one status", got)
	}
	if want := "https://converge.example/#rev-" + hash; got[0].TargetURL != want {
		t.Errorf("target_url %q, want %q", got[0].TargetURL, want)
	}
	// A work tree's pass has no note, and nothing is posted for it.
	dirty := &converge.RevisionRecord{Revision: converge.Revision{Ref: "main", Dirty: true}}
	if err := o.Report(&gitsync.Pass{Revision: dirty.Revision, Record: dirty}); err != nil {
		t.Error(err)
	}
	var none *Statuses
	if err := none.Report(&gitsync.Pass{Revision: rec.Revision, Record: rec}); err != nil {
		t.Errorf("a nil Statuses reported: %v", err)
	}
	none.Stop()
}
