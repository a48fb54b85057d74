package state

import "github.com/convergehq/converge/state/internal/codec"

// The row, key and chunk encodings and the batch checks are shared with
// every other backend (state/internal/codec); these names keep this
// package's code reading as it did when they lived here.
type (
	row        = codec.Row
	storedEdge = codec.StoredEdge
)

var (
	encodeResource     = codec.EncodeResource
	splitRow           = codec.SplitRow
	decodeResource     = codec.DecodeResource
	decodeResourceHead = codec.DecodeResourceHead
	decodeEdges        = codec.DecodeEdges
	encodeEdges        = codec.EncodeEdges
	pairKey            = codec.PairKey
	prefixKey          = codec.PrefixKey
	splitPair          = codec.SplitPair
	kindKey            = codec.KindKey
	encodeChunk        = codec.EncodeChunk
	chunkLen           = codec.ChunkLen
	decodeChunk        = codec.DecodeChunk
	checkID            = codec.CheckID
	chunkSeq           = codec.ChunkSeq
	validate           = codec.Validate
	resourceNeedle     = codec.ResourceNeedle
)
