package sync

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/convergehq/converge/sync/gittest"
)

func TestTreeFS(t *testing.T) {
	dir := gittest.Repo(t, map[string]string{
		"examples/a/kinds/vpc.cue": "type: \"kind\"\n",
		"examples/a/bom.json":      "{}",
		"examples/b/link.cue":      "symlink:../../README.md",
		"README.md":                "hello",
	})
	// An uncommitted edit must not be seen: documents come from the tree.
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("dirty"), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := OpenLocal(filepath.Join(dir, "examples"), "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := src.Ref(), "main"; got != want {
		t.Errorf("Ref() = %q, want %q", got, want)
	}
	rev, err := src.Head()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rev.Subject, "first"; got != want {
		t.Errorf("Subject = %q, want %q", got, want)
	}
	if !strings.HasPrefix(rev.String(), "main@sha1:") || len(rev.Hash) != 40 {
		t.Errorf("revision %q: want main@sha1:<40 hex>", rev)
	}
	root, err := src.FS(rev, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(root, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "hello"; got != want {
		t.Errorf("README.md = %q, want the committed %q", got, want)
	}
	sub, err := src.FS(rev, "examples/a")
	if err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(sub, "kinds/vpc.cue", "bom.json"); err != nil {
		t.Fatal(err)
	}
	linked, err := src.FS(rev, "examples/b")
	if err != nil {
		t.Fatal(err)
	}
	ents, err := fs.ReadDir(linked, ".")
	if err != nil {
		t.Fatal(err)
	}
	var link fs.DirEntry
	for _, e := range ents {
		if e.Name() == "link.cue" {
			link = e
		}
	}
	if link == nil || link.Type()&fs.ModeSymlink == 0 {
		t.Fatalf("link.cue: want a symlink entry, got %v", link)
	}
	if _, err := fs.ReadFile(linked, "link.cue"); err == nil {
		t.Error("ReadFile(link.cue) followed a symlink; want an error")
	}
	if _, err := src.FS(rev, "../outside"); err == nil {
		t.Error("FS(../outside): want an error for a path leaving the repository")
	}
	if _, err := src.FS(rev, "/examples"); err == nil {
		t.Error("FS(/examples): want an error for an absolute path")
	}
	if _, err := src.FS(rev, "examples/"); err != nil {
		t.Errorf("FS(examples/) = %v, want the directory", err)
	}
	if _, err := src.FS(rev, "missing"); err == nil {
		t.Error("FS(missing): want an error")
	}
}

func TestOpenLocalNotARepository(t *testing.T) {
	if _, err := OpenLocal(t.TempDir(), ""); err == nil || !strings.Contains(err.Error(), "not a git repository") {
		t.Fatalf("OpenLocal(empty dir) = %v, want not a git repository", err)
	}
}
