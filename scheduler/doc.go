// Package scheduler is the DAG engine: it drives every resource of the
// graph to its declared state. It gates consumers on their producers,
// applies value flows, dispatches tasks within per-kind-version limits,
// retries with backoff, runs composition, rolls subtree health up to roots,
// fires reactors and tears down in reverse dependency order.
//
// It imports no third-party module. It consumes three small interfaces
// declared in ports.go: Store (durable state), Dispatcher (workers) and
// Validator (schemas).
package scheduler
