package state

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// LockName is the name of the lock file beside the state file. Every
// Store (and so Compact, and CloseAndMoveAside) holds its lock while it reads the state
// file's identity, checks it for damage, commits to it or replaces it.
//
// The lock is a file of its own, never renamed or removed, because the
// state file itself is replaced: Compact renames a fresh copy over it and
// Options.Reinit moves a damaged one aside. A lock on the state file (as
// bbolt's own flock is) would then be a lock on a file the path no longer
// names, and whoever waited for it would go on writing to a file nobody
// reads again. bbolt still takes its flock as well; with this lock held
// it is never contended by another converge.
const LockName = FileName + ".lock"

// lockPollEvery is how often a waiting Open tries the lock again.
const lockPollEvery = 20 * time.Millisecond

// fileLock is a held lock file; release gives it up.
type fileLock struct{ f *os.File }

// acquireLock takes the exclusive lock of the file at path, creating it
// (0600), and waits until deadline for another holder to let go; then it
// returns ErrLocked, wrapped with stateFile (the file the lock guards).
// timeout is how long it waits.
func acquireLock(path, stateFile string, timeout time.Duration) (*fileLock, error) {
	deadline := time.Now().Add(timeout)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open state: lock: %w", err)
	}
	for {
		ok, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("open state: lock %s: %w", path, err)
		}
		if ok {
			return &fileLock{f: f}, nil
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("open state: %s: %w (waited %v)", stateFile, ErrLocked, timeout)
		}
		time.Sleep(lockPollEvery)
	}
}

// release gives the lock up (closing the file releases the flock).
func (l *fileLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// ErrReplaced is returned when the state file a Store holds is no longer
// the file its path names: something moved, removed or replaced
// state.db while this process had it open (a backup restored over a
// live store, say). Whatever this Store committed since went to a file
// nobody reads, so it must not report success; the wrapping error names
// the path.
var ErrReplaced = errors.New("state.db was replaced while this process held it")

// sameFile reports whether path still names the file f has open: nil, or
// ErrReplaced (wrapped, naming path and what is there now).
func sameFile(f *os.File, path string) error {
	held, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%s: stat open file: %w", path, err)
	}
	now, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w (the path names no file now)", path, ErrReplaced)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !os.SameFile(held, now) {
		return fmt.Errorf("%s: %w (the path names another file now)", path, ErrReplaced)
	}
	return nil
}
