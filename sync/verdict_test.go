package sync

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/statetest"
	"github.com/convergehq/converge/sync/gittest"
)

// errLeaderChanged is what etcd answers a write while it changes leaders.
var errLeaderChanged = errors.New("etcdserver: leader changed")

// flakyStore is the state store as the scheduler's Store, refusing its
// next fail commits.
type flakyStore struct {
	*state.Store
	fail int
}

func (f *flakyStore) Commit(ctx context.Context, b *converge.Batch) error {
	if f.fail > 0 {
		f.fail--
		return errLeaderChanged
	}
	return f.Store.Commit(ctx, b)
}

// flakyRecords is the state store as Records, failing its next
// appliedFails reads of the applied revision, and every revision record
// write while fenced (a term that ended).
type flakyRecords struct {
	*state.Store
	appliedFails int
	fenced       bool
}

func (f *flakyRecords) Applied(ctx context.Context) (*converge.Revision, error) {
	if f.appliedFails > 0 {
		f.appliedFails--
		return nil, errLeaderChanged
	}
	return f.Store.Applied(ctx)
}

func (f *flakyRecords) PutRevision(ctx context.Context, rec *converge.RevisionRecord) error {
	if f.fenced {
		return errors.New("the leader's term ended")
	}
	return f.Store.PutRevision(ctx, rec)
}

// verdictRepo is a repository of one resource, with its source.
func verdictRepo(t *testing.T) (*Source, string) {
	t.Helper()
	dir := gittest.Repo(t, map[string]string{"kinds/tgw.cue": tgwKind, "resources/a.cue": tgwResource("a")})
	src, err := OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	return src, gittest.Run(t, dir, "rev-parse", "HEAD")
}

// syncVerdict returns hash's converge/sync status in st, and whether
// FinalVerdict calls it final; absent is ("", false).
func syncVerdict(t *testing.T, st *state.Store, hash string) (converge.CommitStatus, *converge.RevisionRecord, bool) {
	t.Helper()
	rec, err := st.Revision(context.Background(), hash)
	if errors.Is(err, converge.ErrNotFound) {
		return converge.CommitStatus{}, nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	s, _ := rec.Status(converge.ContextSync)
	_, final := FinalVerdict(rec)
	return s, rec, final
}

// TestFailedApplyIsNoVerdict: an apply the store fails (a commit refused
// while etcd changes leaders) gives the revision no final verdict: it
// stays pending, not applied, and the next pass applies it; the one
// final verdict is the one its convergence gets.
func TestFailedApplyIsNoVerdict(t *testing.T) {
	src, head := verdictRepo(t)
	st := statetest.Open(t)
	commits := &flakyStore{Store: st, fail: 1}
	eng, err := scheduler.New(context.Background(), commits, nil, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := &Syncer{Source: src, Records: st, Engine: eng}
	if _, err := s.Advance(context.Background()); !errors.Is(err, errLeaderChanged) {
		t.Fatalf("Advance with the commit refused = %v, want the store's error", err)
	}
	got, rec, final := syncVerdict(t, st, head)
	if final || got.State != converge.StatePending || !strings.Contains(got.Description, "leader changed; tried again at the next pass") {
		t.Fatalf("after a failed apply converge/sync is %+v (final %v), want pending naming the error", got, final)
	}
	if rec.Applied {
		t.Error("a failed apply's revision recorded as applied")
	}
	if a, err := st.Applied(context.Background()); err != nil || a != nil {
		t.Errorf("applied revision %v, %v; want none", a, err)
	}

	passes, err := s.Advance(context.Background())
	if err != nil || len(passes) != 1 || !passes[0].Applied {
		t.Fatalf("second Advance = %d passes, %v; want the revision applied", len(passes), err)
	}
	got, rec, final = syncVerdict(t, st, head)
	if final || got.State != converge.StatePending || got.Description != "applied, converging" || !rec.Applied {
		t.Errorf("after the apply converge/sync is %+v (final %v, applied %v), want pending applied, converging", got, final, rec.Applied)
	}
	if err := s.SetSyncStatus(context.Background(), passes[0], converge.StateSuccess, "1/1 Ready"); err != nil {
		t.Fatal(err)
	}
	if got, _, final = syncVerdict(t, st, head); !final || got.State != converge.StateSuccess {
		t.Errorf("converged: converge/sync is %+v (final %v), want success", got, final)
	}
}

// TestAppliedWithItsRecord: the revision an apply makes applied and its
// record "applied, converging" are one write. A term that ends right
// after the engine's commit (every later write refused) leaves both, so
// the next leader finds the applied revision pending and judges it.
func TestAppliedWithItsRecord(t *testing.T) {
	src, head := verdictRepo(t)
	st := statetest.Open(t)
	eng, err := scheduler.New(context.Background(), st, nil, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	records := &flakyRecords{Store: st, fenced: true}
	s := &Syncer{Source: src, Records: records, Engine: eng}
	if _, err := s.Advance(context.Background()); err == nil {
		t.Fatal("Advance with every record write refused: no error")
	}
	if a, err := st.Applied(context.Background()); err != nil || a == nil || a.Hash != head {
		t.Fatalf("applied revision %v, %v; want %s", a, err, head)
	}
	got, rec, final := syncVerdict(t, st, head)
	if rec == nil || final || got.State != converge.StatePending || !rec.Applied {
		t.Errorf("the applied revision's record is %+v (converge/sync %+v), want pending and applied", rec, got)
	}
}

// TestAdvanceKeepsAppliedOnReadError: a failed read of the applied
// revision is not "nothing applied". A restarted Syncer whose first read
// fails judges nothing and applies nothing (the applied revision's final
// verdict stays as it is), and the next pass, reading it, finds nothing
// new.
func TestAdvanceKeepsAppliedOnReadError(t *testing.T) {
	src, head := verdictRepo(t)
	st := statetest.Open(t)
	eng, err := scheduler.New(context.Background(), st, nil, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := &Syncer{Source: src, Records: st, Engine: eng}
	passes, err := s.Advance(context.Background())
	if err != nil || len(passes) != 1 || !passes[0].Applied {
		t.Fatalf("first Advance = %d passes, %v; want the head applied", len(passes), err)
	}
	if err := s.SetSyncStatus(context.Background(), passes[0], converge.StateSuccess, "1/1 Ready"); err != nil {
		t.Fatal(err)
	}

	records := &flakyRecords{Store: st, appliedFails: 1}
	restarted := &Syncer{Source: src, Records: records, Engine: eng}
	if passes, err := restarted.Advance(context.Background()); !errors.Is(err, errLeaderChanged) || len(passes) != 0 {
		t.Errorf("Advance with the applied revision unread = %d passes, %v; want none and the read's error", len(passes), err)
	}
	if got, _, final := syncVerdict(t, st, head); !final || got.State != converge.StateSuccess || got.Description != "1/1 Ready" {
		t.Errorf("the final verdict became %+v (final %v)", got, final)
	}
	if passes, err := restarted.Advance(context.Background()); err != nil || len(passes) != 0 {
		t.Errorf("next Advance = %d passes, %v; want nothing new", len(passes), err)
	}
	if got, _, final := syncVerdict(t, st, head); !final || got.State != converge.StateSuccess {
		t.Errorf("the final verdict became %+v (final %v)", got, final)
	}
}

// supersedeRefused refuses the write of a superseded verdict: the term
// ended between Apply and the older revisions' verdicts.
type supersedeRefused struct{ *state.Store }

func (r supersedeRefused) PutRevision(ctx context.Context, rec *converge.RevisionRecord) error {
	if rec.Held == "superseded" {
		return errors.New("the leader's term ended")
	}
	return r.Store.PutRevision(ctx, rec)
}

// TestSupersededAcrossATermChange: two commits in one Advance, the newer
// applied and the term ended before the older was told it was
// superseded. The next term's first Advance finds it pending behind the
// applied revision and gives it its final verdict.
func TestSupersededAcrossATermChange(t *testing.T) {
	dir := gittest.Repo(t, map[string]string{"kinds/tgw.cue": tgwKind, "resources/a.cue": tgwResource("a")})
	src, err := OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	st := statetest.Open(t)
	eng, err := scheduler.New(context.Background(), st, nil, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := &Syncer{Source: src, Records: supersedeRefused{st}, Engine: eng}
	if _, err := s.Advance(context.Background()); err != nil {
		t.Fatal(err)
	}
	older := gittest.Commit(t, dir, map[string]string{"resources/b.cue": tgwResource("b")}, "b")
	newer := gittest.Commit(t, dir, map[string]string{"resources/c.cue": tgwResource("c")}, "c")
	if _, err := s.Advance(context.Background()); err == nil {
		t.Fatal("Advance with the superseded verdict refused: no error")
	}
	if a, err := st.Applied(context.Background()); err != nil || a == nil || a.Hash != newer {
		t.Fatalf("applied %v, %v; want %.7s", a, err, newer)
	}
	if _, _, final := syncVerdict(t, st, older); final {
		t.Fatal("the older revision has a final verdict although its write was refused")
	}

	next := &Syncer{Source: src, Records: st, Engine: eng}
	if _, err := next.Advance(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, rec, final := syncVerdict(t, st, older)
	if !final || got.State != converge.StateSuccess || !strings.Contains(got.Description, "superseded by") || rec.Held != "superseded" {
		t.Errorf("the older revision after the next term's Advance: converge/sync %+v (final %v), want success, superseded", got, final)
	}
}
