#!/bin/sh
# gen.sh regenerates the Go code for proto/converge/v1 with pinned
# generators. Run it through `go generate ./proto/...`.
#
# Usage: proto/gen.sh [OUTDIR]   (OUTDIR defaults to the proto directory;
# gen_test.go passes a temporary one to check the checked-in code.)
set -eu

PROTOC_GEN_GO=google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC=google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.1

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}

command -v protoc >/dev/null 2>&1 || { echo "gen.sh: protoc not found (apt-get install protobuf-compiler)" >&2; exit 2; }

gobin=${CONVERGE_PROTO_GOBIN:-}
if [ -z "$gobin" ]; then
	gobin=$(mktemp -d)
	trap 'rm -rf "$gobin"' EXIT
fi
GOBIN=$gobin go install "$PROTOC_GEN_GO"
GOBIN=$gobin go install "$PROTOC_GEN_GO_GRPC"

mkdir -p "$out"
cd "$here"
PATH=$gobin:$PATH protoc \
	--proto_path=. \
	--go_out="$out" --go_opt=paths=source_relative \
	--go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
	converge/v1/worker.proto
