package site

import (
	"context"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
)

// Reader is what the site reads from the store. *state.Store implements
// it; every call is its own read transaction.
type Reader interface {
	// Resources returns the resources matching f, sorted by ID.
	Resources(ctx context.Context, f state.Filter) ([]*converge.Resource, error)
	// ResourcesAfter returns up to limit resources of kind ("" for all)
	// after the ID after, in ID order, each with the edges it consumes.
	ResourcesAfter(ctx context.Context, kind string, after converge.ID, limit int) ([]state.ResourceRow, error)
	// ResourceHeadsAfter is ResourcesAfter without each resource's
	// declared spec, spec and status.
	ResourceHeadsAfter(ctx context.Context, kind string, after converge.ID, limit int) ([]state.ResourceRow, error)
	// Resource returns id, or an error wrapping converge.ErrNotFound.
	Resource(ctx context.Context, id converge.ID) (*converge.Resource, error)
	// ResourcesByID returns the resources ids name, in ids' order, from
	// one read transaction; nil for an id the store does not hold.
	ResourcesByID(ctx context.Context, ids []converge.ID) ([]*converge.Resource, error)
	// Children returns the IDs owner owns directly, sorted.
	Children(ctx context.Context, owner converge.ID) ([]converge.ID, error)
	// EdgesOf returns the edges id consumes and those it is produced for.
	EdgesOf(ctx context.Context, id converge.ID) (consumes, producedFor []converge.Edge, err error)
	// Events returns the newest limit events of resource ("" for all),
	// oldest first; limit 0 returns every event kept.
	Events(ctx context.Context, resource converge.ID, limit int) ([]converge.Event, error)
	// Kinds returns every kind.
	Kinds(ctx context.Context) ([]*converge.Kind, error)
	// Revisions returns the newest limit revision records, newest first.
	Revisions(ctx context.Context, limit int) ([]*converge.RevisionRecord, error)
	// Applied returns the applied revision, or nil if none.
	Applied(ctx context.Context) (*converge.Revision, error)
}

var _ Reader = (*state.Store)(nil)

// ControlReader is implemented by a Reader that keeps the operator's pin
// and suspensions (*state.Store): the site then shows them.
type ControlReader interface {
	Control(ctx context.Context) (*converge.Control, error)
}

var _ ControlReader = (*state.Store)(nil)
