package site

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/statetest"
)

// TestScaleSite builds the site of a million resources (the classic
// shape: 58 domains of 5,747 teams, committed in batches of 5,000) and
// checks that no file passes 1 MiB, that the site is a few thousand files
// rather than a million, and that the pages a person opens first link
// only to files that exist. It runs only with CONVERGE_SCALE=1 (several
// minutes, ~5 GiB); its speed is BenchmarkBuild/1M's and, on the store
// it keeps with CONVERGE_SCALE_STATE, `converge site build`'s.
func TestScaleSite(t *testing.T) {
	if os.Getenv("CONVERGE_SCALE") != "1" {
		t.Skip("set CONVERGE_SCALE=1 to build the site of a million resources")
	}
	// CONVERGE_SCALE_STATE=DIR keeps the store in DIR (empty or absent
	// first), to time `converge site build --state DIR` on it afterwards.
	stateDir := os.Getenv("CONVERGE_SCALE_STATE")
	if stateDir == "" {
		stateDir = t.TempDir()
	}
	s := statetest.OpenDir(t, stateDir, state.Options{NoSync: true})
	fill(t, s, 58, 5747)
	dir := filepath.Join(t.TempDir(), "site")
	st, err := Build(context.Background(), s, dir, Options{Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d resources: %d files, %d bytes, largest %s (%d bytes), in %v",
		st.Resources, st.Files, st.Bytes, st.LargestFile, st.Largest, st.Elapsed)
	if st.Resources < 1_000_000 {
		t.Fatalf("%d resources, want a million", st.Resources)
	}
	const maxPage = 1 << 20
	files, biggest := 0, int64(0)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		fi, err := d.Info()
		if err != nil {
			return err
		}
		biggest = max(biggest, fi.Size())
		if fi.Size() > maxPage {
			t.Errorf("%s is %d bytes, over 1 MiB", p, fi.Size())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := biggest, st.Largest; got != want {
		t.Errorf("largest file on disk %d bytes, Stats.Largest %d", got, want)
	}
	if files > 30_000 {
		t.Errorf("%d files for a million resources, want a few per thousand", files)
	}
	// The pages a person starts from, and every file they link to.
	first := make(map[string][]byte)
	for _, name := range []string{"index.html", "summary.json", "kinds/vpc.html", "kinds/vpc-p2.html",
		"phases/failed.html", pageOf("classicbom/classic"), GraphPath("classicbom/classic"), "assets/site.css", "assets/site.js"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		first[name] = b
	}
	if n := checkLinksIn(t, first, func(name string) ([]byte, bool) {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		return b, err == nil
	}); n < 1000 {
		t.Errorf("checked only %d links", n)
	}
}
