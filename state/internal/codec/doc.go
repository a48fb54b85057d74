// Package codec is what every state backend shares so that they store and
// refuse the same things: the row format of a resource (owner, consumed
// edges, JSON; EncodeResource, SplitRow), the event chunk format
// (EncodeChunk), the key encodings (PairKey, KindKey) and the checks a
// Batch must pass before any backend reads its store (Validate). It
// imports no storage engine; state (bbolt) and state/etcdstate (etcd)
// both build on it.
//
// Read first: EncodeResource and SplitRow (the row), EncodeChunk (events),
// Validate (a batch's own checks).
package codec
