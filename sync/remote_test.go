package sync

import (
	"context"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/convergehq/converge/sync/gittest"
)

// bareWithCommit makes a bare repository "origin.git" under root, pushed
// from a work tree with one commit; it returns the work tree.
func bareWithCommit(t *testing.T, root string) (work string) {
	t.Helper()
	work = gittest.Repo(t, map[string]string{"docs/a.json": `{"n": 1}`})
	gittest.Run(t, root, "init", "-q", "--bare", "-b", "main", "origin.git")
	gittest.Run(t, work, "push", "-q", filepath.Join(root, "origin.git"), "main")
	return work
}

func testRemote(t *testing.T, url, root, work string) {
	ctx := context.Background()
	state := t.TempDir()
	src, err := OpenRemote(ctx, RemoteOptions{URL: url, Dir: state})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := src.Ref(), "main"; got != want {
		t.Errorf("Ref() = %q, want %q", got, want)
	}
	if !src.Remote() {
		t.Error("Remote() = false for a mirror")
	}
	first, err := src.Head()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := first.Hash, gittest.Run(t, work, "rev-parse", "HEAD"); got != want {
		t.Fatalf("head %s, want %s", got, want)
	}
	moved, err := src.Fetch(ctx)
	if err != nil || moved {
		t.Fatalf("Fetch with nothing new = %v, %v; want false, nil", moved, err)
	}
	os.WriteFile(filepath.Join(work, "docs", "a.json"), []byte(`{"n": 2}`), 0o644)
	gittest.Run(t, work, "commit", "-q", "-am", "second")
	gittest.Run(t, work, "push", "-q", filepath.Join(root, "origin.git"), "main")
	moved, err = src.Fetch(ctx)
	if err != nil || !moved {
		t.Fatalf("Fetch after a push = %v, %v; want true, nil", moved, err)
	}
	second, err := src.Head()
	if err != nil {
		t.Fatal(err)
	}
	if second.Hash == first.Hash || second.Subject != "second" {
		t.Fatalf("head after fetch %v, want the pushed commit", second)
	}
	// Reopening the mirror finds it without cloning again.
	again, err := OpenRemote(ctx, RemoteOptions{URL: url, Dir: state})
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := again.Head(); h.Hash != second.Hash {
		t.Errorf("reopened mirror head %s, want %s", h.Hash, second.Hash)
	}
}

func TestRemoteFile(t *testing.T) {
	root := t.TempDir()
	work := bareWithCommit(t, root)
	testRemote(t, "file://"+filepath.Join(root, "origin.git"), root, work)
}

func TestRemoteSmartHTTP(t *testing.T) {
	backend := filepath.Join(gittest.Run(t, t.TempDir(), "--exec-path"), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Skipf("git-http-backend not installed with git (%v)", err)
	}
	root := t.TempDir()
	work := bareWithCommit(t, root)
	srv := httptest.NewServer(&cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}})
	defer srv.Close()
	testRemote(t, srv.URL+"/origin.git", root, work)
}

func TestRemoteMissingBranch(t *testing.T) {
	root := t.TempDir()
	bareWithCommit(t, root)
	_, err := OpenRemote(context.Background(), RemoteOptions{URL: "file://" + filepath.Join(root, "origin.git"), Ref: "nope", Dir: t.TempDir()})
	if err == nil {
		t.Fatal("OpenRemote(ref nope) succeeded; want an error")
	}
}
