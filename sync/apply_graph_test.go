package sync

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/statetest"
	"github.com/convergehq/converge/sync/gittest"
)

// loadCounter is the state store as Records, counting loads of the whole
// stored state.
type loadCounter struct {
	*state.Store
	loads int
}

func (l *loadCounter) Load(ctx context.Context) (*converge.Snapshot, error) {
	l.loads++
	return l.Store.Load(ctx)
}

// TestApplyReadsEngineGraph: Apply prices a revision against the engine's
// in-memory graph (a real scheduler over a real store), never loading the
// stored state, and the prune guard holds what it held when it read the
// store.
func TestApplyReadsEngineGraph(t *testing.T) {
	tests := []struct {
		name        string
		drop        []string
		wantApplied bool
		wantHeld    string // substring; "" means not held
	}{
		{name: "half of what is stored goes", drop: []string{"b"}, wantApplied: true},
		{name: "everything goes", drop: []string{"a", "b"}, wantHeld: "held by the prune guard: this revision would delete all 2 resources"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := gittest.Repo(t, map[string]string{
				"kinds/tgw.cue": tgwKind, "resources/a.cue": tgwResource("a"), "resources/b.cue": tgwResource("b"),
			})
			src, err := OpenLocal(dir, "")
			if err != nil {
				t.Fatal(err)
			}
			st := statetest.Open(t)
			eng, err := scheduler.New(context.Background(), st, nil, scheduler.Config{})
			if err != nil {
				t.Fatal(err)
			}
			rec := &loadCounter{Store: st}
			s := &Syncer{Source: src, Records: rec, Engine: eng, Lint: cue.LintTrees}
			if _, err := s.Advance(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, name := range tt.drop {
				if err := os.Remove(filepath.Join(dir, "resources", name+".cue")); err != nil {
					t.Fatal(err)
				}
			}
			gittest.Run(t, dir, "add", "-A")
			gittest.Run(t, dir, "commit", "-q", "-m", "drop "+strings.Join(tt.drop, ", "))
			passes, err := s.Advance(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(passes), 1; got != want {
				t.Fatalf("%d passes, want %d", got, want)
			}
			p := passes[0]
			if got, want := p.Applied, tt.wantApplied; got != want {
				t.Errorf("applied %v, want %v (held %q)", got, want, p.Held)
			}
			if tt.wantHeld == "" && p.Held != "" || tt.wantHeld != "" && !strings.Contains(p.Held, tt.wantHeld) {
				t.Errorf("held %q, want %q", p.Held, tt.wantHeld)
			}
			if rec.loads != 0 {
				t.Errorf("the stored state was loaded %d times, want 0 (the engine holds the graph)", rec.loads)
			}
		})
	}
}
