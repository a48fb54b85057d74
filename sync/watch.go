package sync

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchTree calls fn after files below dir change, until ctx ends: dev
// mode for `converge sync --watch`. It calls fn once as soon as the
// watches are in place, so a save made before that is not missed. Changes
// are debounced (a burst of saves calls fn once, debounce after the last),
// directories created later are watched too, and dot-directories (.git,
// .converge) are ignored. fn runs on WatchTree's goroutine. A directory
// that cannot be watched (say, the inotify watch limit is reached) ends
// the watch with an error rather than leaving its saves unseen.
func WatchTree(ctx context.Context, dir string, debounce time.Duration, fn func()) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	defer w.Close()
	add := func(root string) error {
		return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // vanished meanwhile
			}
			if !d.IsDir() {
				return nil
			}
			if p != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if err := watchAdd(w, p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("add %s: %w", p, err)
			}
			return nil
		})
	}
	if err := add(dir); err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	fn()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if hidden(dir, ev.Name) {
				continue
			}
			if ev.Has(fsnotify.Create) {
				if fi, err := os.Stat(ev.Name); err == nil && fi.IsDir() {
					if err := add(ev.Name); err != nil {
						return fmt.Errorf("watch %s: %w", dir, err)
					}
				}
			}
			timer.Reset(debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were lost (a big checkout): look again.
				timer.Reset(debounce)
				continue
			}
			return fmt.Errorf("watch %s: %w", dir, err)
		case <-timer.C:
			fn()
		}
	}
}

// watchAdd adds one directory to w; a variable so a test can make it
// fail as a full inotify table does.
var watchAdd = func(w *fsnotify.Watcher, p string) error { return w.Add(p) }

// hidden reports whether p is inside a dot-directory (or is a dot-file)
// below root.
func hidden(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return false
	}
	for _, part := range strings.Split(filepath.ToSlash(rel), "/") {
		if strings.HasPrefix(part, ".") && part != "." && part != ".." {
			return true
		}
	}
	return false
}
