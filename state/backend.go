package state

import (
	"context"

	"github.com/convergehq/converge"
)

// Backend is the store contract every state backend implements: Store
// here (bbolt, the embedded default) and state/etcdstate's (etcd). Its
// semantics are this package's documentation, and one conformance suite
// (statetest.Run) holds every backend to them. The scheduler needs only
// Load and Commit (its Store port); the commands, the site and the admin
// API read through the rest. Every call but Stats and Close takes the
// context it runs under: a backend across a network stops waiting when
// it is done.
type Backend interface {
	// Load returns everything stored, as one consistent snapshot.
	Load(ctx context.Context) (*converge.Snapshot, error)
	// LoadStream is Load handing the resources to each one at a time,
	// in ID order, after begin is given the rest (but the edges) and
	// their number; the snapshot returned has the edges too. A read
	// retried from its start calls begin again.
	LoadStream(ctx context.Context, begin func(*converge.Snapshot, int) error, each func(*converge.Resource) error) (*converge.Snapshot, error)
	// Commit applies b atomically and durably, or refuses it whole
	// (package documentation, "Rules a Batch must follow").
	Commit(ctx context.Context, b *converge.Batch) error

	Resource(ctx context.Context, id converge.ID) (*converge.Resource, error)
	// ResourceHead is Resource without the declared spec, spec and
	// status.
	ResourceHead(ctx context.Context, id converge.ID) (*converge.Resource, error)
	Resources(ctx context.Context, f Filter) ([]*converge.Resource, error)
	ResourcesAfter(ctx context.Context, kind string, after converge.ID, limit int) ([]ResourceRow, error)
	// ResourceHeadsAfter is ResourcesAfter without each resource's
	// declared spec, spec and status.
	ResourceHeadsAfter(ctx context.Context, kind string, after converge.ID, limit int) ([]ResourceRow, error)
	// ResourcesByID returns the resources ids name, in ids' order, from
	// one consistent read; nil for an id the store does not hold.
	ResourcesByID(ctx context.Context, ids []converge.ID) ([]*converge.Resource, error)
	Children(ctx context.Context, owner converge.ID) ([]converge.ID, error)
	ChildCount(ctx context.Context, owner converge.ID) (int, error)
	Counts(ctx context.Context, owner converge.ID) (converge.Counts, error)
	EdgesOf(ctx context.Context, id converge.ID) (consumes, producedFor []converge.Edge, err error)
	Events(ctx context.Context, resource converge.ID, limit int) ([]converge.Event, error)
	Kinds(ctx context.Context) ([]*converge.Kind, error)
	Configs(ctx context.Context) ([]*converge.ProviderConfig, error)
	Bindings(ctx context.Context) ([]*converge.Binding, error)
	Deliveries(ctx context.Context) ([]*converge.Delivery, error)
	Applied(ctx context.Context) (*converge.Revision, error)
	Source(ctx context.Context) (*converge.AppliedSource, error)
	PutSource(ctx context.Context, src *converge.AppliedSource) error
	// Control returns the operator's pin and suspensions (the zero
	// Control when none were recorded); PutControl replaces them.
	Control(ctx context.Context) (*converge.Control, error)
	PutControl(ctx context.Context, c *converge.Control) error
	Revision(ctx context.Context, hash string) (*converge.RevisionRecord, error)
	PutRevision(ctx context.Context, rec *converge.RevisionRecord) error
	Revisions(ctx context.Context, limit int) ([]*converge.RevisionRecord, error)

	// Check runs the backend's full consistency check and returns every
	// problem found, or nil.
	Check(ctx context.Context) error
	// Stats returns the counters of committed writes since the store was
	// opened (fields a backend cannot measure stay zero).
	Stats() Stats
	// Verify reports whether what this store committed is still where
	// readers will find it: nil, or why not (bbolt: the path names
	// another file, ErrReplaced; etcd: the writer's lock, the
	// leadership or the prefix is gone, etcdstate.ErrFenced). A
	// command verifies before it reports success.
	Verify(ctx context.Context) error
	// Close releases the store (and its writer's lock, if it holds one).
	Close() error
}

var _ Backend = (*Store)(nil)
