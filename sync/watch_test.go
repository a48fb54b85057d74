package sync

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

func TestWatchTree(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, ".git"), 0o755)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int32
	fired := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() {
		done <- WatchTree(ctx, dir, 50*time.Millisecond, func() {
			calls.Add(1)
			fired <- struct{}{}
		})
	}()
	wait := func(what string) {
		t.Helper()
		select {
		case <-fired:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no callback within 5s", what)
		}
	}
	wait("watches in place")
	// A burst of writes is one callback.
	for i := 0; i < 5; i++ {
		os.WriteFile(filepath.Join(dir, "a.cue"), []byte{byte('a' + i)}, 0o644)
	}
	wait("burst")
	// A new directory is watched, and a file in it noticed.
	os.MkdirAll(filepath.Join(dir, "kinds"), 0o755)
	wait("mkdir")
	os.WriteFile(filepath.Join(dir, "kinds", "vpc.cue"), []byte("x"), 0o644)
	wait("file in new directory")
	// Changes inside .git are ignored.
	os.WriteFile(filepath.Join(dir, ".git", "index"), []byte("x"), 0o644)
	select {
	case <-fired:
		t.Fatal("a change inside .git triggered a callback")
	case <-time.After(300 * time.Millisecond):
	}
	if got, want := calls.Load(), int32(4); got != want {
		t.Errorf("callbacks %d, want %d", got, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A new directory that cannot be watched (the inotify table is full) ends
// the watch with an error naming it, instead of missing its saves.
func TestWatchTreeAddFails(t *testing.T) {
	dir := t.TempDir()
	full := errors.New("no space left on device")
	orig := watchAdd
	watchAdd = func(w *fsnotify.Watcher, p string) error {
		if filepath.Base(p) == "kinds" {
			return full
		}
		return orig(w, p)
	}
	t.Cleanup(func() { watchAdd = orig })
	ready := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() {
		done <- WatchTree(context.Background(), dir, 50*time.Millisecond, func() { ready <- struct{}{} })
	}()
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("watches not in place within 5s")
	}
	if err := os.Mkdir(filepath.Join(dir, "kinds"), 0o755); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, full) || !strings.Contains(err.Error(), "kinds") {
			t.Errorf("WatchTree = %v, want the add error naming kinds", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WatchTree went on after a directory could not be watched")
	}
}
