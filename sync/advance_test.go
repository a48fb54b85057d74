package sync

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/sync/gittest"
)

// memRecords is Records in memory, with a fixed stored snapshot. It
// counts loads of the whole snapshot, which Apply must not make.
type memRecords struct {
	recs    map[string]*converge.RevisionRecord
	applied *converge.Revision
	snap    *converge.Snapshot
	source  *converge.AppliedSource
	loads   int
}

func (m *memRecords) PutSource(ctx context.Context, src *converge.AppliedSource) error {
	m.source = src
	return nil
}

func (m *memRecords) PutRevision(ctx context.Context, rec *converge.RevisionRecord) error {
	m.recs[rec.Revision.Hash] = rec
	return nil
}
func (m *memRecords) Revision(ctx context.Context, hash string) (*converge.RevisionRecord, error) {
	if r, ok := m.recs[hash]; ok {
		return r, nil
	}
	return nil, os.ErrNotExist
}
func (m *memRecords) Applied(ctx context.Context) (*converge.Revision, error) { return m.applied, nil }
func (m *memRecords) Load(ctx context.Context) (*converge.Snapshot, error) {
	m.loads++
	return m.snap, nil
}
func (m *memRecords) Kinds(ctx context.Context) ([]*converge.Kind, error) { return m.snap.Kinds, nil }

// countingEngine records what was applied; its graph is snap (nil:
// empty).
type countingEngine struct {
	applied []string
	snap    *converge.Snapshot
}

func (e *countingEngine) stored() *converge.Snapshot {
	if e.snap == nil {
		return &converge.Snapshot{}
	}
	return e.snap
}

func (e *countingEngine) Diff(_ context.Context, d *converge.Desired) (*scheduler.Plan, error) {
	return scheduler.Diff(e.stored(), d), nil
}

func (e *countingEngine) Graph() scheduler.Graph { return scheduler.SnapshotGraph(e.stored()) }

func (e *countingEngine) Apply(_ context.Context, d *converge.Desired, _ scheduler.Validator) (*scheduler.Plan, error) {
	e.applied = append(e.applied, d.Revision.Hash)
	return &scheduler.Plan{}, nil
}

const tgwKind = `type: "kind", kind: "tgw", kind_version: 1, reactions: ["reconcile"]
spec: name: string
`

func tgwResource(name string) string {
	return `type: "resource", kind: "tgw", kind_version: 1, name: "` + name + `"
spec: name: "` + name + `"
`
}

// TestAdvanceHeldHead: when the newest valid revision of a batch is held
// by the prune guard, the older valid ones are not told they were
// superseded (nothing was applied), and nothing reaches the engine.
func TestAdvanceHeldHead(t *testing.T) {
	dir := gittest.Repo(t, map[string]string{
		"kinds/tgw.cue": tgwKind, "resources/a.cue": tgwResource("a"), "resources/b.cue": tgwResource("b"),
	})
	base := gittest.Run(t, dir, "rev-parse", "HEAD")
	commit := func(msg string) string {
		gittest.Run(t, dir, "add", "-A")
		gittest.Run(t, dir, "commit", "-q", "-m", msg)
		return gittest.Run(t, dir, "rev-parse", "HEAD")
	}
	os.Remove(filepath.Join(dir, "resources", "b.cue"))
	older := commit("drop b: half of what is stored")
	os.Remove(filepath.Join(dir, "resources", "a.cue"))
	head := commit("drop a too: everything")

	src, err := OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	stored := &converge.Snapshot{Resources: []*converge.Resource{
		{Kind: "tgw", KindVersion: 1, Name: "a", Origin: converge.OriginGit},
		{Kind: "tgw", KindVersion: 1, Name: "b", Origin: converge.OriginGit},
	}}
	rec := &memRecords{recs: map[string]*converge.RevisionRecord{}, applied: &converge.Revision{Ref: "main", Hash: base}, snap: stored}
	eng := &countingEngine{snap: stored}
	s := &Syncer{Source: src, Records: rec, Engine: eng}
	passes, err := s.Advance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(passes), 2; got != want {
		t.Fatalf("%d passes, want %d", got, want)
	}
	if len(eng.applied) != 0 {
		t.Errorf("applied %v; want nothing (the head is held)", eng.applied)
	}
	if !strings.Contains(passes[1].Held, "would delete all 2 resources") {
		t.Errorf("head held %q, want the prune guard's reason", passes[1].Held)
	}
	st, ok := rec.recs[older].Status(converge.ContextSync)
	if !ok || st.State != converge.StateFailure || !strings.Contains(st.Description, "not applied: the newer "+head[:7]+" was held") {
		t.Errorf("older revision's sync status %+v; want a failure naming the held newer revision", st)
	}
	if rec.recs[older].Applied {
		t.Error("older revision recorded as applied")
	}
}
