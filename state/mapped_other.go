//go:build !linux

package state

import bolt "go.etcd.io/bbolt"

// releaseSupported: releaseMapped works on this platform.
const releaseSupported = false

// releaseMapped is a no-op where madvise is not used.
func releaseMapped(*bolt.DB, int64) {}

// releaseTx is a no-op where madvise is not used.
func releaseTx(*bolt.Tx, int64) {}
