package state_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/statetest"
)

// TestOpenDamaged: only a missing state file starts a fresh store. An
// existing one that is empty, truncated or not a store is ErrDamaged,
// naming the file and what is wrong, and left as it is; with Reinit it is
// moved aside, kept whole, and a fresh store starts.
func TestOpenDamaged(t *testing.T) {
	// A real store with one resource, the bytes the cases damage.
	good := t.TempDir()
	st, err := state.Open(good, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var rs []*converge.Resource
	for i := range 2000 {
		rs = append(rs, res("vpc", fmt.Sprint("a", i), ""))
	}
	commit(t, st, &converge.Batch{Resources: rs})
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(filepath.Join(good, state.FileName))
	if err != nil {
		t.Fatal(err)
	}
	zeroed := append([]byte(nil), whole...)
	clear(zeroed[:8192]) // both meta pages
	tests := []struct {
		name    string
		content []byte
		wantWhy string
	}{
		{name: "empty", content: []byte{}, wantWhy: "empty (0 bytes)"},
		{name: "truncated", content: whole[:16384], wantWhy: "truncated"},
		{name: "one page", content: whole[:4096], wantWhy: "truncated"},
		{name: "half a meta page", content: whole[:50], wantWhy: "not a store: invalid database"},
		{name: "not a store", content: []byte(strings.Repeat("not a bbolt file\n", 1000)), wantWhy: "not a store"},
		{name: "meta pages zeroed", content: zeroed, wantWhy: "not a store"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, state.FileName)
			if err := os.WriteFile(path, tt.content, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := state.Open(dir, state.Options{LockTimeout: 50e6})
			if err == nil {
				s.Close()
				t.Fatalf("Open of a %s file succeeded, want ErrDamaged", tt.name)
			}
			if !errors.Is(err, state.ErrDamaged) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.wantWhy) {
				t.Errorf("Open: %v; want ErrDamaged naming %s and %q", err, path, tt.wantWhy)
			}
			if got, err := os.ReadFile(path); err != nil || string(got) != string(tt.content) {
				t.Errorf("the damaged file changed (%d bytes, %v), want it left as it was", len(got), err)
			}

			s = statetest.OpenDir(t, dir, state.Options{Reinit: true, LockTimeout: 50e6})
			aside := s.MovedAside()
			if !strings.HasPrefix(aside, path+".damaged-") {
				t.Fatalf("MovedAside = %q, want %s.damaged-…", aside, path)
			}
			if got, err := os.ReadFile(aside); err != nil || string(got) != string(tt.content) {
				t.Errorf("moved-aside file: %d bytes, %v; want the damaged file whole", len(got), err)
			}
			if rs, err := s.Resources(state.Filter{}); err != nil || len(rs) != 0 {
				t.Errorf("fresh store holds %d resources, %v; want none", len(rs), err)
			}
		})
	}

	// Reinit leaves an intact store alone, and a missing file starts fresh.
	s := statetest.OpenDir(t, good, state.Options{Reinit: true})
	if s.MovedAside() != "" {
		t.Errorf("an intact store was moved aside to %s", s.MovedAside())
	}
	if r, err := s.Resource("vpc/a0"); err != nil || r == nil {
		t.Errorf("intact store after Reinit: %v, %v", r, err)
	}
	if s := statetest.OpenDir(t, t.TempDir(), state.Options{}); s.MovedAside() != "" {
		t.Errorf("a new store says it moved %s aside", s.MovedAside())
	}
}
