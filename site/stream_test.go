package site

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/statetest"
)

// TestStreamedPages writes resource pages a few bytes at a time (as
// pages over flushAt are written) and checks them against a Build that
// writes each page at once; then damages pages of that site (cut short,
// lengthened, a byte changed) and checks that a rebuild over it restores
// exactly the fresh site's bytes, writing the damaged pages and leaving
// the others alone.
func TestStreamedPages(t *testing.T) {
	s := statetest.Open(t)
	fill(t, s, 1, 3)
	opts := Options{Now: fixedNow}
	whole := filepath.Join(t.TempDir(), "whole")
	if _, err := Build(context.Background(), s, whole, opts); err != nil {
		t.Fatal(err)
	}
	defer func(n int) { flushAt = n }(flushAt)
	flushAt = 100
	dir := filepath.Join(t.TempDir(), "site")
	if _, err := Build(context.Background(), s, dir, opts); err != nil {
		t.Fatal(err)
	}
	want := readSite(t, whole)
	sameSite(t, readSite(t, dir), want)

	var pages []string
	for name, b := range want {
		if strings.HasPrefix(name, "r/") && len(b) > 3*flushAt {
			pages = append(pages, name)
		}
	}
	if len(pages) < 3 {
		t.Fatalf("%d resource pages over %d bytes, want 3", len(pages), 3*flushAt)
	}
	damage := []func([]byte) []byte{
		func(b []byte) []byte { return b[:len(b)/2] },
		func(b []byte) []byte { return append(bytes.Clone(b), "<p>left over</p>"...) },
		func(b []byte) []byte { c := bytes.Clone(b); c[2*flushAt+1] ^= 1; return c },
	}
	for i, f := range damage {
		if err := os.WriteFile(filepath.Join(dir, pages[i]), f(want[pages[i]]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, err := Build(context.Background(), s, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	sameSite(t, readSite(t, dir), want)
	// Written: the damaged pages; every other file held its bytes.
	if st.Files != len(damage) || st.Unchanged != len(want)-len(damage)-1 {
		t.Errorf("rebuild wrote %d files and left %d alone, want %d and %d", st.Files, st.Unchanged, len(damage), len(want)-len(damage)-1)
	}
}

// sameSite fails t for every file got and want do not share byte for byte.
func sameSite(t *testing.T, got, want map[string][]byte) {
	t.Helper()
	for name, w := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("site lacks %s", name)
		} else if !bytes.Equal(g, w) {
			t.Errorf("%s differs", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("site has extra %s", name)
		}
	}
}

// hidingReader is a store from which some resources vanish after Build
// read its model (a commit racing a live Build): the reads of one kind
// and by ID, which come after the model's scan of every kind, no longer
// return them.
type hidingReader struct {
	*state.Store
	hide map[converge.ID]bool
}

func (r hidingReader) ResourcesAfter(ctx context.Context, kind string, after converge.ID, limit int) ([]state.ResourceRow, error) {
	rows, err := r.Store.ResourcesAfter(ctx, kind, after, limit)
	if kind == "" {
		return rows, err
	}
	out := rows[:0]
	for _, row := range rows {
		if !r.hide[row.Resource.ID()] {
			out = append(out, row)
		}
	}
	return out, err
}

func (r hidingReader) ResourcesByID(ctx context.Context, ids []converge.ID) ([]*converge.Resource, error) {
	rs, err := r.Store.ResourcesByID(ctx, ids)
	for i, res := range rs {
		if res != nil && r.hide[res.ID()] {
			rs[i] = nil
		}
	}
	return rs, err
}

// TestStreamMissesDeleted: resources the model holds that the pages'
// scan no longer finds are left off their pages (a page left empty is
// not written), as a Build reading by ID leaves them, and every other
// resource keeps its section.
func TestStreamMissesDeleted(t *testing.T) {
	s := statetest.Open(t)
	fill(t, s, 2, 100)
	all, err := s.Resources(context.Background(), state.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	// One resource alone on its page, and the first of a page of several
	// (so the scan meets a later one first).
	byPage := make(map[string][]converge.ID)
	for _, r := range all {
		byPage[pageOf(r.ID())] = append(byPage[pageOf(r.ID())], r.ID())
	}
	hide := make(map[converge.ID]bool)
	var alone, shared bool
	for _, ids := range byPage {
		switch {
		case len(ids) == 1 && !alone:
			alone, hide[ids[0]] = true, true
		case len(ids) > 1 && !shared:
			shared, hide[ids[0]] = true, true
		}
	}
	if !alone || !shared {
		t.Fatalf("fixture lacks a page of one resource (%v) or of several (%v)", alone, shared)
	}
	defer func(n int) { flushAt = n }(flushAt)
	flushAt = 100
	dir := filepath.Join(t.TempDir(), "site")
	if _, err := Build(context.Background(), hidingReader{s, hide}, dir, Options{Now: fixedNow}); err != nil {
		t.Fatal(err)
	}
	files := readSite(t, dir)
	for _, r := range all {
		id := r.ID()
		page, ok := files[pageOf(id)]
		section := []byte(`data-id="` + e(string(id)) + `"`)
		switch {
		case hide[id] && len(byPage[pageOf(id)]) == 1:
			if ok {
				t.Errorf("page %s of vanished %s written", pageOf(id), id)
			}
		case hide[id]:
			if bytes.Contains(page, section) || bytes.Contains(page, []byte(`href="#`+anchor(id)+`"`)) {
				t.Errorf("page %s shows vanished %s", pageOf(id), id)
			}
		case !ok || !bytes.Contains(page, section):
			t.Errorf("page %s lacks %s", pageOf(id), id)
		}
	}
}

// TestOneShotKeepsNoCaches: the package-level Build, which no Update can
// follow, drops the list rows and groupings a Builder keeps for Update,
// and writes the same site.
func TestOneShotKeepsNoCaches(t *testing.T) {
	s := statetest.Open(t)
	fill(t, s, 2, 30)
	opts := Options{Now: fixedNow, GraphNodes: 20, PageSize: 10}
	var sites []map[string][]byte
	for _, oneShot := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "site")
		b := NewBuilder(s, dir, opts)
		b.oneShot = oneShot
		if _, err := b.Build(context.Background()); err != nil {
			t.Fatal(err)
		}
		rows := 0
		for _, e := range b.m.res {
			if e.row != "" {
				rows++
			}
		}
		if oneShot && (rows > 0 || len(b.m.groupings) > 0) {
			t.Errorf("one-shot Build kept %d rows and %d groupings", rows, len(b.m.groupings))
		}
		if !oneShot && (rows != len(b.m.res) || len(b.m.groupings) == 0) {
			t.Errorf("Builder kept %d rows of %d and %d groupings, want all and some", rows, len(b.m.res), len(b.m.groupings))
		}
		sites = append(sites, readSite(t, dir))
	}
	sameSite(t, sites[1], sites[0])
}
