package site

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"html"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/statetest"
)

// readSite returns every file of the site in dir by slash path.
func readSite(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	out := make(map[string][]byte)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		out[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var linkAttr = regexp.MustCompile(`\b(?:href|src|data)="([^"]*)"`)

// checkLinks fails t for every href, src or data attribute of an HTML or
// SVG file that does not resolve to a file of the site (and, with a
// fragment, to an element of it), and returns how many links it checked.
func checkLinks(t *testing.T, files map[string][]byte) int {
	t.Helper()
	return checkLinksIn(t, files, func(name string) ([]byte, bool) {
		b, ok := files[name]
		return b, ok
	})
}

// checkLinksIn checks the links of pages as checkLinks does, finding
// their targets with lookup.
func checkLinksIn(t *testing.T, pages map[string][]byte, lookup func(name string) ([]byte, bool)) int {
	t.Helper()
	n := 0
	for name, body := range pages {
		if !strings.HasSuffix(name, ".html") && !strings.HasSuffix(name, ".svg") {
			continue
		}
		for _, m := range linkAttr.FindAllSubmatch(body, -1) {
			ref := html.UnescapeString(string(m[1]))
			if strings.HasPrefix(ref, "#") || strings.HasPrefix(ref, "url(") {
				continue
			}
			if strings.Contains(ref, ":") {
				t.Errorf("%s: link %q is not relative", name, ref)
				continue
			}
			ref, frag, _ := strings.Cut(ref, "#")
			target := path.Clean(path.Join(path.Dir(name), ref))
			body, ok := lookup(target)
			if !ok {
				t.Errorf("%s: link %q resolves to missing %s", name, ref, target)
			} else if frag != "" && !bytes.Contains(body, []byte(` id="`+frag+`"`)) {
				t.Errorf("%s: link %q: %s has no element with id %q", name, ref, target, frag)
			}
			n++
		}
	}
	return n
}

// pageOf returns the file of id's page: ResourcePath without the fragment.
func pageOf(id converge.ID) string {
	p, _, _ := strings.Cut(ResourcePath(id), "#")
	return p
}

func buildFixture(t *testing.T, domains, teams int) (*state.Store, string, map[string][]byte) {
	t.Helper()
	s := statetest.Open(t)
	fill(t, s, domains, teams)
	dir := filepath.Join(t.TempDir(), "site")
	if _, err := Build(context.Background(), s, dir, Options{Now: fixedNow, GraphNodes: 40, PageSize: 10}); err != nil {
		t.Fatalf("build: %v", err)
	}
	return s, dir, readSite(t, dir)
}

func TestBuildLinksResolve(t *testing.T) {
	s, _, files := buildFixture(t, 3, 6) // 1 + 3×20 + 2 = 63 resources, pages of 10
	n := checkLinks(t, files)
	rs, err := s.Resources(context.Background(), state.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	sections, pages := 0, 0
	for name, body := range files {
		if strings.HasPrefix(name, "r/") {
			pages++
			sections += bytes.Count(body, []byte(`<section class="res"`))
		}
	}
	if got, want := sections, len(rs); got != want {
		t.Errorf("resource sections = %d, want one per resource (%d)", got, want)
	}
	if pages > len(rs) {
		t.Errorf("%d resource pages for %d resources", pages, len(rs))
	}
	for _, r := range rs {
		body, ok := files[pageOf(r.ID())]
		if !ok {
			t.Errorf("no page for %s", r.ID())
		}
		if !bytes.Contains(body, []byte(` id="`+anchor(r.ID())+`" data-id="`+string(r.ID())+`"`)) {
			t.Errorf("%s has no section for %s", pageOf(r.ID()), r.ID())
		}
	}
	if n < 500 {
		t.Errorf("checked only %d links; the link parser is broken", n)
	}
	for _, want := range []string{"index.html", "summary.json", "assets/site.js", "assets/site.css",
		"graph/classicbom/classic.svg", "kinds/vpc.html", "kinds/vpc-p2.html", "kinds/vpc.failed.html", "phases/ready.html"} {
		if _, ok := files[want]; !ok {
			t.Errorf("missing %s", want)
		}
	}
}

func TestSummaryMatchesStore(t *testing.T) {
	s, _, files := buildFixture(t, 2, 10)
	var sum Summary
	if err := json.Unmarshal(files["summary.json"], &sum); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Resources(context.Background(), state.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var want converge.Counts
	rollup := make(map[converge.ID]*converge.Counts)
	for _, r := range rs {
		want.Add(r.Phase)
		root := r.ID()
		for {
			x, err := s.Resource(context.Background(), root)
			if err != nil {
				t.Fatal(err)
			}
			if x.Owner == "" {
				break
			}
			root = x.Owner
		}
		if rollup[root] == nil {
			rollup[root] = new(converge.Counts)
		}
		rollup[root].Add(r.Phase)
	}
	if got := sum.Counts; got != want {
		t.Errorf("summary counts = %+v, want the store's %+v", got, want)
	}
	if want.Failed == 0 || want.Pending == 0 || want.Ready == 0 {
		t.Fatalf("fixture lacks phases: %+v", want)
	}
	if got, want := sum.Revision, "main@sha1:c0ffee0000000000000000000000000000000001"; got != want {
		t.Errorf("summary revision = %q, want %q", got, want)
	}
	if got, want := len(sum.Roots), len(rollup); got != want {
		t.Errorf("summary has %d roots, want %d", got, want)
	}
	for _, r := range sum.Roots {
		if rollup[r.ID] == nil || r.Rollup != *rollup[r.ID] {
			t.Errorf("root %s rollup = %+v, want %+v", r.ID, r.Rollup, rollup[r.ID])
		}
	}
	if !sum.Generated.Equal(fixedNow()) {
		t.Errorf("generated = %v, want %v", sum.Generated, fixedNow())
	}
	if got, want := sum.Generation, fixedNow().UTC().Format(time.RFC3339Nano); got != want {
		t.Errorf("generation = %q, want %q", got, want)
	}
}

func TestSecretsNeverWritten(t *testing.T) {
	_, _, files := buildFixture(t, 2, 4)
	secrets := fixtureSecrets(2, 4)
	for name, body := range files {
		for _, sec := range secrets {
			if bytes.Contains(body, []byte(sec)) {
				t.Errorf("%s holds secret %q", name, sec)
			}
		}
	}
	for _, tc := range []struct {
		name, page, want string
	}{
		{"kind secret in status", pageOf("account/fd0-team1"), `&#34;root_password&#34;: &#34;(secret)&#34;`},
		{"unprefixed path in status", pageOf("db/orders"), `&#34;password&#34;: &#34;(secret)&#34;`},
		{"flowed into a consumer spec", pageOf("app/shop"), `&#34;db_password&#34;: &#34;(secret)&#34;`},
		{"scrubbed from an event", pageOf("app/shop"), `connected with (secret)`},
		{"other fields kept", pageOf("db/orders"), `db.local`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Contains(files[tc.page], []byte(tc.want)) {
				t.Errorf("%s lacks %s", tc.page, tc.want)
			}
		})
	}
}

func TestEscaping(t *testing.T) {
	s := statetest.Open(t)
	fill(t, s, 2, 40)
	// A name that is no DNS label: stored under a hashed file name.
	weird := &converge.Resource{Kind: "weird", KindVersion: 1, Name: `<img src=x onerror=alert(1)>..`,
		Phase: converge.PhaseFailed, Reason: nasty, Spec: json.RawMessage(`{"x":"` + strings.ReplaceAll(nasty, `"`, `\"`) + `"}`)}
	if err := s.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{weird}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := Build(context.Background(), s, dir, Options{Now: fixedNow, Title: "site " + nasty}); err != nil {
		t.Fatal(err)
	}
	files := readSite(t, dir)
	checkLinks(t, files)
	escaped := 0
	for name, body := range files {
		if strings.HasSuffix(name, ".js") {
			continue
		}
		for _, bad := range []string{"<script>alert", "<img src=x", "onerror=alert(1)>"} {
			if bytes.Contains(body, []byte(bad)) {
				t.Errorf("%s holds unescaped %q", name, bad)
			}
		}
		if bytes.Contains(body, []byte("&lt;script&gt;alert(1)&lt;/script&gt;")) {
			escaped++
		}
		if strings.Contains(name, "<") || strings.Contains(name, "..") {
			t.Errorf("unsafe file name %q", name)
		}
	}
	if escaped == 0 {
		t.Error("no page shows the nasty text escaped; the fixture lost it")
	}
	p := pageOf(weird.ID())
	if a := anchor(weird.ID()); !strings.HasPrefix(a, "_") {
		t.Errorf("weird name anchored as %q, want a hashed name", a)
	}
	if !bytes.Contains(files[p], []byte("&lt;img src=x onerror=alert(1)&gt;..")) {
		t.Errorf("%s does not show the name escaped", p)
	}
	for _, page := range []string{"index.html", pageOf("classicbom/classic")} {
		if n := bytes.Count(files[page], []byte("<script")); n != 1 {
			t.Errorf("%s has %d script elements, want only the site's own", page, n)
		}
	}
}

func TestBuildRefusesForeignDirectory(t *testing.T) {
	s := statetest.Open(t)
	dir := t.TempDir()
	keep := filepath.Join(dir, "precious.txt")
	if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(context.Background(), s, dir, Options{}); !errors.Is(err, ErrNotSite) {
		t.Fatalf("build into a foreign directory: err = %v, want ErrNotSite", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("foreign file touched: %v", err)
	}
}

func TestRebuildRemovesStalePages(t *testing.T) {
	s := statetest.Open(t)
	fill(t, s, 1, 3)
	dir := t.TempDir()
	if _, err := Build(context.Background(), s, dir, Options{Now: fixedNow}); err != nil {
		t.Fatal(err)
	}
	gone := converge.ID("app/shop")
	if err := s.Commit(context.Background(), &converge.Batch{DeletedResources: []converge.ID{gone}}); err != nil {
		t.Fatal(err)
	}
	st, err := Build(context.Background(), s, dir, Options{Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ResourcePath(gone))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("page of deleted %s still there (err %v)", gone, err)
	}
	if st.Removed != 1 {
		t.Errorf("removed %d files, want 1", st.Removed)
	}
	if st.Unchanged == 0 || st.Files == 0 {
		t.Errorf("rebuild wrote %d files and left %d alone: want both nonzero", st.Files, st.Unchanged)
	}
	checkLinks(t, readSite(t, dir))
}

// TestUpdateEqualsBuild changes the store in every way Update handles and
// checks that the incrementally updated site is byte for byte the site a
// full Build writes, and that Update wrote far fewer files.
func TestUpdateEqualsBuild(t *testing.T) {
	s := statetest.Open(t)
	fill(t, s, 2, 30)
	dir := t.TempDir()
	bld := NewBuilder(s, dir, Options{Now: fixedNow, PageSize: 25, GraphNodes: 50})
	full, err := bld.Build(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	get := func(id converge.ID) *converge.Resource {
		r, err := s.Resource(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	steps := []struct {
		name   string
		change func() (*converge.Batch, []converge.ID)
	}{
		{"phase change", func() (*converge.Batch, []converge.ID) {
			r := get("vpc/fd0-team3")
			r.Phase, r.Reason = converge.PhaseFailed, "quota "+nasty
			return &converge.Batch{Resources: []*converge.Resource{r},
				Events: []converge.Event{{Time: epoch, Resource: r.ID(), Type: "Failed", Message: "quota"}}}, []converge.ID{r.ID()}
		}},
		{"new resource with edge", func() (*converge.Batch, []converge.ID) {
			r := &converge.Resource{Kind: "route", KindVersion: 1, Name: "fd1-extra", Owner: "classicbom/classic",
				Phase: converge.PhasePending, Spec: json.RawMessage(`{}`)}
			return &converge.Batch{Resources: []*converge.Resource{r},
				Edges: []converge.Edge{{Consumer: r.ID(), Producer: "vpc/fd1-team2", Flows: []converge.ValueFlow{{From: "vpc_id", To: "vpc_id"}}}}}, []converge.ID{r.ID()}
		}},
		{"deleted consumer", func() (*converge.Batch, []converge.ID) {
			return &converge.Batch{DeletedResources: []converge.ID{"route/fd0-team5"}}, []converge.ID{"route/fd0-team5"}
		}},
		{"deleted producer", func() (*converge.Batch, []converge.ID) {
			return &converge.Batch{DeletedResources: []converge.ID{"route/fd0-team6", "vpc/fd0-team6"}}, []converge.ID{"vpc/fd0-team6", "route/fd0-team6"}
		}},
		{"new kind and root", func() (*converge.Batch, []converge.ID) {
			r := &converge.Resource{Kind: "bucket", KindVersion: 1, Name: "logs", Phase: converge.PhaseReady, Spec: json.RawMessage(`{}`)}
			return &converge.Batch{Resources: []*converge.Resource{r}}, []converge.ID{r.ID()}
		}},
		{"root adopted", func() (*converge.Batch, []converge.ID) {
			r := get("bucket/logs")
			r.Owner = "classicbom/classic"
			return &converge.Batch{Resources: []*converge.Resource{r}}, []converge.ID{r.ID()}
		}},
		{"events only", func() (*converge.Batch, []converge.ID) {
			return &converge.Batch{Events: []converge.Event{{Time: epoch, Resource: "tgw/fd1-tgw", Type: "Note", Message: "hello"}}}, nil
		}},
		{"many pending to ready", func() (*converge.Batch, []converge.ID) {
			var rs []*converge.Resource
			for _, r := range mustList(t, s, converge.PhasePending) {
				r.Phase = converge.PhaseReady
				rs = append(rs, r)
			}
			return &converge.Batch{Resources: rs}, idsOf(rs)
		}},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			batch, ids := step.change()
			if err := s.Commit(context.Background(), batch); err != nil {
				t.Fatal(err)
			}
			st, err := bld.Update(context.Background(), ids)
			if err != nil {
				t.Fatal(err)
			}
			if st.Files >= full.Files/2 {
				t.Errorf("update wrote %d files, a full build %d: not incremental", st.Files, full.Files)
			}
			checkEqualsBuild(t, s, dir, Options{Now: fixedNow, PageSize: 25, GraphNodes: 50})
		})
	}
}

// checkEqualsBuild fails t unless the site in dir is, page headers aside,
// the site a fresh Build of s with opts writes.
func checkEqualsBuild(t *testing.T, s Reader, dir string, opts Options) {
	t.Helper()
	ref := t.TempDir()
	if _, err := Build(context.Background(), s, ref, opts); err != nil {
		t.Fatal(err)
	}
	got, want := readSite(t, dir), readSite(t, ref)
	for name, w := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("updated site lacks %s", name)
		} else if !bytes.Equal(withoutHeader(g), withoutHeader(w)) {
			t.Errorf("updated %s differs from a full build", name)
			if name == "summary.json" {
				t.Logf("updated summary.json:\n%s\nfull build:\n%s", g, w)
			}
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("updated site has stale %s", name)
		}
	}
}

// TestUpdateOwnerAfterChildren gives Update an owner after the children
// it composed, as the live site does when one wait collects a root and
// its compose (in map order), and checks every page with a full Build at
// each step: the children must be counted in the owner's rollup when it
// arrives, or their later phase changes drive its counts negative. Events
// read before their resource is in the model (new in the same Update, or
// in the next) stay on its page, and so does the history of a resource
// deleted and re-created under the same ID, as a full Build shows them.
func TestUpdateOwnerAfterChildren(t *testing.T) {
	s := statetest.Open(t)
	dir := t.TempDir()
	opts := Options{Now: fixedNow}
	bld := NewBuilder(s, dir, opts)
	if _, err := bld.Build(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := func(kind, name string, owner converge.ID, p converge.Phase) *converge.Resource {
		return &converge.Resource{Kind: kind, KindVersion: 1, Name: name, Owner: owner, Phase: p, Spec: json.RawMessage(`{}`)}
	}
	const root = converge.ID("classicbom/org")
	event := func(id converge.ID, typ string) converge.Event {
		return converge.Event{Time: epoch, Resource: id, Type: typ, Message: strings.ToLower(typ)}
	}
	var kinds []*converge.Kind
	for _, k := range []string{"classicbom", "account", "vpc", "tgw", "route"} {
		kinds = append(kinds, &converge.Kind{Name: k, Version: 1, Reactions: []string{"reconcile"}})
	}
	steps := []struct {
		name  string
		batch *converge.Batch
		// early runs an Update without ids first, as when the live
		// site reads a commit's events before it hears of the commit.
		early bool
		// first are given to an Update of their own before ids.
		first []converge.ID
		ids   []converge.ID
	}{
		{name: "children first in one update", batch: &converge.Batch{Kinds: kinds, Resources: []*converge.Resource{
			res("classicbom", "org", "", converge.PhaseRunning),
			res("account", "a", root, converge.PhasePending), res("vpc", "a", root, converge.PhasePending)},
			Events: []converge.Event{event(root, "Created"), event("account/a", "Created"), event("vpc/a", "Created")}},
			ids: []converge.ID{"account/a", "vpc/a", root}},
		{name: "children change phase", batch: &converge.Batch{Resources: []*converge.Resource{
			res("account", "a", root, converge.PhaseReady), res("vpc", "a", root, converge.PhaseRunning)}},
			ids: []converge.ID{"account/a", "vpc/a"}},
		{name: "grandchild before its owner", batch: &converge.Batch{Resources: []*converge.Resource{
			res("tgw", "t", root, converge.PhasePending), res("route", "r", "tgw/t", converge.PhasePending)}},
			ids: []converge.ID{"route/r", "tgw/t"}},
		{name: "grandchild changes phase", batch: &converge.Batch{Resources: []*converge.Resource{
			res("route", "r", "tgw/t", converge.PhaseReady)}},
			ids: []converge.ID{"route/r"}},
		{name: "cascade, root first", batch: &converge.Batch{DeletedResources: []converge.ID{"route/r", "tgw/t", "vpc/a", "account/a", root},
			Events: []converge.Event{event("route/r", "Deleted"), event(root, "Deleted")}},
			ids: []converge.ID{root, "tgw/t", "account/a", "vpc/a", "route/r"}},
		{name: "root re-created, its history kept", batch: &converge.Batch{Resources: []*converge.Resource{
			res("classicbom", "org", "", converge.PhasePending)}, Events: []converge.Event{event(root, "Created")}},
			ids: []converge.ID{root}},
		{name: "events read an update before their resource", batch: &converge.Batch{Resources: []*converge.Resource{
			res("account", "b", root, converge.PhasePending)}, Events: []converge.Event{event("account/b", "Created")}},
			early: true, ids: []converge.ID{"account/b"}},
		{name: "an owner in a later update than its children", batch: &converge.Batch{Resources: []*converge.Resource{
			res("classicbom", "late", "", converge.PhaseRunning), res("account", "l", "classicbom/late", converge.PhasePending)}},
			first: []converge.ID{"account/l"}, ids: []converge.ID{"classicbom/late"}},
	}
	for _, step := range steps {
		if step.batch != nil {
			if err := s.Commit(context.Background(), step.batch); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
		}
		if step.early {
			if _, err := bld.Update(context.Background(), nil); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
		}
		if step.first != nil {
			if _, err := bld.Update(context.Background(), step.first); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
		}
		if _, err := bld.Update(context.Background(), step.ids); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		t.Run(step.name, func(t *testing.T) { checkEqualsBuild(t, s, dir, opts) })
	}
}

// withoutHeader drops the page header: its global counts are written
// with each page and kept current by polling, so pages Update leaves alone
// may show older ones.
func withoutHeader(b []byte) []byte {
	i := bytes.Index(b, []byte("<header>"))
	j := bytes.Index(b, []byte("</header>"))
	if i < 0 || j < i {
		return b
	}
	return append(b[:i:i], b[j:]...)
}

func mustList(t *testing.T, s *state.Store, p converge.Phase) []*converge.Resource {
	t.Helper()
	rs, err := s.Resources(context.Background(), state.Filter{Phase: p})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func idsOf(rs []*converge.Resource) []converge.ID {
	var out []converge.ID
	for _, r := range rs {
		out = append(out, r.ID())
	}
	return out
}

func TestHandler(t *testing.T) {
	_, dir, _ := buildFixture(t, 1, 2)
	srv := httptest.NewServer(Handler(dir))
	defer srv.Close()
	tests := []struct {
		name, method, path string
		wantCode           int
		wantType, wantBody string
	}{
		{"root is the index", "GET", "/", 200, "text/html; charset=utf-8", "<h2>Roots</h2>"},
		{"index by name", "GET", "/index.html", 200, "text/html; charset=utf-8", "<h2>Revisions</h2>"},
		{"summary", "GET", "/summary.json", 200, "application/json", `"counts"`},
		{"graph", "GET", "/graph/classicbom/classic.svg", 200, "image/svg+xml", "<svg"},
		{"resource", "GET", "/" + pageOf("vpc/fd0-team1"), 200, "text/html; charset=utf-8", "vpc"},
		{"no directory listing", "GET", "/r/", 404, "", ""},
		{"no marker", "GET", "/.converge-site", 404, "", ""},
		{"no escape", "GET", "/../../etc/passwd", 404, "", ""},
		{"missing", "GET", "/r/vpc/nope.html", 404, "", ""},
		{"read only", "POST", "/index.html", 405, "", ""},
		{"resource by name", "GET", "/r/vpc/fd0-team1", 200, "text/html; charset=utf-8", `<section class="res" id="fd0-team1"`},
		{"no resource by that name", "GET", "/r/vpc/nope", 404, "", ""},
		{"no kind by that name", "GET", "/r/nope/fd0-team1", 404, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var body bytes.Buffer
			body.ReadFrom(res.Body)
			if got, want := res.StatusCode, tc.wantCode; got != want {
				t.Fatalf("status = %d, want %d", got, want)
			}
			if tc.wantType != "" {
				if got, want := res.Header.Get("Content-Type"), tc.wantType; !strings.HasPrefix(got, want) {
					t.Errorf("content type = %q, want %q", got, want)
				}
				if got := res.Header.Get("Content-Security-Policy"); !strings.Contains(got, "script-src 'self'") {
					t.Errorf("CSP = %q", got)
				}
			}
			if !strings.Contains(body.String(), tc.wantBody) {
				t.Errorf("body lacks %q", tc.wantBody)
			}
		})
	}
}

// TestKindPhasePages checks the pagination of a kind in one phase: the
// pages partition the list in order, and each but the last holds at least
// half a page and less than one and a half.
func TestKindPhasePages(t *testing.T) {
	s := statetest.Open(t)
	fill(t, s, 2, 40)
	const size = 6
	bld := NewBuilder(s, t.TempDir(), Options{Now: fixedNow, PageSize: size})
	if _, err := bld.Build(context.Background()); err != nil {
		t.Fatal(err)
	}
	multi := 0
	for k, ids := range bld.m.lists {
		if k.Kind == "" || k.Phase == "" {
			continue
		}
		n := bld.pageCount(k, len(ids))
		if n > 1 {
			multi++
		}
		next := 0
		for p := 1; p <= n; p++ {
			lo, hi := bld.pageRows(k, p)
			if lo != next {
				t.Errorf("%v page %d starts at %d, want %d", k, p, lo, next)
			}
			if p < n && (hi-lo < size/2 || hi-lo >= size+size/2) {
				t.Errorf("%v page %d holds %d rows, want %d to %d", k, p, hi-lo, size/2, size+size/2-1)
			}
			next = hi
		}
		if next != len(ids) {
			t.Errorf("%v pages end at %d, want %d", k, next, len(ids))
		}
	}
	if multi == 0 {
		t.Error("no kind-phase list spans several pages: the test proves nothing")
	}
}

// TestHandlerRedirectsName checks that /r/KIND/NAME redirects to the
// resource's section, relative to where it is asked (so below a prefix
// too).
func TestHandlerRedirectsName(t *testing.T) {
	_, dir, _ := buildFixture(t, 1, 2)
	srv := httptest.NewServer(http.StripPrefix("/site", Handler(dir)))
	defer srv.Close()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Get(srv.URL + "/site/r/vpc/fd0-team1")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got, want := res.StatusCode, http.StatusFound; got != want {
		t.Fatalf("status = %d, want %d", got, want)
	}
	loc, err := res.Request.URL.Parse(res.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := loc.Path+"#"+loc.Fragment, "/site/"+ResourcePath("vpc/fd0-team1"); got != want {
		t.Errorf("redirect to %s, want %s", got, want)
	}
}

// TestAppliedBadge checks that of several revisions applied in turn only
// the one applied now carries the badge.
func TestAppliedBadge(t *testing.T) {
	s := statetest.Open(t)
	fill(t, s, 1, 1)
	older := &converge.RevisionRecord{Revision: converge.Revision{Ref: "main", Hash: "0ld0000000000000000000000000000000000000", Subject: "older"},
		Applied: true, Seen: epoch.Add(-time.Hour)}
	if err := s.PutRevision(context.Background(), older); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "site")
	if _, err := Build(context.Background(), s, dir, Options{Now: fixedNow}); err != nil {
		t.Fatal(err)
	}
	index := string(readSite(t, dir)["index.html"])
	if got, want := strings.Count(index, `class="tag applied"`), 1; got != want {
		t.Errorf("%d applied badges, want %d", got, want)
	}
	_, row, _ := strings.Cut(index, `id="rev-c0ffee0000000000000000000000000000000001"`)
	row, _, _ = strings.Cut(row, "</tr>")
	if !strings.Contains(row, `class="tag applied"`) {
		t.Errorf("the applied revision's row has no badge:\n%s", row)
	}
}

func TestLeaseText(t *testing.T) {
	until := time.Date(2026, 12, 1, 22, 41, 3, 0, time.UTC)
	tests := []struct {
		name  string
		lease converge.Lease
		want  string
	}{
		{"no worker recorded", converge.Lease{Reaction: "compose", Expires: until},
			"a compose task in flight until 2026-12-01 22:41:03Z (then it is dispatched again)"},
		{"a worker", converge.Lease{Reaction: "reconcile", Worker: "classic-0", Expires: until},
			"a reconcile task in flight on worker classic-0 until 2026-12-01 22:41:03Z (then it is dispatched again)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := leaseText(&tc.lease); got != tc.want {
				t.Errorf("leaseText = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestUpdateGroupsBounded checks that an Update adding a resource to a
// big root rewrites the group pages whose body changed, not every group
// page for its header: the live site's updates during a big converge
// spent seconds on them, and open pages stood still meanwhile.
func TestUpdateGroupsBounded(t *testing.T) {
	s := statetest.Open(t)
	fill(t, s, 8, 30)
	dir := t.TempDir()
	later := fixedNow().Add(time.Minute)
	now := fixedNow
	bld := NewBuilder(s, dir, Options{Now: func() time.Time { return now() }, GraphNodes: 20})
	if _, err := bld.Build(context.Background()); err != nil {
		t.Fatal(err)
	}
	var groups []string
	for name := range readSite(t, dir) {
		if strings.HasPrefix(name, "groups/") {
			groups = append(groups, name)
		}
	}
	if len(groups) < 8 {
		t.Fatalf("the fixture has %d group pages: too few to tell", len(groups))
	}
	// Update writes a file anew and renames it into place: a rewritten
	// page is another file.
	files := func() map[string]os.FileInfo {
		out := map[string]os.FileInfo{}
		for _, name := range groups {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			out[name] = fi
		}
		return out
	}
	before := files()
	now = func() time.Time { return later } // every header differs
	r := &converge.Resource{UID: "uid-new", Kind: "account", KindVersion: 1, Name: "fd0-team-new", Owner: "classicbom/classic",
		Origin: converge.OriginComposed, Phase: converge.PhasePending, Spec: json.RawMessage(`{}`), CreatedAt: epoch, UpdatedAt: later}
	if err := s.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{r}}); err != nil {
		t.Fatal(err)
	}
	st, err := bld.Update(context.Background(), []converge.ID{r.ID()})
	if err != nil {
		t.Fatal(err)
	}
	rewritten := 0
	for name, fi := range files() {
		if !os.SameFile(fi, before[name]) {
			rewritten++
		}
	}
	if rewritten > 2 { // the root's group index and fd0's group
		t.Errorf("the update rewrote %d of %d group pages (%d files in all)", rewritten, len(groups), st.Files)
	}
	checkEqualsBuild(t, s, dir, Options{Now: func() time.Time { return later }, GraphNodes: 20})
}
