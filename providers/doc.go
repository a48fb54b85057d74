// Package providers is the control plane's side of the worker protocol:
// the gRPC Control service provider workers connect to, the
// scheduler.Dispatcher that routes tasks to them, and the supervisor that
// starts local worker processes.
//
// Read first: Server (service and Dispatcher), Supervisor (worker
// processes). Follower is a replica's worker service while another
// replica leads: it refuses workers, pointing them at the leader. MeasureTransport measures the raw gRPC and the protocol's
// round-trip rates, for benchmarks that report against them. Provider authors import providers/sdk instead; the example
// providers live in providers/classic.
//
// # Basics
//
// A worker dials the control plane (a unix socket made by ListenUnix, or a
// TCP port), presents `authorization: Bearer <token>` and holds one
// bidirectional stream (proto/converge/v1 Control.Connect). Its first
// message registers the (kind, kind_version, reactions) it serves and its
// concurrency. Dispatch routes a task by strict equality of kind, version
// and reaction to the serving worker with the most free capacity, never
// blocking: it returns converge.ErrNoWorker (wrapped) when none serves the
// task or all are full. Each stream has a sender goroutine that flushes the
// tasks queued for it in batches; results from every worker arrive on one
// buffered channel.
//
// # Caveats
//
// A worker that disconnects or sends nothing for WorkerTimeout is dropped:
// its queued and in-flight tasks get no result (the scheduler's leases
// expire and it re-dispatches them), and Changed is signalled. A result for
// a task the worker does not hold (a duplicate, or one from before a
// reconnect) is dropped, so Results delivers at most one result per task.
// An empty ServerOptions.Token refuses every worker. With
// ServerOptions.TLS, TCP listeners serve (mutual) TLS while unix sockets,
// owner-only, stay plain; workers set CONVERGE_TLS_CA, CONVERGE_TLS_CERT
// and CONVERGE_TLS_KEY (see providers/sdk). A failed TLS handshake (plain
// TCP, no client certificate) is logged to ServerOptions.Logger, since
// gRPC only closes the connection. converge serve sets TLS from its
// --workers-tls-* flags (docs/ARCHITECTURE.md, "Replicas and the leader").
package providers
