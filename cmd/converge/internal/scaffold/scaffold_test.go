package scaffold

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Write fills every template in and names the kind's file after it.
func TestWriteFillsTheTemplates(t *testing.T) {
	dir := t.TempDir()
	written, err := Write(dir, Data{Kind: "bucket", Module: "example.com/buckets", Source: "/src/converge"})
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != len(files) || written[1] != filepath.FromSlash("kinds/bucket.cue") {
		t.Fatalf("written %q", written)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), "module example.com/buckets") || !strings.Contains(string(mod), "/src/converge") {
		t.Errorf("go.mod:\n%s", mod)
	}
	for _, f := range written {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "{{") {
			t.Errorf("%s keeps a template action:\n%s", f, b)
		}
	}
}
