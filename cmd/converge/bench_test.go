package main

import (
	"errors"
	"strings"
	"testing"
)

// TestBenchCommitFailing runs bench on the classic example with a small
// BOM (real workers, a real store) while every commit after the applied
// revision's fails: the run must fail naming the failing commit, and the
// engine's error log must reach stderr, not vanish.
func TestBenchCommitFailing(t *testing.T) {
	repo, _ := classicRepo(t)
	out, err := runCLIWith(withFailingCommits(), "bench", "--runs", "1", "--transport", "10ms", "--dir", repo)
	if !errors.As(err, new(errFailed)) {
		t.Fatalf("bench: got %v, want exit 1\n%s", err, out)
	}
	want := "commit state: " + errDiskFull.Error()
	// Stuck, or (fast workers) converged in memory before the failing
	// commit's error arrived, so the final flush fails.
	stuck, flush := strings.Contains(err.Error(), "bench: stuck: "), strings.Contains(err.Error(), "bench: commit: ")
	if !stuck && !flush || !strings.Contains(err.Error(), want) {
		t.Errorf("bench error = %q, want it stuck or its last commit failed, naming %q", err, want)
	}
	if !strings.Contains(out, `level=ERROR msg="commit state" err="`+errDiskFull.Error()+`"`) {
		t.Errorf("the engine's error log is not on stderr:\n%s", out)
	}
}
