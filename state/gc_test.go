package state_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/statetest"
)

// grow fills the store in dir the way a big graph that was torn down does:
// n resources with events, committed in batches, then all but keep of
// them deleted. It returns the store's Load afterwards, as JSON.
func grow(t *testing.T, dir string, n, keep int) string {
	t.Helper()
	s, err := state.Open(dir, state.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const batch = 1000
	for i := 0; i < n; i += batch {
		b := &converge.Batch{}
		for j := i; j < min(i+batch, n); j++ {
			r := res("vpc", fmt.Sprintf("v%06d", j), "")
			r.Status = []byte(`{"vpc_id":"vpc-0123456789abcdef0","subnets":["subnet-a","subnet-b","subnet-c"]}`)
			b.Resources = append(b.Resources, r)
			b.Events = append(b.Events, converge.Event{Resource: r.ID(), Type: "Created", Time: t0})
		}
		commit(t, s, b)
	}
	for i := keep; i < n; i += batch {
		b := &converge.Batch{}
		for j := i; j < min(i+batch, n); j++ {
			b.DeletedResources = append(b.DeletedResources, converge.NewID("vpc", fmt.Sprintf("v%06d", j)))
		}
		commit(t, s, b)
	}
	return mustJSON(t, load(t, s))
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestCompactShrinks: a store grown by many commits and deletes shrinks
// after Compact and keeps every fact.
func TestCompactShrinks(t *testing.T) {
	dir := t.TempDir()
	before := grow(t, dir, 20000, 100)
	path := filepath.Join(dir, state.FileName)
	size := fileSize(t, path)
	got, err := state.Compact(context.Background(), dir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Before != size || got.After != fileSize(t, path) {
		t.Errorf("Compact reported %+v; file was %d, is %d", got, size, fileSize(t, path))
	}
	if got.After*4 > got.Before {
		t.Errorf("compacted %d bytes to %d: want it under a quarter", got.Before, got.After)
	}
	if _, err := os.Stat(path + ".compact"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left behind: %v", err)
	}
	s := statetest.OpenDir(t, dir, state.Options{NoSync: true})
	if after := mustJSON(t, load(t, s)); after != before {
		t.Errorf("Load after Compact differs from before:\n%s\nwant\n%s", after, before)
	}
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("vpc", "after", "")}})
}

// TestCompactLocked: Compact refuses a store another Store holds.
func TestCompactLocked(t *testing.T) {
	dir := t.TempDir()
	statetest.OpenDir(t, dir, state.Options{NoSync: true})
	_, err := state.Compact(context.Background(), dir, state.Options{LockTimeout: 50 * time.Millisecond})
	if !errors.Is(err, state.ErrLocked) {
		t.Errorf("Compact of a held store: error = %v, want ErrLocked", err)
	}
}

// TestCompactKilledBeforeSwap kills a process running Compact after it
// wrote and checked the new file and before the rename: the old file is
// whole, and the next Compact replaces the leftover.
func TestCompactKilledBeforeSwap(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process and kills it; skipped with -short")
	}
	dir := t.TempDir()
	before := grow(t, dir, 5000, 10)
	path := filepath.Join(dir, state.FileName)
	size := fileSize(t, path)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCompactHelperProcess$")
	cmd.Env = append(os.Environ(), "STATE_COMPACT_HELPER_DIR="+dir)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper process: %v, want killed\n%s", err, out)
	}
	if _, err := os.Stat(path + ".compact"); err != nil {
		t.Fatalf("no compacted file left by the killed process: %v", err)
	}
	if got := fileSize(t, path); got != size {
		t.Errorf("state.db is %d bytes after the kill, was %d", got, size)
	}
	s, err := state.Open(dir, state.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(context.Background()); err != nil {
		t.Errorf("old file after the kill: %v", err)
	}
	if got := mustJSON(t, load(t, s)); got != before {
		t.Errorf("Load after the kill differs from before")
	}
	s.Close()

	if _, err := state.Compact(context.Background(), dir, state.Options{}); err != nil {
		t.Fatal(err)
	}
	s = statetest.OpenDir(t, dir, state.Options{NoSync: true})
	if got := mustJSON(t, load(t, s)); got != before {
		t.Errorf("Load after the second Compact differs from before")
	}
}

// TestCompactHelperProcess is not a test: TestCompactKilledBeforeSwap runs
// it to die between writing the compacted file and renaming it.
func TestCompactHelperProcess(t *testing.T) {
	dir := os.Getenv("STATE_COMPACT_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process for TestCompactKilledBeforeSwap; runs only when re-executed by it")
	}
	state.SetBeforeSwap(func(string) error {
		return syscall.Kill(os.Getpid(), syscall.SIGKILL)
	})
	_, err := state.Compact(context.Background(), dir, state.Options{})
	fmt.Println("Compact returned:", err)
}

// TestOpenDuringCompact: an Open that waited for the store's lock while
// Compact ran ends up on the new file, not on the old one Compact renamed
// away (whose writes nobody would ever read).
func TestOpenDuringCompact(t *testing.T) {
	dir := t.TempDir()
	grow(t, dir, 100, 10)
	opened := make(chan *state.Store, 1)
	restore := state.SetBeforeSwap(func(string) error {
		go func() {
			s, err := state.Open(dir, state.Options{NoSync: true, LockTimeout: 10 * time.Second})
			if err != nil {
				t.Error(err)
			}
			opened <- s
		}()
		// Give the Open time to block on the old file's lock. Without
		// it the Open only ever sees the new file: the test then passes
		// without proving anything, never wrongly fails.
		time.Sleep(100 * time.Millisecond)
		return nil
	})
	defer restore()
	if _, err := state.Compact(context.Background(), dir, state.Options{}); err != nil {
		t.Fatal(err)
	}
	s := <-opened
	if s == nil {
		t.FailNow()
	}
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("vpc", "written-after", "")}})
	s.Close()
	s = statetest.OpenDir(t, dir, state.Options{NoSync: true})
	if _, err := s.Resource(context.Background(), "vpc/written-after"); err != nil {
		t.Errorf("a commit by the Open that waited during Compact is lost: %v", err)
	}
}
