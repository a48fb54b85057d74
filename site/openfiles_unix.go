//go:build unix

package site

import "syscall"

// openFileLimit is how many files the process may hold open (its soft
// RLIMIT_NOFILE, which the Go runtime raises to the hard limit), or 0
// when unknown.
func openFileLimit() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return int(min(l.Cur, 1<<20))
}
