package sync

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/convergehq/converge/sync/gittest"
)

// TestFirstParents builds main: c1 - c2 - m4 (merging side c3) - c5 and
// checks the first-parent lists between revisions. The tags are named
// tag-c1 and tag-c2, not c1 and c2: those are also hex prefixes, which
// a commit hash starting with them would win (a flake 1 run in ~40).
func TestFirstParents(t *testing.T) {
	dir := gittest.Repo(t, map[string]string{"a.txt": "1"})
	git := func(args ...string) string {
		t.Helper()
		return gittest.Run(t, dir, args...)
	}
	commit := func(file, msg string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, file), []byte(msg), 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", "-A")
		git("commit", "-q", "-m", msg)
	}
	git("tag", "tag-c1")
	commit("a.txt", "c2")
	git("tag", "tag-c2")
	git("checkout", "-q", "-b", "side")
	commit("b.txt", "c3")
	git("checkout", "-q", "main")
	git("merge", "-q", "--no-ff", "-m", "m4", "side")
	commit("a.txt", "c5")
	src, err := OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		base, head string
		want       []string // subjects, oldest first
	}{
		{name: "whole range", base: "tag-c1", head: "main", want: []string{"c2", "m4", "c5"}},
		{name: "from the middle", base: "tag-c2", head: "HEAD", want: []string{"m4", "c5"}},
		{name: "side branch is not first-parent", base: "side", head: "main", want: []string{"m4", "c5"}},
		{name: "empty range", base: "main", head: "tag-c2", want: nil},
		{name: "same revision", base: "main", head: "main", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			revs, err := src.FirstParents(tt.base, tt.head)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range revs {
				got = append(got, r.Subject)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("FirstParents(%s, %s) = %q, want %q", tt.base, tt.head, got, tt.want)
			}
		})
	}
	if _, err := src.FirstParents("nope", "main"); err == nil {
		t.Error("FirstParents of an unknown base: no error")
	}
	head, err := src.Head()
	if err != nil {
		t.Fatal(err)
	}
	p, ok, err := src.FirstParent(head)
	if err != nil || !ok || p.Subject != "m4" {
		t.Errorf("FirstParent(c5) = %q, %v, %v; want m4, true, nil", p.Subject, ok, err)
	}
	c2, err := src.Revision("tag-c2")
	if err != nil {
		t.Fatal(err)
	}
	h5, err1 := src.TreeHash(head, "")
	h2, err2 := src.TreeHash(c2, "")
	none, err3 := src.TreeHash(c2, "no/such/dir")
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	if h5 == h2 || len(h5) != 40 || none != "" {
		t.Errorf("TreeHash: c5 %q, c2 %q (want two different hashes), missing dir %q (want \"\")", h5, h2, none)
	}
	root, err := src.Revision("tag-c1")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := src.FirstParent(root); ok || err != nil {
		t.Errorf("FirstParent(root) = %v, %v; want false, nil", ok, err)
	}
}
