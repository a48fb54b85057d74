//go:build !linux

package state

import bolt "go.etcd.io/bbolt"

// releaseMapped is a no-op where madvise is not used.
func releaseMapped(*bolt.DB) {}
