package state_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/statetest"
)

// TestCompactRacingWriters: Compacts run back to back while writers
// Open, commit one row each and Close. Every commit a writer saw succeed
// is in the store afterwards: no writer ever held a file the path no
// longer named (before the lock file, 18 to 21 rows of 40 were lost).
func TestCompactRacingWriters(t *testing.T) {
	dir := t.TempDir()
	grow(t, dir, 200, 50)
	const writers, rows, compactors = 4, 10, 2
	var acked sync.Map // row name -> true once its commit returned nil
	var stop atomic.Bool
	var wg, cwg sync.WaitGroup
	var compacted atomic.Int64
	for range compactors {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for !stop.Load() {
				_, err := state.Compact(context.Background(), dir, state.Options{NoSync: true, LockTimeout: 5 * time.Second})
				if err != nil && !errors.Is(err, state.ErrLocked) {
					t.Errorf("Compact: %v", err)
					return
				}
				if err == nil {
					compacted.Add(1)
				}
				// flock is not fair: a compactor that takes the lock
				// again at once can starve the writers (a shell loop
				// of `converge state gc` pauses to start a process).
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rows {
				name := fmt.Sprintf("w%d-%d", w, i)
				s, err := state.Open(dir, state.Options{NoSync: true, LockTimeout: 10 * time.Second})
				if err != nil {
					t.Errorf("Open: %v", err)
					return
				}
				err = s.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{res("vpc", name, "")}})
				if cerr := s.Close(); err == nil {
					err = cerr
				}
				if err == nil {
					acked.Store(name, true)
				}
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	cwg.Wait()
	if compacted.Load() == 0 {
		t.Fatal("no Compact ran between the writers: the test proves nothing")
	}
	s := statetest.OpenDir(t, dir, state.Options{NoSync: true})
	n, lost := 0, []string{}
	acked.Range(func(k, _ any) bool {
		n++
		if _, err := s.Resource(context.Background(), converge.NewID("vpc", k.(string))); err != nil {
			lost = append(lost, k.(string))
		}
		return true
	})
	if n != writers*rows {
		t.Errorf("%d of %d commits were acknowledged", n, writers*rows)
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d acknowledged rows are lost after %d compactions: %s", len(lost), n, compacted.Load(), strings.Join(lost, ", "))
	}
}

// TestOpenReinitWhileCommitting: an Open with Reinit beside a store that
// commits waits for the lock and returns ErrLocked; it never looks at the
// file (its size, then its meta pages) while a commit grows it, so it
// never takes a healthy store for a truncated one and moves nothing.
func TestOpenReinitWhileCommitting(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, state.FileName)
	s := statetest.OpenDir(t, dir, state.Options{NoSync: true})
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	var looked atomic.Int64
	defer state.SetBeforeMetaRead(func(string) { looked.Add(1) })()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			b := &converge.Batch{}
			for j := range 50 {
				b.Resources = append(b.Resources, res("vpc", fmt.Sprintf("r%03d-%02d", i, j), ""))
			}
			if err := s.Commit(context.Background(), b); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range 5 {
		_, err := state.Open(dir, state.Options{Reinit: true, LockTimeout: 20 * time.Millisecond})
		if !errors.Is(err, state.ErrLocked) {
			t.Fatalf("Open with Reinit beside a committing store: %v, want ErrLocked", err)
		}
	}
	<-done
	if n := looked.Load(); n != 0 {
		t.Errorf("Open read the file's meta pages %d times while another store held it", n)
	}
	after, err := os.Stat(path)
	if err != nil || !os.SameFile(before, after) {
		t.Errorf("state.db was moved or replaced: %v", err)
	}
	if aside, _ := filepath.Glob(path + ".damaged-*"); len(aside) > 0 {
		t.Errorf("files moved aside: %v", aside)
	}
}

// TestReplacedUnderStore: a state file replaced from outside while a
// Store holds it (a backup restored over a live store) turns the next
// commit and every later one into ErrReplaced, and Verify says so.
func TestReplacedUnderStore(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replace func(t *testing.T, path string)
	}{
		{"renamed over", func(t *testing.T, path string) {
			other := t.TempDir()
			o, err := state.Open(other, state.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			o.Close()
			if err := os.Rename(filepath.Join(other, state.FileName), path); err != nil {
				t.Fatal(err)
			}
		}},
		{"removed", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := state.Open(dir, state.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("vpc", "before", "")}})
			if err := s.Verify(context.Background()); err != nil {
				t.Fatalf("Verify of a held store: %v", err)
			}
			tc.replace(t, filepath.Join(dir, state.FileName))
			if err := s.Verify(context.Background()); !errors.Is(err, state.ErrReplaced) {
				t.Errorf("Verify after the file was replaced: %v, want ErrReplaced", err)
			}
			for i := range 2 {
				err := s.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{res("vpc", fmt.Sprint("after", i), "")}})
				if !errors.Is(err, state.ErrReplaced) {
					t.Errorf("commit %d after the file was replaced: %v, want ErrReplaced", i, err)
				}
			}
		})
	}
}

// TestLockFileStays: the lock file outlives the store and a Compact
// (removing it would let two opens lock two different files).
func TestLockFileStays(t *testing.T) {
	dir := t.TempDir()
	grow(t, dir, 10, 5)
	if _, err := state.Compact(context.Background(), dir, state.Options{NoSync: true}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, state.LockName))
	if err != nil {
		t.Fatalf("lock file: %v", err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("lock file mode %v, want 0600", perm)
	}
}
