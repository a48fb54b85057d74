package main

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/site"
	"github.com/convergehq/converge/sync/controlplane"
)

// smallBOM is a classic BOM of three functional domains and five teams
// (25 composed resources).
const smallBOM = `type: "resource"
kind: "classicbom"
kind_version: 1
name: "classic"
spec: functional_domains: [
	{name: "fd-00", networking: true, service_teams: [{name: "team-000"}, {name: "team-001"}]},
	{name: "fd-01", networking: true, service_teams: [{name: "team-000"}, {name: "team-001"}]},
	{name: "fd-02", networking: false, service_teams: [{name: "team-000"}]},
]
`

// TestLiveSiteFollowsConverge wires the live site to the real engine as
// serve does (a store, the scheduler, the classic worker processes over
// gRPC, the site told of every committed batch), converges the classic
// example with a small BOM, then deletes its root. After each, once every
// commit has reached the site, the incrementally updated site must be the
// site a fresh build of the same store writes, page for page.
func TestLiveSiteFollowsConverge(t *testing.T) {
	repo, loaded, workers := smallClassic(t)
	desired := &loaded.Desired

	stateDir := t.TempDir()
	var logs bytes.Buffer
	now := func() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) }
	opts := site.Options{Title: "converge", Now: now} // a fixed clock, so pages compare
	// Updates in chunks agree with a build too.
	live := site.NewLive(filepath.Join(stateDir, "site"), site.LiveOptions{Site: opts, Log: &logs, Chunk: 4})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, err := startEngine(ctx, controlplane.Options{StateDir: stateDir, RepoDir: repo, Workers: workers,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Changed: live.Changed})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Close(); err != nil {
			t.Errorf("close engine: %v", err)
		}
	}()
	live.Attach(e.Store())
	siteDone := make(chan struct{})
	go func() { live.Run(ctx); close(siteDone) }()
	defer func() { cancel(); <-siteDone }()
	// The first build (of the empty store) is done when summary.json is
	// there; from then on the site only hears of changes.
	waitFor(t, "the first site build", func() bool {
		_, err := os.Stat(filepath.Join(live.Dir(), "summary.json"))
		return err == nil
	})
	waitFor(t, "the classic worker", func() bool { return len(e.Server().Workers()) >= controlplane.ExpectedWorkers(workers) })

	caughtUp := func(t *testing.T) {
		t.Helper()
		waitFor(t, "the engine to settle", func() bool { return e.Scheduler().Progress().Settled == scheduler.Converged })
		if err := e.Scheduler().Flush(ctx); err != nil {
			t.Fatal(err)
		}
		live.Update(ctx) // every commit so far is on the site now
		if logs.Len() > 0 {
			t.Errorf("live site logged:\n%s", logs.String())
		}
		ref := filepath.Join(t.TempDir(), "site")
		if _, err := site.Build(ctx, e.Store(), ref, opts); err != nil {
			t.Fatal(err)
		}
		compareSites(t, live.Dir(), ref)
	}

	t.Run("converge", func(t *testing.T) {
		if _, err := e.Scheduler().Apply(ctx, desired, loaded.Schemas); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the root to be Ready", func() bool {
			r, err := e.Store().Resource(ctx, "classicbom/classic")
			return err == nil && r.Phase == converge.PhaseReady
		})
		caughtUp(t)
	})
	t.Run("delete root", func(t *testing.T) {
		if err := e.Scheduler().Delete(ctx, "classicbom/classic"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the root to be gone", func() bool {
			_, err := e.Store().Resource(ctx, "classicbom/classic")
			return err != nil
		})
		caughtUp(t)
	})
}

// waitFor polls cond every 10ms for up to a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// compareSites fails t for every file of the site in want that the site
// in got lacks or holds differently (page headers aside: their global
// and revision are rewritten only with the page), and for every file got
// has and want does not.
func compareSites(t *testing.T, got, want string) {
	t.Helper()
	g, w := siteFiles(t, got), siteFiles(t, want)
	for name, wb := range w {
		gb, ok := g[name]
		switch {
		case !ok:
			t.Errorf("live site lacks %s", name)
		case !bytes.Equal(withoutPageHeader(gb), withoutPageHeader(wb)):
			t.Errorf("live %s differs from a fresh build", name)
			if name == "summary.json" {
				t.Logf("live:\n%s\nfresh:\n%s", gb, wb)
			}
		}
	}
	for name := range g {
		if _, ok := w[name]; !ok {
			t.Errorf("live site has stale %s", name)
		}
	}
}

func siteFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := make(map[string][]byte)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.HasSuffix(p, ".tmp") {
			// A write in progress (renamed over its page next), which
			// the site never serves: Run's own paced update may still
			// be rewriting a page with the same bytes.
			return nil
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

// withoutPageHeader drops what a page says about the whole site rather
// than itself, which Update refreshes only with the pages it rewrites:
// the header's counts (kept current by polling summary.json) and the
// body's data-revision (the revision applied when the page was written).
func withoutPageHeader(b []byte) []byte {
	b = pageRevision.ReplaceAll(b, nil)
	i := bytes.Index(b, []byte("<header>"))
	j := bytes.Index(b, []byte("</header>"))
	if i < 0 || j < i {
		return b
	}
	return append(b[:i:i], b[j:]...)
}

var pageRevision = regexp.MustCompile(`<body [^>]*data-revision="[^"]*"`)

// smallClassic copies the classic example with a small BOM into a
// directory and loads it: the repository, what it loads (its desired
// state as revision c0ffee…01) and its builtin worker.
func smallClassic(t *testing.T) (repo string, loaded *cue.Result, workers []converge.WorkerSpec) {
	t.Helper()
	repo = t.TempDir()
	if err := os.CopyFS(repo, os.DirFS(filepath.Join(repoRoot(t), "examples", "classic"))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "resources", "bom.cue"), []byte(smallBOM), 0o644); err != nil {
		t.Fatal(err)
	}
	loaded, err := cue.Load(os.DirFS(repo), ".", cue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Valid() {
		t.Fatalf("example: %v", loaded.Findings)
	}
	loaded.Desired.Revision = converge.Revision{Ref: "main", Hash: "c0ffee0000000000000000000000000000000001", Subject: "small BOM"}
	workers = []converge.WorkerSpec{{Name: "classic", Builtin: "classic", Replicas: 1}}
	return repo, loaded, workers
}
