package state_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/statetest"
)

// rssFile returns the resident file-backed memory of this process
// (/proc/self/status RssFile), in bytes.
func rssFile(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("RssFile: %v", err)
			}
			return kb << 10
		}
	}
	t.Skip("no RssFile in /proc/self/status (kernel older than 4.5)")
	return 0
}

// A whole-store read (Load) and commits leave the pages of state.db they
// touched out of the process's resident set: a million-row store would
// otherwise count its whole file in the control plane's RSS. Commits
// are released by the store's releaser, within a few releaseEvery.
func TestMappedPagesReleased(t *testing.T) {
	dir := t.TempDir()
	s, err := state.Open(dir, state.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() }) // closed below; Close again does nothing
	if n := s.CommitRows(); n != 0 {
		t.Fatalf("an empty store asks for at most %d rows a commit, want no bound (0)", n)
	}
	base := rssFile(t)
	pad := bytes.Repeat([]byte("x"), 1000)
	const rows, per = 40000, 4000
	for i := 0; i < rows; i += per {
		var b converge.Batch
		for j := i; j < i+per; j++ {
			spec, _ := json.Marshal(map[string]string{"pad": string(pad), "n": strconv.Itoa(j)})
			b.Resources = append(b.Resources, &converge.Resource{
				UID: fmt.Sprintf("uid-%08d", j), Kind: "account", KindVersion: 1, Name: fmt.Sprintf("a-%08d", (j*7919)%rows),
				Declared: spec, Spec: spec, Phase: converge.PhasePending, Generation: 1, Origin: converge.OriginGit,
			})
		}
		if err := s.Commit(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
	}
	// Row names out of key order: each commit touches leaves across the
	// whole file, as a million-row store's commits do.
	deadline := time.Now().Add(5 * time.Second)
	for rssFile(t) > base+16<<20 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if grew := rssFile(t) - base; grew > 16<<20 {
		t.Errorf("resident file memory is %d MiB above its start after the commits settled; want the mapped pages released", grew>>20)
	}
	// Once the file is big, a commit of rows all over the key space
	// maps a page a row: the store asks for 1,024 rows a commit.
	if n := s.CommitRows(); n != 1024 {
		t.Errorf("a %d MiB store asks for at most %d rows a commit, want 1024", fileSize(t, s.Path())>>20, n)
	}
	before := rssFile(t)
	snap, err := s.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Resources) != rows {
		t.Fatalf("loaded %d resources, want %d", len(snap.Resources), rows)
	}
	grew := rssFile(t) - before
	// The file holds ~80 MB of rows; without the release the Load alone
	// adds that much resident file memory.
	if grew > 16<<20 {
		t.Errorf("resident file memory grew by %d MiB over a Load of an %d MiB store; want the mapped pages released",
			grew>>20, fileSize(t, s.Path())>>20)
	}
	// A streamed load counts the rows before it hands them over: the
	// count walks every leaf, and releases them as it goes.
	before = rssFile(t)
	var atBegin int64
	if _, err := s.LoadStream(context.Background(), func(_ *converge.Snapshot, n int) error {
		atBegin = rssFile(t) - before
		if n != rows {
			t.Errorf("LoadStream counted %d rows, want %d", n, rows)
		}
		return nil
	}, func(*converge.Resource) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// A release comes every 16 MiB of keys and values walked (each key
	// charged 4 KiB more); half-full pages and fault-around map up to
	// about twice that between two. Without the releases the count maps
	// the whole file, and by bytes alone it mapped 69 MiB.
	if atBegin > 32<<20 {
		t.Errorf("resident file memory grew by %d MiB counting the rows of an %d MiB store; want the mapped pages released",
			atBegin>>20, fileSize(t, s.Path())>>20)
	}
	// Reopened, the store knows its size before its first commit.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := statetest.OpenDir(t, dir, state.Options{NoSync: true})
	if n := r.CommitRows(); n != 1024 {
		t.Errorf("the reopened %d MiB store asks for at most %d rows a commit, want 1024", fileSize(t, r.Path())>>20, n)
	}
}
