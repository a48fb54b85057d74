package controlplane

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/stateapi"
	"github.com/convergehq/converge/state/statetest"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/gittest"
)

// eventLog is FollowEvents as lines on a channel, in the order the loop
// says them.
type eventLog chan string

func (l eventLog) Pinned(pin *converge.Pin) {
	if pin == nil {
		l <- "unpinned"
		return
	}
	l <- "pinned " + pin.Revision.Hash[:7]
}
func (l eventLog) Failed(err error, evaluated bool) {
	l <- fmt.Sprintf("failed %v: %v", evaluated, err)
}
func (l eventLog) Evaluated() { l <- "evaluated" }
func (l eventLog) Pass(p *gitsync.Pass) {
	what := "checked"
	switch {
	case !p.Valid():
		what = "invalid"
	case p.Applied:
		what = "applied"
	}
	l <- "pass " + p.Revision.Subject + " " + what
}
func (l eventLog) Converged(p *gitsync.Pass, summary string) {
	l <- "converged " + p.Revision.Subject + ": " + summary
}
func (l eventLog) Stuck(p *gitsync.Pass, desc string) {
	l <- "stuck " + p.Revision.Subject + ": " + desc
}
func (l eventLog) Error(err error) { l <- "error " + err.Error() }

// next returns the loop's next event, failing the test after a while.
func (l eventLog) next(t *testing.T) string {
	t.Helper()
	select {
	case ev := <-l:
		return ev
	case <-time.After(time.Minute):
		t.Fatal("no event from the follow loop in a minute")
		return ""
	}
}

// expect reads events until one starts with want.
func (l eventLog) expect(t *testing.T, want string) string {
	t.Helper()
	for {
		ev := l.next(t)
		t.Log(ev)
		if strings.HasPrefix(ev, want) {
			return ev
		}
	}
}

const followKind = `type: "kind", kind: "tgw", kind_version: 1, reactions: ["reconcile"]
spec: name: string
`

// TestFollow runs the follow loop on a real repository: the first commit
// (a kind, nothing to converge) converges; an invalid commit gets its
// verdict and is not applied; a resource no worker serves is judged stuck
// after the grace, naming the hint; and the admin API's reconcile is a
// step answered with the head.
func TestFollow(t *testing.T) {
	repo := gittest.Repo(t, map[string]string{"kinds/tgw.cue": followKind})
	src, err := gitsync.OpenLocal(repo, "")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "state")
	e := startTestEngine(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	events := make(eventLog, 100)
	trigger := make(chan struct{}, 1)
	health := &gitsync.Health{}
	syncer := e.Syncer(SyncerOptions{Source: src, Log: quiet()})
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Follow(ctx, FollowOptions{Syncer: syncer, Poll: time.Hour, Trigger: trigger, Health: health, Events: events,
			HowToStart: "start a worker", StuckGrace: 100 * time.Millisecond})
	}()
	defer func() { cancel(); <-done }()

	if got, want := events.next(t), "evaluated"; got != want {
		t.Fatalf("first event %q, want %q", got, want)
	}
	events.expect(t, "pass first applied")
	events.expect(t, "converged first: 0/0 Ready")
	head := gittest.Run(t, repo, "rev-parse", "HEAD")
	if rec, err := e.Store().Revision(ctx, head); err != nil {
		t.Fatal(err)
	} else if st, _ := rec.Status(converge.ContextSync); st.State != converge.StateSuccess || st.Description != "0/0 Ready" {
		t.Errorf("first's converge/sync = %+v, want success 0/0 Ready", st)
	}

	commit := func(files map[string]string, msg string) string { return gittest.Commit(t, repo, files, msg) }
	commit(map[string]string{"resources/a.cue": `type: "resource", kind: "tgw", kind_version: 1, name: "a", spec: name: 5` + "\n"}, "bad")
	trigger <- struct{}{}
	events.expect(t, "pass bad invalid")

	a := commit(map[string]string{"resources/a.cue": `type: "resource", kind: "tgw", kind_version: 1, name: "a", spec: name: "a"` + "\n"}, "good")
	cl, err := stateapi.Dial(filepath.Join(dir, stateapi.SocketName))
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.Reconcile(ctx, "")
	if err != nil || r.Hash != a {
		t.Fatalf("reconcile = %+v, %v; want the head %s", r, err, a)
	}
	events.expect(t, "pass good applied")
	stuck := events.expect(t, "stuck good: ")
	if !strings.Contains(stuck, "0/1 Ready") || !strings.Contains(stuck, "start a worker") {
		t.Errorf("stuck verdict %q, want 0/1 Ready and the hint", stuck)
	}
	if why := health.Check(time.Now()); !strings.Contains(why, "stuck") {
		t.Errorf("health = %q, want the stuck verdict", why)
	}
	rec, err := e.Store().Revision(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := rec.Status(converge.ContextSync); st.State != converge.StateFailure {
		t.Errorf("good's converge/sync = %+v, want failure", st)
	}

	// A pin (converge rollback) is applied instead of the head, and said
	// once; unpinned, the head is followed again.
	pin := &converge.Pin{Revision: converge.Revision{Ref: "main", Hash: head}, By: "test", At: time.Now()}
	pinned := &converge.Control{Pin: pin}
	if err := cl.SetControl(ctx, &converge.Control{}, pinned); err != nil {
		t.Fatal(err)
	}
	trigger <- struct{}{}
	events.expect(t, "pinned "+head[:7])
	if err := cl.SetControl(ctx, pinned, &converge.Control{}); err != nil {
		t.Fatal(err)
	}
	trigger <- struct{}{}
	events.expect(t, "unpinned")
}

// A restarted daemon picks up the applied revision whose verdict is still
// pending, and only that one.
func TestPendingPass(t *testing.T) {
	rev := converge.Revision{Ref: "main", Hash: "a1"}
	tests := []struct {
		name    string
		applied *converge.Revision
		sync    string // the record's converge/sync state; "" for no record
		want    bool
	}{
		{name: "nothing applied"},
		{name: "pending", applied: &rev, sync: converge.StatePending, want: true},
		{name: "judged", applied: &rev, sync: converge.StateSuccess},
		{name: "no record", applied: &rev},
		{name: "dirty work tree", applied: &converge.Revision{Ref: "main", Hash: "dirty-1", Dirty: true}, sync: converge.StatePending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := statetest.Open(t)
			if tt.applied != nil {
				if err := st.Commit(context.Background(), &converge.Batch{Applied: tt.applied}); err != nil {
					t.Fatal(err)
				}
			}
			if tt.sync != "" {
				rec := &converge.RevisionRecord{Revision: *tt.applied}
				rec.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: tt.sync})
				if err := st.PutRevision(context.Background(), rec); err != nil {
					t.Fatal(err)
				}
			}
			p, err := PendingPass(context.Background(), st)
			if err != nil {
				t.Fatal(err)
			}
			if got := p != nil; got != tt.want {
				t.Errorf("PendingPass = %+v, want a pass: %v", p, tt.want)
			}
		})
	}
}

// flakyApplied is a store whose next fails reads of the applied revision
// fail, as reads do while etcd changes leaders at a term's start.
type flakyApplied struct {
	state.Backend
	fails atomic.Int32
}

func (f *flakyApplied) Applied(ctx context.Context) (*converge.Revision, error) {
	if f.fails.Add(-1) >= 0 {
		return nil, errors.New("etcdserver: leader changed")
	}
	return f.Backend.Applied(ctx)
}

// followFixture is a repository of one kind (followKind), its head and
// a fresh store for it in dir.
func followFixture(t *testing.T) (src *gitsync.Source, head converge.Revision, dir string, st *state.Store) {
	t.Helper()
	repo := gittest.Repo(t, map[string]string{"kinds/tgw.cue": followKind})
	src, err := gitsync.OpenLocal(repo, "")
	if err != nil {
		t.Fatal(err)
	}
	if head, err = src.Head(); err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(t.TempDir(), "state")
	if st, err = state.Open(dir, state.Options{NoSync: true}); err != nil {
		t.Fatal(err)
	}
	return src, head, dir, st
}

// followOn starts an engine on store (in dir) and its follow loop of
// src until the test ends; it returns the engine, the loop's events and
// the loop's context.
func followOn(t *testing.T, dir string, store state.Backend, src *gitsync.Source) (*Engine, eventLog, context.Context) {
	t.Helper()
	e, err := Start(context.Background(), Options{StateDir: dir, Store: store, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	events := make(eventLog, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Follow(ctx, FollowOptions{Syncer: e.Syncer(SyncerOptions{Source: src, Log: quiet()}), Poll: time.Hour,
			Health: &gitsync.Health{}, Events: events, StuckGrace: 100 * time.Millisecond})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if err := e.Close(); err != nil {
			t.Errorf("close engine: %v", err)
		}
	})
	return e, events, ctx
}

// TestFollowResumesAfterReadError: the applied revision a last leader
// left pending is judged by the next one even when its first read of it
// fails: the follow loop reads it again at its next step rather than
// forgetting it.
func TestFollowResumesAfterReadError(t *testing.T) {
	src, head, dir, st := followFixture(t)
	rec := &converge.RevisionRecord{Revision: head, Applied: true, Seen: time.Now()}
	rec.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StatePending, Description: "applied, converging"})
	if err := st.Commit(context.Background(), &converge.Batch{Applied: &head, Record: rec}); err != nil {
		t.Fatal(err)
	}
	flaky := &flakyApplied{Backend: st}
	flaky.fails.Store(1)
	e, events, ctx := followOn(t, dir, flaky, src)
	events.expect(t, "converged first: 0/0 Ready")
	got, err := e.Store().Revision(ctx, head.Hash)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := got.Status(converge.ContextSync); st.State != converge.StateSuccess || !got.Applied {
		t.Errorf("the resumed revision's converge/sync = %+v (applied %v), want success", st, got.Applied)
	}
}

// flakyVerdicts is a store whose first write of a final converge/sync
// verdict fails, as a write does while an etcd member restarts.
type flakyVerdicts struct {
	state.Backend
	failed atomic.Bool
}

func (f *flakyVerdicts) PutRevision(ctx context.Context, rec *converge.RevisionRecord) error {
	if _, final := gitsync.FinalVerdict(rec); final && f.failed.CompareAndSwap(false, true) {
		return errors.New("etcdserver: request timed out")
	}
	return f.Backend.PutRevision(ctx, rec)
}

// TestFollowRetriesVerdictWrite: a verdict whose write fails (not by the
// term's end) is written again until it lands, never dropped with the
// revision left pending.
func TestFollowRetriesVerdictWrite(t *testing.T) {
	src, head, dir, st := followFixture(t)
	flaky := &flakyVerdicts{Backend: st}
	_, events, ctx := followOn(t, dir, flaky, src)
	events.expect(t, "error ")
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := st.Revision(ctx, head.Hash)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := rec.Status(converge.ContextSync)
		if s.State == converge.StateSuccess {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the verdict whose write failed never landed: converge/sync %+v", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !flaky.failed.Load() {
		t.Error("no verdict write failed")
	}
}
