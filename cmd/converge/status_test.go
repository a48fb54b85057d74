package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/forge/forgetest"
)

// statusRepo makes a real repository with one commit whose note holds
// statuses, and returns its directory and the commit's hash.
func statusRepo(t *testing.T, statuses []converge.CommitStatus) (string, string) {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"commit", "-q", "--allow-empty", "-m", "one"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t.invalid",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t.invalid", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
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

func runCLI(args ...string) (string, error) {
	c := newRootCommand()
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
