package site

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/statetest"
)

// chromium returns the path of a Chromium binary, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is absent from PATH (Debian package chromium; .ci/run installs it)")
	return ""
}

// headless runs Chromium headless on pageURL with extra flags (--dump-dom
// or --screenshot=…) and returns its standard output.
func headless(t *testing.T, bin, pageURL string, extra ...string) string {
	t.Helper()
	// Chromium itself crashes now and then on a loaded machine (a
	// segmentation fault in the browser, seen in CI at load 8). A run
	// killed by a signal says nothing about the page, so it is run again,
	// at most twice; an exit status or a timeout fails at once.
	for attempt := 1; ; attempt++ {
		out, stderr, err := runHeadless(t, bin, pageURL, extra)
		if err == nil {
			return out
		}
		var exit *exec.ExitError
		crashed := errors.As(err, &exit) && exit.ProcessState != nil && !exit.Exited() && !errors.Is(err, context.DeadlineExceeded)
		if !crashed || attempt == 3 {
			t.Fatalf("chromium %s (run %d): %v\nstderr:\n%s", pageURL, attempt, err, stderr)
		}
		t.Logf("chromium %s (run %d) crashed, running it again: %v", pageURL, attempt, err)
	}
}

// runHeadless runs Chromium once and returns its standard output and
// standard error.
func runHeadless(t *testing.T, bin, pageURL string, extra []string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + t.TempDir(), "--virtual-time-budget=3000"}
	args = append(append(args, extra...), pageURL)
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w: %v", ctx.Err(), err)
	}
	return out.String(), errOut.String(), err
}

// domInt returns the number inside the first element matching attrs
// (an attribute list as written in the DOM), or fails t.
func domInt(t *testing.T, dom, attrs string) int {
	t.Helper()
	re := regexp.MustCompile(regexp.QuoteMeta(attrs) + `[^>]*>(\d+)<`)
	m := re.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("DOM has no element with %s holding a number", attrs)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

var domLink = regexp.MustCompile(`\b(?:href|src|data)="([^"#]+)"`)

// checkDOMLinks fetches every link of a rendered page from the server.
func checkDOMLinks(t *testing.T, page *url.URL, dom string) int {
	t.Helper()
	n := 0
	for _, m := range domLink.FindAllStringSubmatch(dom, -1) {
		ref, err := url.Parse(strings.ReplaceAll(m[1], "&amp;", "&"))
		if err != nil {
			t.Errorf("%s: bad link %q", page, m[1])
			continue
		}
		u := page.ResolveReference(ref)
		res, err := http.Get(u.String())
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("%s: link %q: %s", page.Path, m[1], res.Status)
		}
		n++
	}
	return n
}

// TestBrowser loads the site of a converged classic-like store in headless
// Chromium: the index shows the root Ready with its counts, links work,
// the root's page embeds its SVG graph, and after the store changes and
// only summary.json (not the index) is rewritten, the open index shows the
// new counts by polling. Screenshots are kept in $CONVERGE_ARTIFACTS (or a
// temporary directory).
func TestBrowser(t *testing.T) {
	bin := chromium(t)
	s := statetest.Open(t)
	batch := classicBatch(2, 10)
	for _, r := range batch.Resources { // converged: everything Ready
		r.Phase, r.Reason, r.LastError, r.Lease, r.Deleting, r.DeletedAt = converge.PhaseReady, "", "", nil, false, time.Time{}
	}
	if err := s.Commit(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	// Three buckets on one page, to open it at each one's fragment.
	var buckets []*converge.Resource
	for _, n := range sameShard("bucket", 3) {
		buckets = append(buckets, &converge.Resource{Kind: "bucket", KindVersion: 1, Name: n, Phase: converge.PhaseReady, Spec: json.RawMessage(`{}`)})
	}
	if err := s.Commit(context.Background(), &converge.Batch{Resources: buckets}); err != nil {
		t.Fatal(err)
	}
	putRevisions(t, s)
	total := len(batch.Resources) + len(buckets)
	rootTotal := len(batch.Resources) - 2 // db/orders, app/shop and the buckets are roots of their own
	dir := filepath.Join(t.TempDir(), "site")
	const pageSize = 8 // the 20 vpcs on three pages
	bld := NewBuilder(s, dir, Options{Now: time.Now, Title: "converge classic", PageSize: pageSize})
	if _, err := bld.Build(context.Background()); err != nil {
		t.Fatal(err)
	}
	once := &staleOnce{pages: map[string][]byte{}}
	srv := httptest.NewServer(once.wrap(Handler(dir)))
	defer srv.Close()
	base, _ := url.Parse(srv.URL + "/")
	index := base.ResolveReference(&url.URL{Path: "index.html"})
	rootPage, err := base.Parse(ResourcePath("classicbom/classic"))
	if err != nil {
		t.Fatal(err)
	}

	artifacts := os.Getenv("CONVERGE_ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	} else if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("index", func(t *testing.T) {
		dom := headless(t, bin, index.String(), "--dump-dom")
		const root = `data-rollup="classicbom/classic"`
		if !regexp.MustCompile(root + ` data-field="phase">Ready<`).MatchString(dom) {
			t.Errorf("index does not show classicbom/classic Ready")
		}
		if got, want := domInt(t, dom, root+` data-field="ready"`), rootTotal; got != want {
			t.Errorf("root ready = %d, want %d", got, want)
		}
		if got, want := domInt(t, dom, root+` data-field="total"`), rootTotal; got != want {
			t.Errorf("root total = %d, want %d", got, want)
		}
		if got, want := domInt(t, dom, `data-count="total"`), total; got != want {
			t.Errorf("total = %d, want %d", got, want)
		}
		if !strings.Contains(dom, `href="graph/classicbom/classic.svg"`) {
			t.Error("index does not link the root's graph")
		}
		if !strings.Contains(dom, "not applied: vpc/v1 spec.region: field added as required") {
			t.Error("index lacks the lint finding of the held revision")
		}
		if n := checkDOMLinks(t, index, dom); n < 20 {
			t.Errorf("index has only %d links", n)
		}
		shot := filepath.Join(artifacts, "site-index.png")
		headless(t, bin, index.String(), "--screenshot="+shot, "--window-size=1280,900")
		if fi, err := os.Stat(shot); err != nil || fi.Size() < 10000 {
			t.Fatalf("screenshot %s missing or blank: %v", shot, err)
		}
		t.Logf("screenshot of the index: %s", shot)
	})

	t.Run("root page and graph", func(t *testing.T) {
		dom := headless(t, bin, rootPage.String(), "--dump-dom")
		if !strings.Contains(dom, `<object class="graph" type="image/svg+xml" data="../../graph/classicbom/classic.svg">`) {
			t.Error("root page does not embed its SVG graph")
		}
		res, err := http.Get(base.ResolveReference(&url.URL{Path: GraphPath("classicbom/classic")}).String())
		if err != nil {
			t.Fatal(err)
		}
		var svg bytes.Buffer
		svg.ReadFrom(res.Body)
		res.Body.Close()
		if got := res.Header.Get("Content-Type"); got != "image/svg+xml" {
			t.Errorf("graph content type = %q", got)
		}
		if !strings.HasPrefix(svg.String(), "<svg") || !strings.Contains(svg.String(), "vpc/fd1-team9") {
			t.Errorf("graph is not an SVG of the subtree")
		}
		checkDOMLinks(t, rootPage, dom)
		shot := filepath.Join(artifacts, "site-root.png")
		headless(t, bin, rootPage.String(), "--screenshot="+shot, "--window-size=1280,900")
		t.Logf("screenshot of the root page: %s", shot)
	})

	t.Run("pagination", func(t *testing.T) {
		// Follow "next →" from the first page of the vpcs to the last, as
		// a person would, then "← previous" back: every vpc once, in
		// order, on pages of pageSize.
		pageLink := regexp.MustCompile(`<a href="([^"]+)">(← previous|next →)</a>`)
		rowLink := regexp.MustCompile(`<tr><td><a href="[^"]+">(vpc/[^<]+)</a>`)
		links := func(dom string) map[string]string {
			out := map[string]string{}
			for _, m := range pageLink.FindAllStringSubmatch(dom, -1) {
				out[m[2]] = m[1]
			}
			return out
		}
		var seen []string
		var visited []*url.URL
		page := base.ResolveReference(&url.URL{Path: "kinds/vpc.html"})
		for n := 1; ; n++ {
			if n > 5 {
				t.Fatal("next → never ends")
			}
			dom := headless(t, bin, page.String(), "--dump-dom")
			if want := fmt.Sprintf("page %d of 3", n); !strings.Contains(dom, want) {
				t.Errorf("%s does not say %q", page.Path, want)
			}
			var rows []string
			for _, m := range rowLink.FindAllStringSubmatch(dom, -1) {
				rows = append(rows, m[1])
			}
			if n < 3 && len(rows) != pageSize {
				t.Errorf("%s shows %d vpcs, want %d", page.Path, len(rows), pageSize)
			}
			seen = append(seen, rows...)
			checkDOMLinks(t, page, dom)
			visited = append(visited, page)
			ls := links(dom)
			if _, ok := ls["← previous"]; ok != (n > 1) {
				t.Errorf("%s: previous link present = %v, want %v", page.Path, ok, n > 1)
			}
			next, ok := ls["next →"]
			if !ok {
				break
			}
			ref, err := url.Parse(html.UnescapeString(next))
			if err != nil {
				t.Fatal(err)
			}
			page = page.ResolveReference(ref)
		}
		var want []string
		for _, r := range batch.Resources {
			if r.Kind == "vpc" {
				want = append(want, string(r.ID()))
			}
		}
		sort.Strings(want)
		if !slices.Equal(seen, want) {
			t.Errorf("the pages show %v, want every vpc once in order: %v", seen, want)
		}
		for i := len(visited) - 1; i > 0; i-- {
			dom := headless(t, bin, visited[i].String(), "--dump-dom")
			ref, err := url.Parse(html.UnescapeString(links(dom)["← previous"]))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := visited[i].ResolveReference(ref).Path, visited[i-1].Path; got != want {
				t.Errorf("← previous on %s leads to %s, want %s", visited[i].Path, got, want)
			}
		}
	})

	t.Run("search", func(t *testing.T) {
		// A name's beginning, in one kind and phase: its rows span two
		// of the vpcs' three list pages.
		u := base.ResolveReference(&url.URL{Path: "index.html", RawQuery: "kind=vpc&name=fd1-team&phase=Ready"})
		dom := headless(t, bin, u.String(), "--dump-dom")
		_, results, _ := strings.Cut(dom, `<div id="search-results"`)
		results, _, _ = strings.Cut(results, "</div>")
		found := regexp.MustCompile(`<a href="[^"]+">(vpc/[^<]+)</a>`).FindAllStringSubmatch(results, -1)
		var got []string
		for _, m := range found {
			got = append(got, m[1])
		}
		var want []string
		for i := range 10 {
			want = append(want, fmt.Sprintf("vpc/fd1-team%d", i))
		}
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("search fd1-team in vpc, Ready, found %v, want %v\n%s", got, want, results)
		}
		// Every kind: the tgws and accounts of fd1 too.
		u = base.ResolveReference(&url.URL{Path: "index.html", RawQuery: "name=fd1-tgw"})
		dom = headless(t, bin, u.String(), "--dump-dom")
		for _, id := range []string{"tgw/fd1-tgw", "account/fd1-tgw-host"} {
			if !strings.Contains(dom, ">"+id+"</a>") {
				t.Errorf("search fd1-tgw in every kind does not find %s", id)
			}
		}
		// No match says so.
		u = base.ResolveReference(&url.URL{Path: "index.html", RawQuery: "kind=vpc&name=nope"})
		if dom = headless(t, bin, u.String(), "--dump-dom"); !strings.Contains(dom, "No resources vpc/nope…") {
			t.Errorf("a search without a match does not say so")
		}
	})

	t.Run("resource by name", func(t *testing.T) {
		// A static host: index.html?r=KIND/NAME; serve: /r/KIND/NAME.
		for _, u := range []*url.URL{
			base.ResolveReference(&url.URL{Path: "index.html", RawQuery: "r=vpc/fd1-team9"}),
			base.ResolveReference(&url.URL{Path: "r/vpc/fd1-team9"}),
		} {
			dom := headless(t, bin, u.String(), "--dump-dom")
			if !strings.Contains(dom, `<title>vpc/fd1-team9 · `) || !strings.Contains(dom, `data-id="vpc/fd1-team9"`) {
				t.Errorf("%s does not open vpc/fd1-team9's page", u)
			}
		}
	})

	t.Run("shared resource page", func(t *testing.T) {
		// Each bucket's link opens the page of all three at its section;
		// the tab is named after it.
		for _, r := range buckets {
			u, err := base.Parse(ResourcePath(r.ID()))
			if err != nil {
				t.Fatal(err)
			}
			dom := headless(t, bin, u.String(), "--dump-dom")
			if got := bytes.Count([]byte(dom), []byte(`<section class="res"`)); got != 3 {
				t.Errorf("%s holds %d sections, want 3", u.Path, got)
			}
			if want := "<title>" + string(r.ID()) + " · converge classic</title>"; !strings.Contains(dom, want) {
				t.Errorf("%s: the tab is not named %s", u, r.ID())
			}
			checkDOMLinks(t, u, dom)
		}
		last := buckets[len(buckets)-1]
		u, _ := base.Parse(ResourcePath(last.ID()))
		shot := filepath.Join(artifacts, "site-shared-page.png")
		headless(t, bin, u.String(), "--screenshot="+shot, "--window-size=1280,900")
		t.Logf("screenshot of %s: %s", u, shot)
	})

	t.Run("counts update by polling", func(t *testing.T) {
		stale, err := os.ReadFile(filepath.Join(dir, "index.html"))
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Resource(context.Background(), "vpc/fd0-team1")
		if err != nil {
			t.Fatal(err)
		}
		r.Phase, r.Reason = converge.PhaseFailed, "quota exceeded"
		if err := s.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{r}}); err != nil {
			t.Fatal(err)
		}
		if _, err := bld.Update(context.Background(), []converge.ID{r.ID()}); err != nil {
			t.Fatal(err)
		}
		// Put the old index back: only summary.json can tell the page.
		if err := os.WriteFile(filepath.Join(dir, "index.html"), stale, 0o644); err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(stale, []byte(`<span data-count="failed">0</span>`)) {
			t.Fatal("the stale index does not show 0 failed; the test proves nothing")
		}
		dom := headless(t, bin, index.String(), "--dump-dom")
		if got, want := domInt(t, dom, `<span data-count="failed"`), 1; got != want {
			t.Errorf("header failed = %d after polling, want %d", got, want)
		}
		if got, want := domInt(t, dom, `<span data-count="ready"`), total-1; got != want {
			t.Errorf("header ready = %d after polling, want %d", got, want)
		}
		if got, want := domInt(t, dom, `data-rollup="classicbom/classic" data-field="failed"`), 1; got != want {
			t.Errorf("root failed = %d after polling, want %d", got, want)
		}
	})

	// A page opened before a change: the first request of a path is
	// answered with what the site held before, later ones (the page's
	// own refetch) with the site as it is.
	openBefore := func(t *testing.T, rel string, change func()) {
		t.Helper()
		before, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		change()
		once.set("/"+rel, before)
	}

	t.Run("open page follows changes", func(t *testing.T) {
		r, err := s.Resource(context.Background(), "vpc/fd1-team3")
		if err != nil {
			t.Fatal(err)
		}
		rel := strings.SplitN(ResourcePath(r.ID()), "#", 2)[0]
		openBefore(t, rel, func() {
			r.Phase, r.Reason = converge.PhaseFailed, "route table full"
			if err := s.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{r}}); err != nil {
				t.Fatal(err)
			}
			if _, err := bld.Update(context.Background(), []converge.ID{r.ID()}); err != nil {
				t.Fatal(err)
			}
		})
		u, _ := base.Parse(ResourcePath(r.ID()))
		dom := headless(t, bin, u.String(), "--dump-dom")
		if !strings.Contains(dom, "route table full") {
			t.Errorf("the open page of %s does not show its new failure without a reload", r.ID())
		}
		if got, want := domInt(t, dom, `<span data-count="failed"`), 2; got != want {
			t.Errorf("header failed = %d, want %d", got, want)
		}
		live := regexp.MustCompile(`<p id="live"[^>]*aria-live="polite"[^>]*>([^<]*)</p>`).FindStringSubmatch(dom)
		if live == nil || !strings.Contains(live[1], "2 failed") {
			t.Errorf("the aria-live summary does not announce the new counts: %q", live)
		}
	})

	t.Run("deleted resource says so", func(t *testing.T) {
		gone := buckets[1]
		rel := strings.SplitN(ResourcePath(gone.ID()), "#", 2)[0]
		openBefore(t, rel, func() {
			if err := s.Commit(context.Background(), &converge.Batch{DeletedResources: []converge.ID{gone.ID()}}); err != nil {
				t.Fatal(err)
			}
			if _, err := bld.Update(context.Background(), []converge.ID{gone.ID()}); err != nil {
				t.Fatal(err)
			}
		})
		u, _ := base.Parse(ResourcePath(gone.ID()))
		dom := headless(t, bin, u.String(), "--dump-dom")
		if !regexp.MustCompile(`<p id="gone" class="gone" role="alert">` + regexp.QuoteMeta(string(gone.ID())) + ` was deleted`).MatchString(dom) {
			t.Errorf("the open page of deleted %s does not say it was deleted", gone.ID())
		}
		if !strings.Contains(dom, `data-id="`+string(gone.ID())+`"`) {
			t.Errorf("the open page of deleted %s lost its last state", gone.ID())
		}
		once.set("/"+rel, nil)
	})

	t.Run("re-created resource says so", func(t *testing.T) {
		// Deleted and created again under the same ID while its page was
		// open: a new uid, and the page says so above the new one.
		again := *buckets[0]
		again.UID = "uid-of-the-new-one"
		rel := strings.SplitN(ResourcePath(again.ID()), "#", 2)[0]
		openBefore(t, rel, func() {
			if err := s.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{&again}}); err != nil {
				t.Fatal(err)
			}
			if _, err := bld.Update(context.Background(), []converge.ID{again.ID()}); err != nil {
				t.Fatal(err)
			}
		})
		u, _ := base.Parse(ResourcePath(again.ID()))
		dom := headless(t, bin, u.String(), "--dump-dom")
		if !regexp.MustCompile(`<p id="gone" class="gone" role="alert">` + regexp.QuoteMeta(string(again.ID())) +
			` was deleted \(noticed [^)]*\) and created anew`).MatchString(dom) {
			t.Errorf("the open page of re-created %s does not say it was created anew", again.ID())
		}
		if !strings.Contains(dom, `data-uid="uid-of-the-new-one"`) {
			t.Errorf("the open page of re-created %s does not show the new one", again.ID())
		}
		once.set("/"+rel, nil)
	})

	t.Run("deleted alone on its page", func(t *testing.T) {
		// A vpc alone on its shard page: deleting it removes the page,
		// and the open page, whose refetch is a 404, says so.
		all, err := s.Resources(context.Background(), state.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		onPage := map[string]int{}
		pageOf := func(id converge.ID) string { return strings.SplitN(ResourcePath(id), "#", 2)[0] }
		for _, r := range all {
			onPage[pageOf(r.ID())]++
		}
		var alone converge.ID
		for _, r := range all {
			if r.Kind == "vpc" && onPage[pageOf(r.ID())] == 1 {
				alone = r.ID()
				break
			}
		}
		if alone == "" {
			t.Fatal("no vpc is alone on its page; pick another kind")
		}
		rel := pageOf(alone)
		openBefore(t, rel, func() {
			if err := s.Commit(context.Background(), &converge.Batch{DeletedResources: []converge.ID{alone}}); err != nil {
				t.Fatal(err)
			}
			if _, err := bld.Update(context.Background(), []converge.ID{alone}); err != nil {
				t.Fatal(err)
			}
		})
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rel))); !os.IsNotExist(err) {
			t.Fatalf("%s is still there after its only resource was deleted: %v", rel, err)
		}
		u, _ := base.Parse(ResourcePath(alone))
		dom := headless(t, bin, u.String(), "--dump-dom")
		if !strings.Contains(dom, `<p id="gone" class="gone" role="alert">`+string(alone)+` was deleted`) {
			t.Errorf("the open page of %s, now a 404, does not say it was deleted", alone)
		}
		once.set("/"+rel, nil)
	})
}

// staleOnce answers the first request of each path it holds with the
// bytes it holds (the page as it was before a change), then forgets them.
type staleOnce struct {
	mu    sync.Mutex
	pages map[string][]byte
}

func (o *staleOnce) set(path string, b []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if b == nil {
		delete(o.pages, path)
	} else {
		o.pages[path] = b
	}
}

func (o *staleOnce) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		b, ok := o.pages[r.URL.Path]
		delete(o.pages, r.URL.Path)
		o.mu.Unlock()
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", csp)
		_, _ = w.Write(b)
	})
}
