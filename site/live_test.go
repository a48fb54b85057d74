package site

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

// slowReader is a store whose batched read takes a second (a store over
// a loaded network), counting the reads.
type slowReader struct {
	Reader
	reads atomic.Int64
}

func (r *slowReader) ResourcesByID(ctx context.Context, ids []converge.ID) ([]*converge.Resource, error) {
	r.reads.Add(1)
	time.Sleep(time.Second)
	return r.Reader.ResourcesByID(ctx, ids)
}

// TestLiveSitePacesItself: while changes keep coming, a live site whose
// updates take a second each updates about every five seconds (busyFactor
// × its update's time after it), not every interval: each update gets
// the rows changed meanwhile, read once. When the changes stop, the last
// one is on the site within one pace.
func TestLiveSitePacesItself(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := statetest.Open(t)
		at := time.Date(2025, 1, 2, 3, 0, 0, 0, time.UTC)
		put := func(i int) converge.ID {
			r := &converge.Resource{UID: fmt.Sprintf("u-%d", i), Kind: "leaf", KindVersion: 1, Name: fmt.Sprintf("leaf-%03d", i),
				Origin: converge.OriginGit, Spec: []byte(`{}`), Phase: converge.PhaseReady, CreatedAt: at, UpdatedAt: at}
			b := &converge.Batch{Resources: []*converge.Resource{r}}
			if i == 0 {
				b.Kinds = []*converge.Kind{{Name: "leaf", Version: 1}}
			}
			if err := st.Commit(context.Background(), b); err != nil {
				t.Fatal(err)
			}
			return r.ID()
		}
		put(0)
		rd := &slowReader{Reader: st}
		dir := filepath.Join(t.TempDir(), "site")
		opts := Options{Title: "converge", Now: func() time.Time { return at }}
		live := NewLive(dir, LiveOptions{Site: opts})
		live.Attach(rd)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); live.Run(ctx) }()
		// A change every 200 ms for a minute.
		var last converge.ID
		for i := 1; i <= 300; i++ {
			last = put(i)
			live.Changed([]converge.ID{last})
			time.Sleep(200 * time.Millisecond)
		}
		updates := rd.reads.Load()
		// Unpaced: an update every interval + 1 s, ~48 in the minute.
		if updates > 14 {
			t.Errorf("%d updates in a minute of changes with 1 s reads, want at most 14 (one about every 5 s)", updates)
		}
		time.Sleep(busyFactor*time.Second + live.interval + 2*time.Second)
		synctest.Wait()
		cancel()
		<-done
		if got := rd.reads.Load(); got == updates {
			t.Errorf("no update after the changes stopped: the last (%s) is not on the site", last)
		}
		checkEqualsBuild(t, st, dir, opts)
	})
}
