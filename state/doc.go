// Package state is converge's durable store: every fact the control plane
// must not lose, in one bbolt file, each change one transaction. It is the
// only package that imports go.etcd.io/bbolt; no *bbolt.Tx ever leaves it.
//
// Read first: Store (Open, Commit, Load) and Options. Store implements the
// scheduler's Store port: Load returns a converge.Snapshot, Commit applies
// one converge.Batch atomically and durably. Backend is the contract every
// state backend implements (this Store, and state/etcdstate's over etcd);
// statetest.Run is the conformance suite that holds them to it.
//
// # Basics
//
// The store lives in DIR/state.db (mode 0600, DIR 0700) and is locked by
// one process through DIR/state.db.lock (LockName), a file that is never
// replaced; a second Open waits Options.LockTimeout and then returns
// ErrLocked. Everything that looks at the state file's identity, checks
// it for damage, commits to it or replaces it (Compact, Options.Reinit,
// CloseAndMoveAside) holds that lock, so a Store always has open the
// file its path names. A file replaced from outside (a backup restored
// over a live store) is caught after the next commit: ErrReplaced, from
// that commit and every later one, and from Verify. Buckets:
//
//	resources   ID -> row: owner, the edges it consumes (with flows), resource JSON
//	owners      owner\x00bound -> a chunk of up to 128 child IDs (the owner index, see rules.Chunked;
//	            roots under the empty owner, so listing them reads no other row)
//	producers   producer\x00consumer -> empty (the reverse edge index)
//	kinds       kind\x00version(8 bytes big-endian) -> JSON kind
//	configs     name -> JSON provider config
//	bindings    name -> JSON binding
//	deliveries  key -> JSON delivery (the reactor outbox)
//	events      first seq (8 bytes big-endian) -> one chunk: every event of one Batch
//	revisions   hash -> JSON revision record
//	meta        format, applied, events (last seq and count)
//	specs       ID -> a declared spec of rules.ApartSize (256 KiB) or more, kept apart from its
//	            row, which holds its digest: a BOM root's row rewritten for its rollup is bytes
//
// The scheduler group-commits: it coalesces many changes into one Batch
// every few milliseconds. The store keeps a big batch cheap: a put whose
// bytes equal what is stored is skipped, the owner index is written only
// when a resource's owner changes and then as chunks of children (500 new
// children of one owner cost about four puts), a resource put several
// times in one batch is written once, the events of one batch are one
// value, and the edges a resource consumes live in its own row, so an
// edge written with its consumer costs one put (its reverse-index entry),
// not two.
// Stats counts commits, puts, deletes and bytes exactly.
//
// Values are JSON of the domain types, so a store is readable with any
// bbolt tool. Resources and event chunks, written on every change, go
// through a reflection-free encoder (internal/codec/resjson.go, shared with every backend) whose output is
// byte-identical to encoding/json and about 2.5 times cheaper; a test
// fails if converge.Resource, Lease or Event gains a field it does not
// know. Resource rows and their edges are read back by a reflection-free
// decoder (resdecode.go, about 3 times cheaper) that decodes what
// converge writes exactly as encoding/json does and hands anything else
// (an unknown or differently cased key, a key twice, a wrong type) to
// encoding/json; fuzz targets check it against the standard library.
// Filter.Head skips a resource's declared spec, spec and status without
// copying them, for lists that do not show them. Keys of one batch are
// applied in key order.
//
// # Rules a Batch must follow
//
// Commit rejects, with an error naming the offender and leaving nothing
// behind: a resource with an empty kind or name, a kind containing "/", a
// name containing "/", or either containing NUL; an ID both put and
// deleted; an edge with an invalid endpoint, a self edge put, or an edge
// both put and deleted; an edge whose consumer does not exist after the batch;
// a resource whose owner does not exist after the batch; deleting a
// resource that still owns a resource after the batch; a delivery key
// both put and deleted; an event Seq not above the stored last Seq. Puts are applied before deletes. Deleting a
// resource also removes its owner-index entry and the edges it consumes;
// edges other resources consume from it stay, naming a producer that is
// gone (its consumers stay gated until it exists again). Deleting what is
// absent is a no-op.
//
// Refusals that belong to one resource (its name, its JSON, its owner)
// come back together as a *converge.RejectedError listing every refused
// row, so a caller can take them out and commit the rest in one more
// round; any other refusal is a plain error.
//
// An edge's producer need not exist: a consumer may depend on something
// not (yet) declared and stays gated, visibly. Check therefore requires an
// edge's consumer to exist, and not its producer.
//
// # Retention
//
// Nothing the store holds grows without bound (docs/ARCHITECTURE.md,
// "Retention"). Events: the newest Options.MaxEvents (default 200,000),
// trimmed by whole chunks, oldest first, in the transaction that appends.
// Revision records: the newest Options.MaxRevisions by Seen (default
// 1,000) plus the applied revision's, trimmed by PutRevision and by a
// Commit holding one (Batch.Record). Reactor deliveries: whatever the
// scheduler keeps; it deletes them through Batch.DeletedDeliveries. Resources, edges, kinds, configs and bindings
// are the desired and observed state itself.
//
// bbolt never shrinks its file: deleted pages are reused, not returned.
// Compact copies the store into a fresh file and swaps it in (`converge
// state gc`).
//
// # Caveats
//
// Reads (Resources, Events, Revisions, …) each run in their own read
// transaction; two reads are not one snapshot unless you call Load. Events
// and Revisions scan their buckets: fine for the CLI and the site, not for
// a hot loop.
//
// Only a missing state.db starts a fresh store. Open refuses a file that
// exists but is empty, shorter than its meta page's page count, with a
// meta page that is not valid, a freelist or root page that is not one,
// a bucket whose first or last pages cannot be read, or that is not a
// bbolt file (ErrDamaged), and leaves it as it is; Options.Reinit moves
// it aside. Damage deeper in the file shows when a read or a commit
// reaches it (ErrDamaged too, never a panic), or in Check.
package state
