package scheduler

import (
	"context"
	"encoding/json"

	"github.com/convergehq/converge"
)

// Store is the durable state the scheduler writes through. The state
// package implements it over bbolt (and state/etcdstate over etcd); a
// Batch is one transaction.
type Store interface {
	// Load returns everything stored.
	Load(ctx context.Context) (*converge.Snapshot, error)
	// Commit applies b atomically and durably.
	Commit(ctx context.Context, b *converge.Batch) error
}

// CommitSizer is a Store that bounds the rows of the next Commit
// (state.Store does once its file is big: each row a commit changes
// maps a page of the file into memory): the scheduler writes at most
// the smaller of it and Config.MaxCommit rows, and as many deletions, a
// batch. CommitRows returns 0 for no bound.
type CommitSizer interface {
	CommitRows() int
}

// StreamLoader is a Store that can hand its resources over one at a time
// (state.Backend.LoadStream). New prefers it: each row is packed as it
// arrives, so a start never holds a million decoded rows at once.
type StreamLoader interface {
	LoadStream(ctx context.Context, begin func(*converge.Snapshot, int) error, each func(*converge.Resource) error) (*converge.Snapshot, error)
}

// Dispatcher delivers tasks to workers and their results back. The
// providers package implements it over gRPC; tests may fake it.
type Dispatcher interface {
	// Serves reports whether a connected worker serves reaction for ref.
	Serves(ref converge.KindRef, reaction string) bool
	// Dispatch hands t to a worker serving t's KindRef and reaction. It
	// returns converge.ErrNoWorker (wrapped) when none is connected or all are at
	// capacity; it never blocks on a worker.
	Dispatch(ctx context.Context, t *converge.Task) error
	// Results delivers every result, once per dispatched task at most.
	// A task whose worker vanished gets no result: its lease expires.
	Results() <-chan *converge.Result
	// Changed is signalled (non-blocking, coalesced) when workers connect,
	// disconnect or free capacity.
	Changed() <-chan struct{}
}

// Validator checks specs and statuses against a kind version's schemas.
// The cue package implements it; the scheduler uses it for composed
// children and for every status a worker returns.
type Validator interface {
	// ValidateSpec returns an error naming the field path if spec does not
	// satisfy ref's spec schema, or if ref is unknown.
	ValidateSpec(ref converge.KindRef, spec json.RawMessage) error
	// ValidateStatus is ValidateSpec for a status (paths start with
	// "status.").
	ValidateStatus(ref converge.KindRef, status json.RawMessage) error
}

// PendingValidator is a Validator that also checks a spec whose flowed
// fields are "known after apply". The cue package implements it; with a
// Validator that does not, a composed child must carry every field its
// schema requires.
type PendingValidator interface {
	// ValidateSpecPending is ValidateSpec where a required field at one
	// of pending (a value flow's To path) may be absent: a flow fills it
	// once its producer is Ready, and the flowed value is checked then.
	ValidateSpecPending(ref converge.KindRef, spec json.RawMessage, pending []string) error
}

// LocalComposer composes some kinds in the control plane: a kind whose
// compose is a CUE expression. Their compose and teardown reactions go
// to it instead of a worker; its answer is applied like a worker's (the
// same checks, rollup, prune guard and max_children). The cue package's
// Schemas implements it; the scheduler takes it from the Validator
// Apply is given.
type LocalComposer interface {
	// Composes reports whether ref's compose is evaluated here.
	Composes(ref converge.KindRef) bool
	// Compose answers t, a compose or teardown task of such a kind. It
	// is safe for concurrent use and may take a while (it runs off the
	// loop).
	Compose(t *converge.Task) *converge.Result
}
