package gittest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRepo(t *testing.T) {
	dir := Repo(t, map[string]string{
		"a/b.txt":  "hello",
		"link.txt": "symlink:a/b.txt",
	})
	if got, want := Run(t, dir, "log", "-1", "--format=%an <%ae> %cn|%s|%b"), "t <t@t.invalid> t|first|body"; got != want {
		t.Errorf("last commit = %q, want %q", got, want)
	}
	if got, want := Run(t, dir, "branch", "--show-current"), "main"; got != want {
		t.Errorf("branch = %q, want %q", got, want)
	}
	if got, want := Run(t, dir, "ls-tree", "-r", "--format=%(objectmode) %(path)", "HEAD"), "100644 a/b.txt\n120000 link.txt"; got != want {
		t.Errorf("tree = %q, want %q", got, want)
	}
	if got, want := Run(t, dir, "status", "--porcelain"), ""; got != want {
		t.Errorf("status = %q, want a clean work tree", got)
	}
	// HOME is the repository: a user setting written there is the only
	// one git sees.
	if err := os.WriteFile(filepath.Join(dir, ".gitconfig"), []byte("[user]\n\tname = other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := Run(t, dir, "config", "--global", "user.name"), "other"; got != want {
		t.Errorf("global user.name = %q, want %q from HOME", got, want)
	}
}

func TestCommandFails(t *testing.T) {
	out, err := Command(t.TempDir(), "rev-parse", "HEAD").CombinedOutput()
	if err == nil {
		t.Fatalf("git rev-parse HEAD outside a repository succeeded: %s", out)
	}
}
