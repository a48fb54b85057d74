package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets testscript run converge in-process: a script's
// `exec converge …` (or plain `converge …`) re-enters Main.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"converge": func() { os.Exit(Main()) },
	})
}

// TestScripts runs every end-to-end scenario in testdata/script. Scenarios
// are named category-first (validate_*, sync_*, lint_*).
//
// Custom commands available to scripts:
//
//	example NAME DIR        copy examples/NAME (a whole example repository) to DIR
//	repo-init DIR           git init DIR on branch main with a test identity
//	commit DIR MESSAGE      stage everything in DIR and commit it
//	git-rev DIR REF VAR     set env VAR to the full hash of REF in DIR
//
// Conditions: [short] is true under `go test -short`.
func TestScripts(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join(root, "testdata", "script"),
		RequireExplicitExec: false,
		Setup: func(env *testscript.Env) error {
			env.Setenv("CONVERGE_ROOT", root)
			env.Setenv("GIT_AUTHOR_NAME", "converge-test")
			env.Setenv("GIT_AUTHOR_EMAIL", "test@converge.invalid")
			env.Setenv("GIT_COMMITTER_NAME", "converge-test")
			env.Setenv("GIT_COMMITTER_EMAIL", "test@converge.invalid")
			env.Setenv("GIT_CONFIG_NOSYSTEM", "1")
			env.Setenv("HOME", env.WorkDir)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"example":   cmdExample(root),
			"repo-init": cmdRepoInit,
			"commit":    cmdCommit,
			"git-rev":   cmdGitRev,
		},
	})
}

// repoRoot returns the module root (two levels above this package).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("locate source file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func cmdExample(root string) func(ts *testscript.TestScript, neg bool, args []string) {
	return func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) != 2 {
			ts.Fatalf("usage: example NAME DIR")
		}
		src := filepath.Join(root, "examples", args[0])
		dst := ts.MkAbs(args[1])
		err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src, p)
			out := filepath.Join(dst, rel)
			if d.IsDir() {
				return os.MkdirAll(out, 0o755)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(out, b, 0o644)
		})
		ts.Check(err)
	}
}

func git(ts *testscript.TestScript, dir string, args ...string) string {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=converge-test", "GIT_AUTHOR_EMAIL=test@converge.invalid",
		"GIT_COMMITTER_NAME=converge-test", "GIT_COMMITTER_EMAIL=test@converge.invalid",
		"GIT_CONFIG_NOSYSTEM=1", "HOME="+ts.Getenv("HOME"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		ts.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func cmdRepoInit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: repo-init DIR")
	}
	dir := ts.MkAbs(args[0])
	ts.Check(os.MkdirAll(dir, 0o755))
	git(ts, dir, "init", "-q", "-b", "main")
}

func cmdCommit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: commit DIR MESSAGE")
	}
	dir := ts.MkAbs(args[0])
	git(ts, dir, "add", "-A")
	git(ts, dir, "commit", "-q", "--allow-empty", "-m", args[1])
}

func cmdGitRev(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: git-rev DIR REF VAR")
	}
	out := git(ts, ts.MkAbs(args[0]), "rev-parse", args[1])
	ts.Setenv(args[2], strings.TrimSpace(out))
	fmt.Fprintf(ts.Stdout(), "%s\n", strings.TrimSpace(out))
}
