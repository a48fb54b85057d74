package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/sync/gittest"
)

// errDiskFull is the commit failure failingStore injects.
var errDiskFull = errors.New("write state.db: no space left on device")

// failingStore is the real store behind an engine whose commits start
// failing, as on a disk that fills up, with the first batch that records
// a resource Ready: the applied revision is durable, what the workers did
// is not. Every later commit fails too.
type failingStore struct {
	scheduler.Store
	failing atomic.Bool
}

func (s *failingStore) Commit(ctx context.Context, b *converge.Batch) error {
	for _, r := range b.Resources {
		if r.Phase == converge.PhaseReady {
			s.failing.Store(true)
		}
	}
	if s.failing.Load() {
		return errDiskFull
	}
	return s.Store.Commit(ctx, b)
}

// withFailingCommits returns globals whose engine commits through a
// failingStore.
func withFailingCommits() *globals {
	return &globals{wrapStore: func(st scheduler.Store) scheduler.Store { return &failingStore{Store: st} }}
}

// classicRepo makes a git repository of the classic example with a small
// BOM (smallBOM) in one commit and returns its directory and the commit.
func classicRepo(t *testing.T) (dir, hash string) {
	t.Helper()
	dir = t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(repoRoot(t), "examples", "classic"))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "resources", "bom.cue"), []byte(smallBOM), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Run(t, dir, "init", "-q", "-b", "main")
	gittest.Run(t, dir, "add", "-A")
	gittest.Run(t, dir, "commit", "-q", "-m", "small BOM")
	return dir, gittest.Run(t, dir, "rev-parse", "HEAD")
}

// syncVerdict returns the converge/sync status the store in dir recorded
// for hash.
func syncVerdict(t *testing.T, dir, hash string) converge.CommitStatus {
	t.Helper()
	st, err := state.Open(dir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec, err := st.Revision(context.Background(), hash)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := rec.Status(converge.ContextSync)
	return s
}

// TestSyncCommitFailing syncs the classic example (real workers over
// gRPC, a real store) while every commit after the applied revision's
// fails. The engine converges in memory, but nothing it did is durable:
// sync must stop within commitGrace, an environment error (exit 2), naming
// the failing commit on stderr, in its error and in the verdict it records,
// never report converged, and its progress line must count nothing Ready.
// (The grace against the timeout: the timeout is an hour, so a sync that
// waited for it would fail the test by go test's own timeout.)
func TestSyncCommitFailing(t *testing.T) {
	repo, hash := classicRepo(t)
	stateDir := t.TempDir()
	out, err := runCLIWith(withFailingCommits(), "--repo", repo, "--state", stateDir, "sync", "--timeout", "1h", "--stuck-grace", "1h")
	if err == nil || errors.As(err, new(errFailed)) {
		t.Fatalf("sync: got %v, want exit 2\n%s", err, out)
	}
	want := "commit state: " + errDiskFull.Error()
	if !strings.Contains(err.Error(), "not converged (state not durable): "+want) {
		t.Errorf("sync error = %q, want it to name %q", err, want)
	}
	if !strings.Contains(out, "not converged:\n  "+want+"\n") {
		t.Errorf("sync output does not list %q first among what is not converged:\n%s", want, out)
	}
	if strings.Contains(out, "converged:") && !strings.Contains(out, "not converged:") {
		t.Errorf("sync says converged:\n%s", out)
	}
	v := syncVerdict(t, stateDir, hash)
	if v.State != converge.StateFailure || !strings.Contains(v.Description, "; "+want) {
		t.Errorf("recorded converge/sync = %s %q, want failure naming %q", v.State, v.Description, want)
	}
}
