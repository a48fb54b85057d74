package controlplane

import (
	"testing"

	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
)

// sizedBackend is a backend that bounds its commits' rows.
type sizedBackend struct {
	state.Backend
	rows int
}

func (b sizedBackend) CommitRows() int { return b.rows }

// The store the scheduler writes through when the live site watches
// (observedStore) passes the backend's bound on a commit's rows on, so a
// big bbolt store's commits stay bounded under `converge serve` too.
func TestObservedStorePassesCommitRows(t *testing.T) {
	var st scheduler.Store = observedStore{Backend: sizedBackend{rows: 1024}}
	cs, ok := st.(scheduler.CommitSizer)
	if !ok || cs.CommitRows() != 1024 {
		t.Fatalf("observedStore over a backend asking for 1024 rows a commit: CommitSizer %v", ok)
	}
	if n := (observedStore{Backend: struct{ state.Backend }{}}).CommitRows(); n != 0 {
		t.Errorf("observedStore over a backend with no bound asks for %d rows, want 0", n)
	}
}
