//go:build !unix

package site

// openFileLimit is how many files the process may hold open, or 0 when
// unknown (here).
func openFileLimit() int { return 0 }
