package gittest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Identity is the author and committer name of every commit made here;
// its email is Identity@Identity.invalid.
const Identity = "t"

// Env returns the environment entries that give git the test identity, no
// system configuration and home as HOME (so no user configuration either,
// as long as home holds no .gitconfig).
func Env(home string) []string {
	return []string{
		"GIT_AUTHOR_NAME=" + Identity, "GIT_AUTHOR_EMAIL=" + Identity + "@" + Identity + ".invalid",
		"GIT_COMMITTER_NAME=" + Identity, "GIT_COMMITTER_EMAIL=" + Identity + "@" + Identity + ".invalid",
		"GIT_CONFIG_NOSYSTEM=1", "HOME=" + home,
	}
}

// Command returns git with args, to run in dir with the process
// environment plus Env(dir). It is not started.
func Command(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), Env(dir)...)
	return cmd
}

// Run runs git with args in dir (see Command) and returns its combined
// output with surrounding white space trimmed. A failing git fails the
// test with its output; Run must therefore be called from the test's
// goroutine.
func Run(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := Command(dir, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Write writes files into dir, making parent directories as needed. Keys
// are slash-separated paths relative to dir; a value "symlink:TARGET"
// makes a symbolic link to TARGET instead of a regular file.
func Write(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(body, "symlink:"); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Repo makes a repository on branch main in a fresh t.TempDir(), writes
// files into it (see Write) and commits them all as one commit whose
// subject is "first" and whose message also has a body ("body"), so that
// readers of the subject are tested against a multi-line message. It
// returns the repository's directory. files must not be empty.
func Repo(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	Run(t, dir, "init", "-q", "-b", "main")
	Write(t, dir, files)
	Run(t, dir, "add", "-A")
	Run(t, dir, "commit", "-q", "-m", "first\n\nbody")
	return dir
}

// Commit writes files into the repository dir (see Write), commits every
// change of its work tree with the message msg, and returns the new
// commit's hash.
func Commit(t testing.TB, dir string, files map[string]string, msg string) string {
	t.Helper()
	Write(t, dir, files)
	Run(t, dir, "add", "-A")
	Run(t, dir, "commit", "-q", "-m", msg)
	return Run(t, dir, "rev-parse", "HEAD")
}
