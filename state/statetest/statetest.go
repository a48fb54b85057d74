// Package statetest opens real state stores for tests: Open puts a store
// in t.TempDir() and, when the test ends, runs the store's full
// consistency check (reporting problems with t.Error) and closes it; Run
// is the conformance suite every state.Backend passes (suite.go; its
// tests in suite_tests.go, its model test in suite_model.go).
//
// Read first: Open, then Run and Opener.
package statetest

import (
	"context"
	"testing"

	"github.com/convergehq/converge/state"
)

// Open opens a store in a fresh t.TempDir() with fsync off (tests do not
// need durability against power loss; Commit is still one transaction).
// On cleanup it runs Check, reporting any inconsistency with t.Error, then
// Close.
func Open(t testing.TB) *state.Store {
	t.Helper()
	return OpenDir(t, t.TempDir(), state.Options{NoSync: true})
}

// OpenDir opens the store in dir with opts, checked and closed on cleanup
// like Open. Use it to reopen a store a test closed.
func OpenDir(t testing.TB, dir string, opts state.Options) *state.Store {
	t.Helper()
	s, err := state.Open(dir, opts)
	if err != nil {
		t.Fatalf("open state: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Check(context.Background()); err != nil {
			t.Errorf("state check after test: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("close state: %v", err)
		}
	})
	return s
}
