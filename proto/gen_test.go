package proto

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// protocLine matches the header line naming protoc's version, which
// depends on the machine, not on the .proto file.
var protocLine = regexp.MustCompile(`(?m)^//\s*-?\s*protoc\s+v[0-9.]+\s*$`)

// TestGenerated regenerates the Go code into a temporary directory and
// fails if it differs from the checked-in files: run `go generate
// ./proto/...` after editing a .proto file.
func TestGenerated(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Skip("protoc not installed (apt-get install protobuf-compiler); cannot check generated code")
	}
	out := t.TempDir()
	cmd := exec.Command("sh", "gen.sh", out)
	cmd.Env = append(os.Environ(), "CONVERGE_PROTO_GOBIN="+t.TempDir())
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen.sh: %v\n%s", err, b)
	}
	for _, name := range []string{"converge/v1/worker.pb.go", "converge/v1/worker_grpc.pb.go"} {
		want, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		got, want = protocLine.ReplaceAll(got, nil), protocLine.ReplaceAll(want, nil)
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `go generate ./proto/...` and commit the result", name)
		}
	}
}
