package sync

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/sync/gittest"
)

// silentRemote is a real TCP server on loopback that accepts every
// connection and never answers, a remote that hangs. It returns its
// http:// URL and how many connections it has accepted.
func silentRemote(t *testing.T) (url string, accepted func() int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	var mu gosync.Mutex // guards conns
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			mu.Lock()
			conns = append(conns, c) // held open, never read or written
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://" + l.Addr().String(), n.Load
}

// checkTimeout fails unless err wraps ErrTimeout and says want, and the
// call returned within a few seconds of its timeout.
func checkTimeout(t *testing.T, err error, took time.Duration, want string) {
	t.Helper()
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v; want ErrTimeout saying %q", err, want)
	}
	if took > 5*time.Second {
		t.Errorf("returned after %v, want within a few seconds", took)
	}
}

// TestCloneSilentRemote: the first clone from a remote that accepts and
// never answers gives up at its timeout, naming the remote and the
// setting, and leaves no half mirror behind.
func TestCloneSilentRemote(t *testing.T) {
	url, accepted := silentRemote(t)
	url += "/origin.git"
	dir := t.TempDir()
	t0 := time.Now()
	_, err := OpenRemote(context.Background(), RemoteOptions{URL: url, Dir: dir, Timeout: 300 * time.Millisecond})
	checkTimeout(t, err, time.Since(t0), "clone "+url+": timed out after 300ms (--git-timeout, git_timeout in converge.cue)")
	if accepted() == 0 {
		t.Error("the remote accepted no connection: the timeout did not come from it")
	}
	if _, err := os.Stat(mirrorDir(dir, url)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a mirror after the clone timed out (%v): the next run would open it", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(mirrorDir(dir, url) + ".clone"); errors.Is(err, fs.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the abandoned clone left its directory behind")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// silentMirror makes the mirror OpenRemote(url) would use, cloned from a
// real repository with one commit, and returns that commit's hash: the
// remote went silent after the mirror was made.
func silentMirror(t *testing.T, url, dir string) string {
	t.Helper()
	work := gittest.Repo(t, map[string]string{"converge.cue": "resync_interval: \"10m\"\n"})
	mirror := mirrorDir(dir, url)
	gittest.Run(t, work, "clone", "-q", "--bare", work, mirror)
	gittest.Run(t, mirror, "remote", "set-url", "origin", url)
	return gittest.Run(t, work, "rev-parse", "HEAD")
}

// TestFetchSilentRemote: a fetch from a remote that accepts and never
// answers gives up at its timeout, and the mirror keeps what it had;
// a cancelled context (SIGTERM) stops a fetch with an hour's timeout at
// once.
func TestFetchSilentRemote(t *testing.T) {
	url, accepted := silentRemote(t)
	url += "/origin.git"
	dir := t.TempDir()
	head := silentMirror(t, url, dir)
	src, err := OpenRemote(context.Background(), RemoteOptions{URL: url, Dir: dir, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	_, err = src.Fetch(context.Background())
	checkTimeout(t, err, time.Since(t0), "fetch "+url+": timed out after 300ms")
	if accepted() == 0 {
		t.Error("the remote accepted no connection")
	}
	if rev, err := src.Head(); err != nil || rev.Hash != head {
		t.Errorf("mirror head after the failed fetch = %v, %v; want %s", rev.Hash, err, head)
	}

	src.SetTimeout(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	before := accepted()
	go func() {
		for accepted() == before {
			time.Sleep(5 * time.Millisecond)
		}
		cancel() // the fetch is waiting on the remote
	}()
	t0 = time.Now()
	_, err = src.Fetch(ctx)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "fetch "+url) {
		t.Errorf("cancelled fetch: %v; want context.Canceled naming the remote", err)
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("a cancelled fetch returned after %v", took)
	}
}

// TestPushNotesSilentRemote: a push of notes to an origin that accepts
// and never answers gives up at its timeout (TestSyncPushStatus once hung
// on a push with no deadline).
func TestPushNotesSilentRemote(t *testing.T) {
	url, _ := silentRemote(t)
	work := gittest.Repo(t, map[string]string{"converge.cue": "resync_interval: \"10m\"\n"})
	gittest.Run(t, work, "remote", "add", "origin", url+"/origin.git")
	src, err := OpenLocal(work, "")
	if err != nil {
		t.Fatal(err)
	}
	head, err := src.Head()
	if err != nil {
		t.Fatal(err)
	}
	if err := src.WriteStatuses(head.Hash, []converge.CommitStatus{{Context: converge.ContextSync, State: converge.StateSuccess, Description: "1/1 Ready"}}); err != nil {
		t.Fatal(err)
	}
	src.SetTimeout(300 * time.Millisecond)
	t0 := time.Now()
	err = src.PushNotes(context.Background())
	checkTimeout(t, err, time.Since(t0), "push "+NotesRef+" to origin: timed out after 300ms")
}

// blockingFS is documents whose slow.cue cannot be read until release
// is closed: a load that does not finish.
type blockingFS struct {
	docs    fstest.MapFS // only Open: no ReadFile that would bypass it
	release chan struct{}
}

func (b blockingFS) Open(name string) (fs.File, error) {
	if name == "slow.cue" {
		<-b.release
	}
	return b.docs.Open(name)
}

// TestLoadTimeout: a load of documents that takes longer than
// LoadTimeout is abandoned with an error naming the revision and the
// setting; the next load waits for the abandoned one, and loads again
// once it has ended. A cancelled context stops a load at once.
func TestLoadTimeout(t *testing.T) {
	docs := blockingFS{docs: fstest.MapFS{
		"kinds/tgw.cue": {Data: []byte(tgwKind)},
		"slow.cue":      {Data: []byte(tgwResource("a"))},
	}, release: make(chan struct{})}
	s := &Syncer{LoadTimeout: 200 * time.Millisecond}
	rev := converge.Revision{Ref: "main", Hash: strings.Repeat("a", 40)}
	check := func(ctx context.Context) (*Pass, time.Duration, error) {
		t0 := time.Now()
		p, err := s.checkFS(ctx, &Pass{Revision: rev, Record: &converge.RevisionRecord{Revision: rev}}, docs)
		return p, time.Since(t0), err
	}
	_, took, err := check(context.Background())
	checkTimeout(t, err, took, "load main@sha1:"+rev.Hash+": timed out after 200ms (--load-timeout, load_timeout in converge.cue)")
	_, took, err = check(context.Background())
	checkTimeout(t, err, took, "an earlier one, abandoned at its deadline, is still running")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := check(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("load with a cancelled context: %v, want context.Canceled", err)
	}
	close(docs.release)
	s.LoadTimeout = 10 * time.Second
	p, _, err := check(context.Background())
	if err != nil || !p.Valid() || len(p.Loaded.Desired.Resources) != 1 {
		t.Fatalf("load after the abandoned one ended: %+v, %v", p, err)
	}
}

// TestAdvanceLoadTimeout: a revision whose documents cannot be loaded in
// time is not applied, its verdict says why, the revision applied before
// stays applied, and the next Advance loads it again.
func TestAdvanceLoadTimeout(t *testing.T) {
	dir := gittest.Repo(t, map[string]string{"kinds/tgw.cue": tgwKind, "resources/a.cue": tgwResource("a")})
	src, err := OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	rec := &memRecords{recs: map[string]*converge.RevisionRecord{}, snap: &converge.Snapshot{}}
	eng := &countingEngine{}
	s := &Syncer{Source: src, Records: rec, Engine: eng, LoadTimeout: 200 * time.Millisecond}
	if _, err := s.Advance(context.Background()); err != nil || len(eng.applied) != 1 {
		t.Fatalf("first Advance: %v, applied %v", err, eng.applied)
	}
	first := eng.applied[0]
	gittest.Write(t, dir, map[string]string{"resources/b.cue": tgwResource("b")})
	gittest.Run(t, dir, "add", "-A")
	gittest.Run(t, dir, "commit", "-q", "-m", "b")
	second := gittest.Run(t, dir, "rev-parse", "HEAD")

	// A load abandoned earlier is still running: this one cannot start
	// before its deadline.
	s.loading.get() <- struct{}{}
	_, err = s.Advance(context.Background())
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Advance: %v, want ErrTimeout", err)
	}
	if got := eng.applied; len(got) != 1 || got[0] != first {
		t.Errorf("applied %v, want only %s", got, first)
	}
	r := rec.recs[second]
	st, ok := r.Status(converge.ContextSync)
	if r == nil || !ok || st.State != converge.StateFailure || !strings.Contains(st.Description, "not applied: load main@sha1:"+second+": timed out after 200ms") {
		t.Errorf("verdict of %s: %+v", second, r)
	}

	<-s.loading.get() // the earlier load ends
	if _, err := s.Advance(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := eng.applied; len(got) != 2 || got[1] != second {
		t.Errorf("applied %v after the retry, want %s last", got, second)
	}
}

// TestBoundedKeepsResults: an operation that succeeds is never reported
// as cancelled or timed out (its context ends as it returns; TestSyncPushStatus
// once failed with "load …: context canceled" that way).
func TestBoundedKeepsResults(t *testing.T) {
	var g gate
	for i := range 20000 {
		v, err := bounded(context.Background(), &g, time.Minute, "op", "knob", func(context.Context) (int, error) { return i, nil })
		if err != nil || v != i {
			t.Fatalf("call %d: %d, %v", i, v, err)
		}
	}
}

// TestAdvanceSlowCommitThenFix: a commit whose documents take CUE far
// longer than LoadTimeout (a 60,000-team classic BOM, ~1.5 s) followed by
// its revert: the slow one is passed over with a verdict saying why, and
// the revert is applied once the abandoned evaluation has ended; the
// slow one is never loaded again.
func TestAdvanceSlowCommitThenFix(t *testing.T) {
	if testing.Short() {
		t.Skip("evaluates a 60,000-team BOM (~1.5 s, ~300 MB)")
	}
	files := map[string]string{}
	root := filepath.Join("..", "examples", "classic")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(p, filepath.Join(root, "worker")) {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		files[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	bom := files["resources/bom.cue"]
	delete(files, "resources/bom.cue")
	dir := gittest.Repo(t, files)
	src, err := OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	rec := &memRecords{recs: map[string]*converge.RevisionRecord{}, snap: &converge.Snapshot{}}
	eng := &countingEngine{}
	// The deadline is short only where the test wants a load to pass
	// it: the classic BOM's own load (a few hundred ms on a loaded
	// machine) gets all the time it needs before and after.
	s := &Syncer{Source: src, Records: rec, Engine: eng, LoadTimeout: time.Minute}
	if _, err := s.Advance(context.Background()); err != nil || len(eng.applied) != 1 {
		t.Fatalf("first Advance: %v, applied %v", err, eng.applied)
	}
	s.LoadTimeout = 300 * time.Millisecond
	big := strings.Replace(bom, "_teams:    1176", "_teams:    60000", 1)
	if big == bom {
		t.Fatal("the classic BOM no longer sets _teams: 1176")
	}
	gittest.Write(t, dir, map[string]string{"resources/bom.cue": big})
	gittest.Run(t, dir, "add", "-A")
	gittest.Run(t, dir, "commit", "-q", "-m", "a BOM CUE takes seconds to evaluate")
	slow := gittest.Run(t, dir, "rev-parse", "HEAD")
	gittest.Run(t, dir, "revert", "--no-edit", "HEAD")
	fix := gittest.Run(t, dir, "rev-parse", "HEAD")

	// The slow commit times out and is passed over; the revert waits for
	// the abandoned evaluation, past its own deadline: tried again later.
	_, err = s.Advance(context.Background())
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), fix) {
		t.Fatalf("Advance: %v, want the revert %s timed out behind the slow load", err, fix)
	}
	st, _ := rec.recs[slow].Status(converge.ContextSync)
	if want := "not applied: load main@sha1:" + slow + ": timed out after 300ms"; !strings.HasPrefix(st.Description, want) ||
		!strings.HasSuffix(st.Description, "; a newer commit was checked instead") || st.State != converge.StateFailure {
		t.Errorf("verdict of the slow commit: %+v, want failure %q…", st, want)
	}
	s.loading.get() <- struct{}{} // the abandoned evaluation has ended
	<-s.loading.get()
	s.LoadTimeout = time.Minute
	if _, err := s.Advance(context.Background()); err != nil {
		t.Fatalf("Advance after the slow load ended: %v", err)
	}
	if got := eng.applied; len(got) != 2 || got[1] != fix {
		t.Errorf("applied %v, want the revert %s last", got, fix)
	}
}
