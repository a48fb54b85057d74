package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/convergehq/converge/sync/forge"
	"github.com/convergehq/converge/sync/forge/forgetest"
	"github.com/convergehq/converge/sync/gittest"
)

// TestPlanCIExample keeps examples/ci/converge-plan.yml honest: it runs
// on pull requests with the whole history and the permission to comment,
// and its plan command line, with the workflow's expressions filled in,
// posts one comment on a GitHub fake from a repository with no state,
// then updates it on the next push.
func TestPlanCIExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "ci", "converge-plan.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		On          map[string]any    `yaml:"on"`
		Permissions map[string]string `yaml:"permissions"`
		Jobs        map[string]struct {
			Steps []struct {
				Uses string            `yaml:"uses"`
				With map[string]any    `yaml:"with"`
				Run  string            `yaml:"run"`
				Env  map[string]string `yaml:"env"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatalf("parse workflow: %v", err)
	}
	if _, ok := wf.On["pull_request"]; !ok {
		t.Errorf("workflow does not run on pull_request: on = %v", wf.On)
	}
	if wf.Permissions["pull-requests"] != "write" {
		t.Errorf("permissions = %v, want pull-requests: write", wf.Permissions)
	}
	fill := strings.NewReplacer("${{ github.base_ref }}", "main", "${{ github.event.pull_request.number }}", "7",
		"${{ github.repository }}", forgetest.Owner+"/"+forgetest.Repo)
	var plan, lint []string
	for _, j := range wf.Jobs {
		for _, st := range j.Steps {
			_, rest, ok := strings.Cut(st.Run, "/cmd/converge@latest ")
			if !ok {
				continue
			}
			args := strings.Fields(fill.Replace(rest))
			switch args[0] {
			case "plan":
				plan = args
				if st.Env[forgeTokenEnv] == "" {
					t.Errorf("the plan step does not set $%s", forgeTokenEnv)
				}
			case "lint":
				lint = args
			}
		}
	}
	if plan == nil || lint == nil {
		t.Fatalf("want a lint and a plan step; plan %q, lint %q", plan, lint)
	}

	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(repoRoot(t), "examples", "classic"))); err != nil {
		t.Fatal(err)
	}
	bom := func(teams string) {
		doc := `type: "resource"
kind: "classicbom"
kind_version: 1
name: "classic"
spec: functional_domains: [{name: "fd-00", networking: true, service_teams: [` + teams + `]}]
`
		if err := os.WriteFile(filepath.Join(dir, "resources", "bom.cue"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bom(`{name: "team-000"}`)
	gittest.Run(t, dir, "init", "-q", "-b", "main")
	gittest.Run(t, dir, "add", "-A")
	gittest.Run(t, dir, "commit", "-q", "-m", "classic, one team")
	gittest.Run(t, dir, "update-ref", "refs/remotes/origin/main", gittest.Run(t, dir, "rev-parse", "HEAD"))
	gittest.Run(t, dir, "checkout", "-q", "-b", "pr")

	f := forgetest.NewGitHub(t, false)
	t.Setenv(forgeTokenEnv, forgetest.Token)
	run := func(args ...string) string {
		t.Helper()
		c := newRootCommand()
		var out bytes.Buffer
		c.SetArgs(append([]string{"--repo", dir}, args...))
		c.SetOut(&out)
		c.SetErr(&out)
		if err := c.Execute(); err != nil {
			t.Fatalf("converge %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	for i, teams := range []string{`{name: "team-000"}, {name: "team-001"}`, `{name: "team-001"}`} {
		bom(teams)
		gittest.Run(t, dir, "commit", "-q", "-a", "-m", "teams")
		run(lint...)
		out := run(append(plan, "--forge-url", f.URL())...)
		want := "posted the plan as comment 1"
		if i > 0 {
			want = "updated the plan as comment 1"
		}
		if !strings.Contains(out, want) {
			t.Errorf("push %d: output lacks %q:\n%s", i+1, want, out)
		}
	}
	cs := f.Comments()
	if len(cs) != 1 || cs[0].PR != 7 || !strings.HasPrefix(cs[0].Body, forge.Marker) {
		t.Fatalf("comments = %+v, want one on #7 starting with the marker (refused %q)", cs, f.Refusals())
	}
	if !strings.Contains(cs[0].Body, "3 to create, 1 to update, 0 to flip, 0 to delete, 3 to prune") {
		t.Errorf("the comment does not plan the last push:\n%s", cs[0].Body)
	}
	if _, err := os.Stat(filepath.Join(dir, ".converge", "state.db")); err == nil {
		t.Error("plan in CI wrote a state")
	}
}
