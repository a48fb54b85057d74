// Package scheduler is the DAG engine: it drives every resource of the
// graph to its declared state. It gates consumers on their producers,
// applies value flows, dispatches tasks within per-kind-version limits,
// retries with backoff, runs composition, rolls subtree health up to roots,
// fires reactors and tears down in reverse dependency order.
//
// It imports no third-party module. It consumes three small interfaces
// declared in ports.go: Store (durable state), Dispatcher (workers) and
// Validator (schemas).
//
// Read first: Scheduler (New, Run, Apply, Delete, Do, Progress, Problems,
// Flush), Config, Plan and Diff; then the loop's parts (resourceGraph,
// leases, batcher, reactors) and a node's lifecycle (nodestate.go).
//
// # Basics
//
// One goroutine, Run, owns all mutable state. Apply, Delete, Do, Problems
// and Flush send it a closure and wait (while Run is not running they run
// the closure themselves); Progress reads a copy Run publishes after every
// step. Run's inputs are the dispatcher's Results and Changed channels,
// one timer (retries, lease expiry, resyncs, reactor retries, the next
// flush) and those commands.
//
// # Parts
//
// The loop's state is four parts, each a struct the Scheduler holds,
// with its own files and tests; a part's methods touch only its own
// state (and the nodes it is handed), the Scheduler's methods join them.
// They are not concurrent: Run owns them all.
//
//   - resourceGraph (graph.go): the nodes, the edges by consumer and by
//     producer, the rows git declares, the phase counts and the checks
//     that read only those (flowsApplied, hasLiveConsumer,
//     teardownReason).
//   - leases (leases.go, leases_timers.go; dispatch.go joins): the ready
//     queue, the parked, each KindRef's slots and waiting list, the
//     tasks out with workers, the timer heap and the resync buckets.
//   - batcher (batch.go; flush.go builds and commits): every pending
//     write (rows new and updated, rollups, reasons, edges, deliveries,
//     events) and the commit in flight.
//   - reactors (reactor.go): the bindings, the owed deliveries and the
//     dedup of done ones.
//
// The joins: phase.go (a node's phase, reason and dirty marks: counts,
// owners' holds, pending writes), load.go (New's snapshot), dispatch.go,
// compose.go, delete.go, apply.go.
//
// A node (graph.go) is one per resource, a million at scale: its
// lifecycle is one nodeState (free, parked, blocked, backoff, removed),
// changed only through node.to, which checks the transition in tests
// and in a build with the schedcheck tag; its other flags are nodeMarks,
// a bit set (nodestate.go has the diagram).
//
// Group commit: every change marks its resource dirty; dirty rows, edge
// and delivery changes and events are written as a converge.Batch every
// Config.FlushInterval, or as soon as Config.MaxBatch rows are dirty. A row
// changed three times between flushes is written once; the classic graph
// costs about 3–4 puts per resource from create to Ready. A batch holds at
// most Config.MaxCommit rows and events: changes of stored rows first,
// then new rows in the order they were made (owners before their
// children, consumers with their edges), the rest in later batches.
//
// Results pass through a stage of checker goroutines (Run) that check
// each status against its kind version's schema before the loop sees it.
//
// A resource is eligible when it is not Deleting, not leased, not in
// backoff, not permanently failed at its generation, and every producer
// it consumes is Ready at its current generation; it then runs its main
// reaction (compose if its kind declares it, else reconcile). Before it
// runs, its Spec is recomputed as Declared plus every value flow; a
// changed Spec of a resource that ran before bumps its generation, so a
// changed producer value re-triggers its consumers. A dispatched task
// leases the resource until the kind's task_deadline (or Config.LeaseTTL);
// a lease that expires counts as a transient failure. Leases are not
// written before dispatch: after a crash every lease is treated as
// expired and the task runs again (reactions are idempotent).
//
// Failures: a transient one is retried after exponential backoff with
// full jitter (reason "retrying in 1.2s: msg"); a permanent one stops the
// resource until its declared spec (generation) changes (reason
// "permanent: msg"; stored as phase Failed with no NextAttempt). A
// resource whose (kind, version) and reaction no connected worker serves
// parks with reason "no worker serves vpc/v3" until Changed.
//
// Composition: a compose result is checked whole (every child validated,
// no collision with a resource owned by someone else, no duplicate, no
// edge cycle, no more than the kind's max_children) before anything of it is applied;
// then children are created, updated (generation bump) or kept untouched,
// the rest pruned through cascade delete, and the edges whose consumer is
// one of the children replaced. A composer is Ready when its compose
// succeeded for its generation and every descendant is Ready; its status
// carries "rollup" counts of its whole subtree, kept incrementally on
// every phase change and written at most once per flush. What its row
// records of its work (observed at its generation, Ready) is written
// only once every child's row, as that work left it, is durable; until
// then the row says neither (graph.go, recount and maskHeld), so a
// crash between the batches of a big composition never leaves a store
// that records a composition its children's rows do not hold.
//
// Drift (drift.go): a resync of a Ready leaf whose kind declares observe
// dispatches observe instead of reconcile; what differs from the spec is
// recorded on the row (Resource.Drift, with a Drifted event), then healed
// by a reconcile at once or, under drift_policy report, kept with the
// resource Ready and a reason saying so. Refresh and Observe answer plan
// --refresh without applying anything.
//
// Reactors: a binding's transition (synced, failed, deleted) creates a
// converge.Delivery keyed binding/uid/generation/transition in the same
// batch as the transition; an existing key is never created again, so a
// reactor fires once per transition (at least once: deliveries are
// retried and survive restarts). A delivery is dispatched only once the
// batch holding its row is committed (a transactional outbox): a
// process or term that ends before the commit has sent nothing, and
// the next one sends a stored row's key and body as they were. A done delivery is kept only while that
// transition could happen again: it is deleted once its subject is
// deleted or a newer generation of it fires the same binding, and in
// memory only owed deliveries are held whole (reactor.go, "Retention").
//
// Cascade delete marks a teardown tree (the resource, what it owns, what
// consumes any of those, transitively); a marked resource is torn down
// once nothing still consumes it and it owns nothing, through its kind's
// teardown reaction when the kind has a finalizer. Deleting a composed
// resource does not outlast its owner's wish: once the teardown tree is
// gone, the owner recomposes (a new generation, written with the removal),
// so a child it still emits comes back at once with a new uid.
//
// # Caveats
//
// A Store must not keep references into a Batch after Commit returns:
// the rows are the scheduler's live ones. A failed Commit keeps
// everything pending and is retried; it is logged, not fatal. Rows the
// store refuses (a converge.RejectedError) are taken out of the batch and
// their resources fail with the store's reason; the rest is committed.
//
// A superseded delivery is deleted in a batch no earlier than its
// subject's newer row, except when the store refuses that row: the row
// is written again (without the refused data) in the next batch, and a
// crash in between could fire the old generation's transition once more.
//
// Lease.Worker is left empty: the Dispatcher port does not say which
// worker took a task.
//
// A composed child that is still being torn down when its owner
// recomposes is not re-created by that compose: the owner composes again
// once the teardown is done; so is a new child that would consume one
// (it would hold that teardown up while waiting for it). After a restart every child being torn down
// under a live owner counts as wanted (the store does not say whether an
// operator deleted it or its owner pruned it), which costs a pruning
// owner one compose more.
//
// A git resource declared again while it is torn down is created again,
// with the newest declaration, when its row goes; a revision that
// removes it again before that cancels it.
package scheduler
