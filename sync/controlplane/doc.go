// Package controlplane runs converge's control plane: what `converge
// sync`, `serve`, `delete` and `do` keep running while they change state,
// as a library that cmd/converge wires to its flags and output (as Flux
// keeps its reconcilers out of main.go).
//
// Read first: Engine (Start: the store, the worker service, the scheduler,
// the worker processes and the admin API; Close flushes and stops them),
// Engine.Syncer (a sync.Syncer bound to the engine, everything it needs
// given up front) and Engine.Follow (the daemon's loop: fetch on a timer,
// a trigger or a reconcile, give each new commit its verdict, apply the
// newest good one, judge its convergence; FollowEvents hears it all).
// Terms runs a replica's leadership terms on etcd (an engine per term,
// a ConnSwitch handing the workers listener to the leader's engine or a
// follower's refusal, and its operators' intents carried out through the
// engine's admin API: intents.go; DialLeader is the operator's side). Statuses is the status push: every verdict to its
// commit's git note, a forge's commit-status API and origin's notes ref.
//
// # Basics
//
// Nothing here writes a command's output: what a command shows comes
// back as return values and as calls of FollowEvents and TermEvents,
// which cmd/converge turns into its lines, its readiness and its metrics
// (the Prometheus collectors stay in cmd, reading Engine.Scheduler and
// Engine.Control). The one writer it is given is Statuses.Records', for
// a git note it could not write.
// Errors opening the state say "open state:" once (OpenError).
//
// # Caveats
//
// An Engine holds the store's writer lock (bbolt's file lock, or etcd's
// writer key) from Start to Close: a second engine on the same state is
// refused. Start sets a soft memory limit of at least 832 MiB, two
// fifths above the live heap when that is more, unless GOMEMLIMIT is
// set (see the comment of defaultMemoryLimit).
package controlplane
