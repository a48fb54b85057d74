package sync

import (
	"context"
	"reflect"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/sync/gittest"
)

// TestApplyRecordsSource: an applied revision's repository, sub-path and
// declared workers are recorded, so a later command run without --repo or
// --path finds them.
func TestApplyRecordsSource(t *testing.T) {
	dir := gittest.Repo(t, map[string]string{
		"infra/converge.cue":    `workers: [{name: "db", command: ["./bin/db"], replicas: 2}]`,
		"infra/kinds/tgw.cue":   tgwKind,
		"infra/resources/a.cue": tgwResource("a"),
	})
	src, err := OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	rec := &memRecords{recs: map[string]*converge.RevisionRecord{}, snap: &converge.Snapshot{}}
	s := &Syncer{Source: src, Path: "infra", Records: rec, Engine: &countingEngine{}}
	head, err := src.Head()
	if err != nil {
		t.Fatal(err)
	}
	pass, err := s.Check(head)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(context.Background(), pass); err != nil {
		t.Fatal(err)
	}
	want := &converge.AppliedSource{Repo: src.Root(), Path: "infra", Ref: "main", Revision: head,
		Workers: []converge.WorkerSpec{{Name: "db", Command: []string{"./bin/db"}, Replicas: 2}}, Declared: 1}
	if !reflect.DeepEqual(rec.source, want) {
		t.Errorf("recorded source %+v, want %+v", rec.source, want)
	}
}
