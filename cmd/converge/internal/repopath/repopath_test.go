package repopath

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/convergehq/converge/sync/gittest"
)

func TestIsRemote(t *testing.T) {
	for repo, want := range map[string]bool{
		"https://example.com/r.git": true,
		"file:///srv/r":             true,
		"git@example.com:org/r":     true,
		".":                         false,
		"../r":                      false,
		"/srv/r":                    false,
		"c:/r":                      false, // no user@: a path with a colon
		"dir/git@x:y":               false, // the host part holds a slash
	} {
		if got := IsRemote(repo); got != want {
			t.Errorf("IsRemote(%q) = %v, want %v", repo, got, want)
		}
	}
}

// --path given inside a work tree is relative to the current directory
// and comes back relative to the root; one that leaves the tree is
// refused; outside the tree it is the root's already.
func TestCwdRelative(t *testing.T) {
	repo := gittest.Repo(t, map[string]string{"platform/teams/a.cue": "a: 1\n"})
	t.Chdir(filepath.Join(repo, "platform"))
	for path, want := range map[string]string{".": "platform", "teams": "platform/teams", "..": ""} {
		got, err := CwdRelative(repo, path)
		if err != nil || got != want {
			t.Errorf("in platform/: CwdRelative(%q) = %q, %v; want %q", path, got, err, want)
		}
	}
	if _, err := CwdRelative(repo, "../.."); err == nil {
		t.Error("../.. from platform/: no error, want it refused (outside the repository)")
	}
	t.Chdir(t.TempDir())
	if got, err := CwdRelative(repo, "teams"); err != nil || got != "teams" {
		t.Errorf("outside the tree: CwdRelative(teams) = %q, %v; want it unchanged", got, err)
	}
}

// A symlink and its target are one directory.
func TestSamePath(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if !SamePath(real, link) || !SamePath(real+"/", real) {
		t.Error("a directory and its symlink (or its trailing slash) are not the same path")
	}
	if SamePath(real, dir) {
		t.Error("a directory and its parent are the same path")
	}
}

// validate DIR may climb with .. only inside the repository the
// current directory is in; an absolute DIR is taken as given.
func TestValidateDir(t *testing.T) {
	repo := gittest.Repo(t, map[string]string{"a/x.cue": "x: 1\n", "b/y.cue": "y: 1\n"})
	t.Chdir(filepath.Join(repo, "a"))
	for _, ok := range []string{"../b", ".", "/elsewhere"} {
		if _, err := ValidateDir(".", ok); err != nil {
			t.Errorf("ValidateDir(%q): %v, want it allowed", ok, err)
		}
	}
	if _, err := ValidateDir(".", "../.."); err == nil {
		t.Error(`ValidateDir("../.."): no error, want it refused`)
	}
}
