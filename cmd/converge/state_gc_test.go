package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
)

// TestStateGC runs `converge state gc` on a store that held 5,000
// resources and now holds 10: it reports the sizes, the file shrank, and
// the resources left are all there; while another converge holds the
// store, gc exits 2 naming the file.
func TestStateGC(t *testing.T) {
	dir := t.TempDir()
	st, err := state.Open(dir, state.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	var b converge.Batch
	for i := range 5000 {
		b.Resources = append(b.Resources, &converge.Resource{UID: fmt.Sprint("u", i), Kind: "vpc", KindVersion: 1,
			Name: fmt.Sprintf("v%05d", i), Phase: converge.PhaseReady, Generation: 1,
			Spec: []byte(`{"cidr":"10.0.0.0/16","account_id":"123456789012","tags":{"team":"platform"}}`)})
	}
	if err := st.Commit(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	var del converge.Batch
	for _, r := range b.Resources[10:] {
		del.DeletedResources = append(del.DeletedResources, r.ID())
	}
	if err := st.Commit(context.Background(), &del); err != nil {
		t.Fatal(err)
	}

	// Held: exit 2, naming the file.
	out, err := runCLI("state", "gc", "--state", dir)
	var f errFailed
	if err == nil || errors.As(err, &f) || errors.Is(err, converge.ErrNotFound) {
		t.Fatalf("state gc on a held store: %v (output %q), want an exit-2 error", err, out)
	}
	if path := filepath.Join(dir, state.FileName); !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "holds it") {
		t.Errorf("error %q does not name %s and who holds it", err, path)
	}
	st.Close()

	out, err = runCLI("state", "gc", "--state", dir)
	if err != nil {
		t.Fatalf("state gc: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`^compacted (\S+): (\d+) -> (\d+) bytes \(\d+\.\d MiB freed\)\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("output %q, want \"compacted PATH: N -> M bytes (X MiB freed)\"", out)
	}
	before, _ := strconv.Atoi(m[2])
	after, _ := strconv.Atoi(m[3])
	if after >= before {
		t.Errorf("gc reported %d -> %d bytes: want smaller", before, after)
	}
	st, err = state.Open(dir, state.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Check(context.Background()); err != nil {
		t.Error(err)
	}
	rs, err := st.Resources(context.Background(), state.Filter{})
	if err != nil || len(rs) != 10 {
		t.Errorf("after gc: %d resources (%v), want 10", len(rs), err)
	}
}
