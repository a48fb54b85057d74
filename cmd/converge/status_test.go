package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/forge/forgetest"
	"github.com/convergehq/converge/sync/gittest"
)

// statusRepo makes a real repository with one commit whose note holds
// statuses, and returns its directory and the commit's hash.
func statusRepo(t *testing.T, statuses []converge.CommitStatus) (string, string) {
	t.Helper()
	dir := t.TempDir()
	gittest.Run(t, dir, "init", "-q", "-b", "main")
	gittest.Run(t, dir, "commit", "-q", "--allow-empty", "-m", "one")
	src, err := gitsync.OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	head, err := src.Head()
	if err != nil {
		t.Fatal(err)
	}
	if err := src.WriteStatuses(head.Hash, statuses); err != nil {
		t.Fatal(err)
	}
	return dir, head.Hash
}

func runCLI(args ...string) (string, error) { return runCLIWith(&globals{}, args...) }

// runCLISplit is runCLI with stdout and stderr apart: for a command
// whose stdout is a report (-o json) while its log goes to stderr.
func runCLISplit(args ...string) (stdout, stderr string, err error) {
	c := newRoot(&globals{})
	var out, errOut bytes.Buffer
	c.SetArgs(args)
	c.SetOut(&out)
	c.SetErr(&errOut)
	err = c.Execute()
	return out.String(), errOut.String(), err
}

// runCLIWith is runCLI around g (e.g. with a test's wrapStore).
func runCLIWith(g *globals, args ...string) (string, error) {
	c := newRoot(g)
	var buf bytes.Buffer
	c.SetArgs(args)
	c.SetOut(&buf)
	c.SetErr(&buf)
	err := c.Execute()
	return buf.String(), err
}

// TestStatusForge posts a commit's note to fake forges with
// `converge status --forge …`, once: a second run posts nothing.
func TestStatusForge(t *testing.T) {
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	dir, hash := statusRepo(t, []converge.CommitStatus{
		{Context: converge.ContextValidate, State: converge.StateSuccess, Description: "22 documents valid", Time: at},
		{Context: converge.ContextSync, State: converge.StateSuccess, Description: "3652/3652 Ready", Time: at},
	})
	t.Setenv(forgeTokenEnv, forgetest.Token)
	for _, tc := range []struct {
		name string
		kind string
		repo string
		fake func(t *testing.T) *forgetest.Server
	}{
		{name: "github", kind: "github", repo: forgetest.Owner + "/" + forgetest.Repo,
			fake: func(t *testing.T) *forgetest.Server { return &forgetest.NewGitHub(t, false).Server }},
		{name: "gitea", kind: "gitea", repo: forgetest.Owner + "/" + forgetest.Repo,
			fake: func(t *testing.T) *forgetest.Server { return &forgetest.NewGitHub(t, true).Server }},
		{name: "gitlab", kind: "gitlab", repo: forgetest.Project,
			fake: func(t *testing.T) *forgetest.Server { return &forgetest.NewGitLab(t).Server }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.fake(t)
			args := []string{"--repo", dir, "status", "--forge", tc.kind, "--forge-url", f.URL(),
				"--forge-repo", tc.repo, "--site-url", "https://converge.example/"}
			out, err := runCLI(args...)
			if err != nil {
				t.Fatalf("status: %v\n%s", err, out)
			}
			if !strings.Contains(out, "reported 2 statuses of main@sha1:"+hash) {
				t.Errorf("output:\n%s", out)
			}
			got := f.Statuses()
			if len(got) != 2 {
				t.Fatalf("accepted %d statuses, want 2 (refused %v)", len(got), f.Refusals())
			}
			for _, p := range got {
				if p.SHA != hash || p.State != "success" {
					t.Errorf("posted %+v, want success on %s", p, hash)
				}
				if got, want := p.TargetURL, "https://converge.example/#rev-"+hash; got != want {
					t.Errorf("target_url: got %q, want %q", got, want)
				}
			}
			if _, err := runCLI(args...); err != nil {
				t.Fatal(err)
			}
			if got, want := f.Posts(), 2; got != want {
				t.Errorf("POSTs after a second run: got %d, want %d", got, want)
			}
		})
	}
}

func TestStatusForgeUsage(t *testing.T) {
	dir, _ := statusRepo(t, []converge.CommitStatus{{Context: converge.ContextSync, State: converge.StateFailure, Description: "stuck"}})
	t.Setenv(forgeTokenEnv, "")
	tests := []struct {
		name      string
		token     string
		args      []string
		wantUsage bool
		wantOut   string
	}{
		{name: "no token", args: []string{"--forge", "github", "--forge-repo", "o/r"}, wantUsage: true, wantOut: "CONVERGE_FORGE_TOKEN"},
		{name: "no repo", token: "x", args: []string{"--forge", "github"}, wantUsage: true, wantOut: "--forge-repo is required"},
		{name: "bad repo", token: "x", args: []string{"--forge", "github", "--forge-repo", "o"}, wantUsage: true, wantOut: "want OWNER/NAME"},
		{name: "gitea without url", token: "x", args: []string{"--forge", "gitea", "--forge-repo", "o/r"}, wantUsage: true, wantOut: "--forge-url is required"},
		{name: "unknown forge", token: "x", args: []string{"--forge", "svn", "--forge-repo", "o/r"}, wantUsage: true, wantOut: "want github, gitea or gitlab"},
		{name: "failure exits 1", args: nil, wantOut: "converge/sync is failure"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(forgeTokenEnv, tt.token)
			out, err := runCLI(append([]string{"--repo", dir, "status"}, tt.args...)...)
			if err == nil {
				t.Fatalf("no error; output:\n%s", out)
			}
			if got, want := !errors.As(err, new(errFailed)), tt.wantUsage; got != want {
				t.Errorf("usage error = %v, want %v (%v)", got, want, err)
			}
			if !strings.Contains(err.Error()+out, tt.wantOut) {
				t.Errorf("error %q, output %q: want %q", err, out, tt.wantOut)
			}
		})
	}
}

// TestSyncForge runs `converge sync --forge …` in-process on a repository
// with no resources (so no worker processes): the forge receives the
// validate verdict, then converge/sync pending and success, once each, on
// the synced commit; an invalid commit then gets failures.
func TestSyncForge(t *testing.T) {
	for _, tc := range []struct {
		name        string
		kind        string
		repo        string
		fake        func(t *testing.T) *forgetest.Server
		wantFailure string
	}{
		{name: "github", kind: "github", repo: forgetest.Owner + "/" + forgetest.Repo, wantFailure: "failure",
			fake: func(t *testing.T) *forgetest.Server { return &forgetest.NewGitHub(t, false).Server }},
		{name: "gitlab", kind: "gitlab", repo: forgetest.Project, wantFailure: "failed",
			fake: func(t *testing.T) *forgetest.Server { return &forgetest.NewGitLab(t).Server }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(forgeTokenEnv, forgetest.Token)
			f := tc.fake(t)
			dir := t.TempDir()
			gittest.Run(t, dir, "init", "-q", "-b", "main")
			if err := os.WriteFile(dir+"/converge.cue", []byte("resync_interval: \"10m\"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			gittest.Run(t, dir, "add", "-A")
			gittest.Run(t, dir, "commit", "-q", "-m", "empty")
			good := gittest.Run(t, dir, "rev-parse", "HEAD")
			stateDir := t.TempDir()
			// The state outside the work tree owns the notes, so it also posts.
			gittest.Run(t, dir, "config", "converge.state", stateDir)
			args := []string{"--repo", dir, "--state", stateDir, "sync", "--timeout", "1m",
				"--forge", tc.kind, "--forge-url", f.URL(), "--forge-repo", tc.repo}
			if out, err := runCLI(args...); err != nil {
				t.Fatalf("sync: %v\n%s", err, out)
			}
			byContext := map[string][]string{}
			for _, p := range f.Statuses() {
				if p.SHA != good {
					t.Errorf("status on %s, want %s", p.SHA, good)
				}
				byContext[p.Context] = append(byContext[p.Context], p.State+" "+p.Description)
			}
			for _, w := range []struct {
				context string
				want    []string
			}{
				{converge.ContextValidate, []string{"success 0 documents valid"}},
				{converge.ContextSync, []string{"pending applied, converging", "success 0/0 Ready"}},
			} {
				if got := byContext[w.context]; !reflect.DeepEqual(got, w.want) {
					t.Errorf("forge got for %s:\n%s\nwant:\n%s", w.context, strings.Join(got, "\n"), strings.Join(w.want, "\n"))
				}
			}
			// converge/lint, once the linter runs, is success once.
			if got := byContext[converge.ContextLint]; len(got) > 1 || len(got) == 1 && !strings.HasPrefix(got[0], "success") {
				t.Errorf("forge got for converge/lint: %v", got)
			}

			if err := os.WriteFile(dir+"/bad.json", []byte(`{"type": "resource", "kind": "nope", "kind_version": 1, "name": "x", "spec": {}}`), 0o644); err != nil {
				t.Fatal(err)
			}
			gittest.Run(t, dir, "add", "-A")
			gittest.Run(t, dir, "commit", "-q", "-m", "bad")
			bad := gittest.Run(t, dir, "rev-parse", "HEAD")
			if out, err := runCLI(args...); !errors.As(err, new(errFailed)) {
				t.Fatalf("sync of an invalid commit: got %v, want exit 1\n%s", err, out)
			}
			var got []string
			for _, p := range f.Statuses() {
				if p.SHA == bad {
					got = append(got, p.Context+" "+p.State)
				}
			}
			want := []string{"converge/validate " + tc.wantFailure, "converge/sync " + tc.wantFailure}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("forge got for the invalid commit %v, want %v", got, want)
			}
			if r := f.Refusals(); len(r) > 0 {
				t.Errorf("forge refused: %v", r)
			}
		})
	}
}

// TestSyncPushStatus syncs a remote repository (a bare one over file://)
// with --push-status: the remote gets the note, and `converge status`
// reads it from the mirror.
func TestSyncPushStatus(t *testing.T) {
	work := t.TempDir()
	bare := filepath.Join(t.TempDir(), "remote.git")
	gittest.Run(t, work, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(work, "converge.cue"), []byte("resync_interval: \"10m\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Run(t, work, "add", "-A")
	gittest.Run(t, work, "commit", "-q", "-m", "empty")
	head := gittest.Run(t, work, "rev-parse", "HEAD")
	gittest.Run(t, work, "init", "-q", "-b", "main", "--bare", bare)
	gittest.Run(t, work, "push", "-q", bare, "main")

	state := t.TempDir()
	url := "file://" + bare
	if out, err := runCLI("--repo", url, "--state", state, "sync", "--timeout", "1m", "--push-status"); err != nil {
		t.Fatalf("sync: %v\n%s", err, out)
	}
	show := gittest.Run(t, bare, "notes", "--ref", "converge", "show", head)
	if !strings.Contains(show, `"description": "0/0 Ready"`) {
		t.Errorf("remote note:\n%s", show)
	}
	out, err := runCLI("--repo", url, "--state", state, "status", "-o", "json")
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	if !strings.Contains(out, `"revision": "main@sha1:`+head+`"`) || !strings.Contains(out, `"description": "0/0 Ready"`) {
		t.Errorf("status of the remote:\n%s", out)
	}
}

// TestStatusPushStatus: `converge status --push-status` pushes the notes
// to origin.
func TestStatusPushStatus(t *testing.T) {
	dir, hash := statusRepo(t, []converge.CommitStatus{{Context: converge.ContextSync, State: converge.StateSuccess, Description: "pushed by status"}})
	bare := filepath.Join(t.TempDir(), "origin.git")
	gittest.Run(t, dir, "init", "-q", "--bare", bare)
	gittest.Run(t, dir, "remote", "add", "origin", "file://"+bare)
	gittest.Run(t, dir, "push", "-q", "origin", "main")
	if out, err := runCLI("--repo", dir, "status", "--push-status"); err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	out, err := gittest.Command(bare, "notes", "--ref", "converge", "show", hash).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "pushed by status") {
		t.Errorf("origin's note: %v\n%s", err, out)
	}
}
