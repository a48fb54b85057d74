package state

import "github.com/convergehq/converge"

// Backend is the store contract every state backend implements: Store
// here (bbolt, the embedded default) and state/etcdstate's (etcd). Its
// semantics are this package's documentation, and one conformance suite
// (statetest.Run) holds every backend to them. The scheduler needs only
// Load and Commit (its Store port); the commands, the site and the admin
// API read through the rest.
type Backend interface {
	// Load returns everything stored, as one consistent snapshot.
	Load() (*converge.Snapshot, error)
	// Commit applies b atomically and durably, or refuses it whole
	// (package documentation, "Rules a Batch must follow").
	Commit(b *converge.Batch) error

	Resource(id converge.ID) (*converge.Resource, error)
	Resources(f Filter) ([]*converge.Resource, error)
	ResourcesAfter(kind string, after converge.ID, limit int) ([]ResourceRow, error)
	// ResourceHeadsAfter is ResourcesAfter without each resource's
	// declared spec, spec and status.
	ResourceHeadsAfter(kind string, after converge.ID, limit int) ([]ResourceRow, error)
	// ResourcesByID returns the resources ids name, in ids' order, from
	// one consistent read; nil for an id the store does not hold.
	ResourcesByID(ids []converge.ID) ([]*converge.Resource, error)
	Children(owner converge.ID) ([]converge.ID, error)
	ChildCount(owner converge.ID) (int, error)
	Counts(owner converge.ID) (converge.Counts, error)
	EdgesOf(id converge.ID) (consumes, producedFor []converge.Edge, err error)
	Events(resource converge.ID, limit int) ([]converge.Event, error)
	Kinds() ([]*converge.Kind, error)
	Configs() ([]*converge.ProviderConfig, error)
	Bindings() ([]*converge.Binding, error)
	Deliveries() ([]*converge.Delivery, error)
	Applied() (*converge.Revision, error)
	Source() (*converge.AppliedSource, error)
	PutSource(src *converge.AppliedSource) error
	// Control returns the operator's pin and suspensions (the zero
	// Control when none were recorded); PutControl replaces them.
	Control() (*converge.Control, error)
	PutControl(c *converge.Control) error
	Revision(hash string) (*converge.RevisionRecord, error)
	PutRevision(rec *converge.RevisionRecord) error
	Revisions(limit int) ([]*converge.RevisionRecord, error)

	// Check runs the backend's full consistency check and returns every
	// problem found, or nil.
	Check() error
	// Stats returns the counters of committed writes since the store was
	// opened (fields a backend cannot measure stay zero).
	Stats() Stats
	// Verify reports whether what this store committed is still where
	// readers will find it: nil, or why not (bbolt: the path names
	// another file, ErrReplaced; etcd: the writer's lock, the
	// leadership or the prefix is gone, etcdstate.ErrFenced). A
	// command verifies before it reports success.
	Verify() error
	// Close releases the store (and its writer's lock, if it holds one).
	Close() error
}

var _ Backend = (*Store)(nil)
