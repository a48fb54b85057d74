package site

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/statetest"
)

// TestLiveSiteUpdatesInChunks checks that a big set of changes reaches
// the live site in bounded updates, each ending with its own summary.json
// (so an open page moves with every one), and that the site is then the
// one a fresh build writes.
func TestLiveSiteUpdatesInChunks(t *testing.T) {
	st := statetest.Open(t)
	dir := filepath.Join(t.TempDir(), "site")
	var logs bytes.Buffer
	now := func() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) }
	opts := Options{Title: "converge", Now: now}
	const children, chunk = 95, 10
	live := NewLive(dir, LiveOptions{Site: opts, Log: &logs, Chunk: chunk})
	live.Attach(st)
	if _, err := live.b.Build(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := &converge.Batch{Kinds: []*converge.Kind{{Name: "bom", Version: 1}, {Name: "leaf", Version: 1}}}
	at := time.Date(2025, 1, 2, 3, 0, 0, 0, time.UTC)
	b.Resources = append(b.Resources, &converge.Resource{UID: "u-root", Kind: "bom", KindVersion: 1, Name: "root",
		Spec: []byte(`{}`), Phase: converge.PhaseReady, Origin: converge.OriginGit, CreatedAt: at, UpdatedAt: at})
	for i := range children {
		b.Resources = append(b.Resources, &converge.Resource{UID: fmt.Sprintf("u-%d", i), Kind: "leaf", KindVersion: 1,
			Name: fmt.Sprintf("leaf-%03d", i), Owner: "bom/root", Origin: converge.OriginComposed, Spec: []byte(`{}`),
			Phase: converge.PhaseReady, CreatedAt: at, UpdatedAt: at})
	}
	if err := st.Commit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	ids := make([]converge.ID, len(b.Resources))
	for i, r := range b.Resources {
		ids[i] = r.ID()
	}
	var updates []*Stats
	live.updated = func(s *Stats) { updates = append(updates, s) }
	live.Changed(ids)
	live.Update(context.Background())
	if logs.Len() > 0 {
		t.Errorf("live site logged:\n%s", logs.String())
	}
	if got, want := len(updates), (children+1+chunk-1)/chunk; got != want {
		t.Errorf("%d updates, want %d", got, want)
	}
	checkEqualsBuild(t, st, dir, opts)
}
