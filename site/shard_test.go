package site

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/statetest"
)

// sameShard returns n names of kind whose resources share one page.
func sameShard(kind string, n int) []string {
	byShard := make(map[shardKey][]string)
	for i := 0; ; i++ {
		name := fmt.Sprintf("b-%d", i)
		k := shardOf(converge.ID(kind + "/" + name))
		byShard[k] = append(byShard[k], name)
		if len(byShard[k]) == n {
			return byShard[k]
		}
	}
}

// TestShardPages puts three resources on one page and checks the page
// (a table of contents, one section per resource, each link's fragment
// naming its section), then deletes them one by one through Update: the
// page shrinks and then goes, and the site stays what a full Build
// writes.
func TestShardPages(t *testing.T) {
	s := statetest.Open(t)
	fill(t, s, 1, 2)
	names := sameShard("bucket", 3)
	var ids []converge.ID
	var rs []*converge.Resource
	for _, n := range names {
		r := &converge.Resource{Kind: "bucket", KindVersion: 1, Name: n, Phase: converge.PhaseReady, Spec: json.RawMessage(`{"n":"` + n + `"}`)}
		rs = append(rs, r)
		ids = append(ids, r.ID())
	}
	if err := s.Commit(context.Background(), &converge.Batch{Resources: rs}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	opts := Options{Now: fixedNow}
	bld := NewBuilder(s, dir, opts)
	if _, err := bld.Build(context.Background()); err != nil {
		t.Fatal(err)
	}
	page := pageOf(ids[0])
	for _, id := range ids[1:] {
		if got := pageOf(id); got != page {
			t.Fatalf("%s is on %s, want %s", id, got, page)
		}
	}
	files := readSite(t, dir)
	checkLinks(t, files)
	body := files[page]
	if got, want := bytes.Count(body, []byte(`<section class="res"`)), 3; got != want {
		t.Errorf("%s has %d sections, want %d", page, got, want)
	}
	if !bytes.Contains(body, []byte(`<nav class="toc"><p>3 bucket resources on this page`)) {
		t.Errorf("%s lacks its table of contents", page)
	}
	for _, id := range ids {
		if !bytes.Contains(body, []byte(`<a href="#`+anchor(id)+`">`+string(id)+`</a>`)) {
			t.Errorf("the table of contents does not link %s", id)
		}
		if !bytes.Contains(files["kinds/bucket.html"], []byte(`href="../`+ResourcePath(id)+`"`)) {
			t.Errorf("the bucket list does not link %s at its section", id)
		}
	}
	for i, id := range ids {
		if err := s.Commit(context.Background(), &converge.Batch{DeletedResources: []converge.ID{id}}); err != nil {
			t.Fatal(err)
		}
		if _, err := bld.Update(context.Background(), []converge.ID{id}); err != nil {
			t.Fatal(err)
		}
		checkEqualsBuild(t, s, dir, opts)
		files := readSite(t, dir)
		n := bytes.Count(files[page], []byte(`<section class="res"`))
		if got, want := n, len(ids)-i-1; got != want {
			t.Errorf("after deleting %d: %d sections on %s, want %d", i+1, got, page, want)
		}
	}
	if _, ok := readSite(t, dir)[page]; ok {
		t.Errorf("%s outlives its last resource", page)
	}
}

// TestPageCaps gives one producer 1,200 consumers, one resource a spec of
// 300 KB and the root 1,200 more children: their sections list the first
// Children and say how many more, and show the first 64 KB of the spec,
// so the pages stay small.
func TestPageCaps(t *testing.T) {
	s := statetest.Open(t)
	fill(t, s, 1, 1200) // tgw/fd0-tgw is produced for 1,200 routes
	big := &converge.Resource{Kind: "blob", KindVersion: 1, Name: "big", Owner: "classicbom/classic", Phase: converge.PhaseReady,
		Spec: json.RawMessage(`{"data":"` + strings.Repeat("x", 300<<10) + `"}`)}
	if err := s.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{big}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := Build(context.Background(), s, dir, Options{Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	files := readSite(t, dir)
	tests := []struct {
		name     string
		id       converge.ID
		wantText string
		wantMax  int
	}{
		{"consumers", "tgw/fd0-tgw", `<p class="note">and 700 more.</p>`, 200 << 10},
		{"children", "classicbom/classic", "and 3103 more; see the composition graph", 200 << 10},
		{"spec", "blob/big", "more bytes not shown)", 100 << 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := files[pageOf(tc.id)]
			if !bytes.Contains(body, []byte(tc.wantText)) {
				t.Errorf("%s lacks %q", pageOf(tc.id), tc.wantText)
			}
			if got := len(body); got > tc.wantMax {
				t.Errorf("%s is %d bytes, want at most %d", pageOf(tc.id), got, tc.wantMax)
			}
		})
	}
	if st.Largest > 1<<20 {
		t.Errorf("largest file %s is %d bytes, want at most 1 MiB", st.LargestFile, st.Largest)
	}
}

// TestShardPath pins the page of a few IDs: a resource's link must not
// change between versions (status reporters and bookmarks hold it).
func TestShardPath(t *testing.T) {
	tests := []struct {
		id       converge.ID
		wantPath string
	}{
		{"vpc/team-a", "r/vpc/3d6.html#team-a"},
		{"classicbom/classic", "r/classicbom/" + fmt.Sprintf("%03x", shardOf("classicbom/classic").n) + ".html#classic"},
		{"Weird/Name", "r/_" + seg("Weird")[1:] + "/" + fmt.Sprintf("%03x", shardOf("Weird/Name").n) + ".html#" + seg("Name")},
	}
	for _, tc := range tests {
		if got := ResourcePath(tc.id); got != tc.wantPath {
			t.Errorf("ResourcePath(%s) = %s, want %s", tc.id, got, tc.wantPath)
		}
	}
	for n := uint32(0); n < Shards; n += 37 {
		if got, want := (shardKey{"vpc", n}).path(), fmt.Sprintf("r/vpc/%03x.html", n); got != want {
			t.Errorf("shard %d: %s, want %s", n, got, want)
		}
	}
}

// TestEscapeWriters: sw.t and sw.Write (what a section's text goes
// through) write exactly e's escaping, and model.text also scrubs.
func TestEscapeWriters(t *testing.T) {
	for _, s := range []string{"", "plain", `<a href="x">&'</a>`, "ünï<cödé>\x00\xff", `{"k": "v & w"}`, "&&&", "<"} {
		var buf bytes.Buffer
		sw{&buf}.t(s)
		if got := buf.String(); got != e(s) {
			t.Errorf("t(%q) = %q, want %q", s, got, e(s))
		}
		buf.Reset()
		sw{&buf}.Write([]byte(s))
		if got := buf.String(); got != e(s) {
			t.Errorf("Write(%q) = %q, want %q", s, got, e(s))
		}
		m := &model{scrub: newScrubber(map[string]int{"v & w": 1, "<cödé>": 1})}
		buf.Reset()
		m.text(sw{&buf}, s)
		if got, want := buf.String(), e(m.clean(s)); got != want {
			t.Errorf("text(%q) = %q, want %q", s, got, want)
		}
	}
}
