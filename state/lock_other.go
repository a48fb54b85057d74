//go:build !unix

package state

import "os"

// tryLock is a no-op where flock is not available: bbolt's own lock of
// the state file is then the only one.
func tryLock(*os.File) (bool, error) { return true, nil }
