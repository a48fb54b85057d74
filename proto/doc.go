// Package proto holds converge's protocol definitions: the worker protocol
// in converge/v1/worker.proto and its generated Go code (package
// convergev1), checked in.
//
// Read first: converge/v1/worker.proto (the Control service's one stream,
// WorkerMessage and ControlMessage).
//
// Regenerate with `go generate ./proto/...` (runs gen.sh: pinned
// protoc-gen-go and protoc-gen-go-grpc installed into a temporary GOBIN,
// then protoc). TestGenerated fails when the checked-in code is stale.
package proto

//go:generate sh gen.sh
