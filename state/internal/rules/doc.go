// Package rules is the store's rules, written once for every backend:
// what a Batch does to the rows, the owner index, the edges and their
// reverse index, events, deliveries and revision records (Commit); every
// read and its order (Load, Resources, Events, …); and the consistency
// check (Check). It is written over a small transactional key-value
// store, as litestream keeps its replication once over a ReplicaClient.
//
// Read first: KV (View and Update, with a Reader and a Writer over named
// Buckets), which a backend implements, and Store, which holds the rules
// over a KV and implements state.Backend's reads, Commit and Check. The
// bbolt store (package state) and the etcd store (package etcdstate)
// are layers below it: a bbolt transaction, or an etcd revision read and
// a write overlay committed in one transaction or through a journal.
// What differs between them above the KV is in Options: the owner
// index's layout (Chunked or PerChild), a row's size limit, the size of
// an event chunk.
//
// It imports neither bbolt nor the etcd client (deps_test.go); the row,
// chunk and key encodings it writes are state/internal/codec's.
package rules
