// Package gittest makes real git repositories for tests, through the git
// CLI, with a fixed identity and an isolated HOME and configuration: the
// machine's ~/.gitconfig and /etc/gitconfig never change what a test sees.
//
// Read first: Run (one git command that fails the test on error) and Repo
// (a repository in t.TempDir() with the given files, committed once).
// Command is for the few calls that must not fail the test (a retry loop,
// a goroutine) or that feed git's standard input; Write puts files in a
// work tree, and Commit writes and commits them.
//
// The package imports nothing of converge, so package sync's own internal
// tests can use it.
package gittest
