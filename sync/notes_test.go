package sync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/osfs"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/sync/gittest"
)

// commits makes n more empty commits in dir and returns their hashes,
// oldest first.
func commits(t *testing.T, dir string, n int) []string {
	t.Helper()
	var hs []string
	for i := range n {
		gittest.Run(t, dir, "commit", "-q", "--allow-empty", "-m", fmt.Sprintf("c%d", i))
		hs = append(hs, gittest.Run(t, dir, "rev-parse", "HEAD"))
	}
	return hs
}

func sampleStatuses(desc string) []converge.CommitStatus {
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	return []converge.CommitStatus{
		// Out of order on purpose: the note orders validate, lint, sync.
		{Context: converge.ContextSync, State: converge.StateSuccess, Description: desc, Time: at},
		{Context: converge.ContextValidate, State: converge.StateSuccess, Description: "27 documents valid", Time: at},
	}
}

func notesHead(t *testing.T, dir string) string {
	t.Helper()
	return gittest.Run(t, dir, "rev-parse", "--verify", "-q", NotesRef)
}

func TestWriteStatusesGitCLI(t *testing.T) {
	dir := gittest.Repo(t, map[string]string{"a.txt": "a"})
	hs := commits(t, dir, 2)
	src, err := OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.ReadStatuses(hs[0]); !errors.Is(err, ErrNoNote) {
		t.Fatalf("ReadStatuses before any note: got %v, want ErrNoNote", err)
	}
	want := sampleStatuses("3652/3652 Ready")
	if err := src.WriteStatuses(hs[0], want); err != nil {
		t.Fatal(err)
	}

	// git shows the note as the documented JSON.
	var n Note
	show := gittest.Run(t, dir, "notes", "--ref", "converge", "show", hs[0])
	if err := json.Unmarshal([]byte(show), &n); err != nil {
		t.Fatalf("git notes show is not a Note: %v\n%s", err, show)
	}
	if got, want := len(n.Statuses), 2; got != want {
		t.Fatalf("statuses in note: got %d, want %d", got, want)
	}
	if got, want := n.Statuses[0].Context, converge.ContextValidate; got != want {
		t.Errorf("first context: got %q, want %q", got, want)
	}
	if got, want := n.Statuses[1].Description, "3652/3652 Ready"; got != want {
		t.Errorf("sync description: got %q, want %q", got, want)
	}
	// git fsck finds the hand-made objects well formed.
	gittest.Run(t, dir, "fsck", "--strict", "--no-progress")

	got, err := src.ReadStatuses(hs[0])
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []converge.CommitStatus{want[1], want[0]}) {
		t.Errorf("ReadStatuses: got %+v, want %+v", got, want)
	}

	// Identical content: no new notes commit.
	before := notesHead(t, dir)
	if err := src.WriteStatuses(hs[0], want); err != nil {
		t.Fatal(err)
	}
	if got, want := notesHead(t, dir), before; got != want {
		t.Errorf("identical note moved the ref: got %s, want %s", got, want)
	}

	// A second commit's note keeps the first; the notes commit has the
	// previous one as parent. A revision expression resolves.
	if err := src.WriteStatuses("HEAD", sampleStatuses("1/1 Ready")); err != nil {
		t.Fatal(err)
	}
	if got, want := gittest.Run(t, dir, "rev-parse", NotesRef+"^"), before; got != want {
		t.Errorf("notes commit parent: got %s, want %s", got, want)
	}
	list := gittest.Run(t, dir, "notes", "--ref", "converge", "list")
	for _, h := range hs {
		if !strings.Contains(list, h) {
			t.Errorf("git notes list lacks %s:\n%s", h, list)
		}
	}
	if show := gittest.Run(t, dir, "notes", "--ref", "converge", "show", hs[0]); !strings.Contains(show, "3652/3652 Ready") {
		t.Errorf("first note lost:\n%s", show)
	}

	// Replacing a note changes it in place.
	if err := src.WriteStatuses(hs[0], sampleStatuses("stuck: 1/2 Ready")); err != nil {
		t.Fatal(err)
	}
	if show := gittest.Run(t, dir, "notes", "--ref", "converge", "show", hs[0]); !strings.Contains(show, "stuck: 1/2 Ready") {
		t.Errorf("replaced note:\n%s", show)
	}
	if got, want := strings.Count(gittest.Run(t, dir, "notes", "--ref", "converge", "list"), "\n")+1, 2; got != want {
		t.Errorf("notes after replace: got %d, want %d", got, want)
	}
	gittest.Run(t, dir, "fsck", "--strict", "--no-progress")
}

func TestReadStatusesFromGitNotes(t *testing.T) {
	dir := gittest.Repo(t, map[string]string{"a.txt": "a"})
	hs := commits(t, dir, 2)
	list := `[{"context":"converge/lint","state":"failure","description":"1 breaking change","time":"2026-11-30T10:00:00Z"}]`
	obj := `{"statuses":[{"context":"converge/sync","state":"pending","description":"applied, converging","time":"2026-11-30T10:00:00Z"}],"future":1}`
	gittest.Run(t, dir, "notes", "--ref", "converge", "add", "-m", list, hs[0])
	gittest.Run(t, dir, "notes", "--ref", "converge", "add", "-m", obj, hs[1])
	src, err := OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		rev       string
		wantState string
	}{
		{name: "bare list", rev: hs[0], wantState: converge.StateFailure},
		{name: "object with unknown key", rev: hs[1], wantState: converge.StatePending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := src.ReadStatuses(tc.rev)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(st), 1; got != want {
				t.Fatalf("statuses: got %d, want %d", got, want)
			}
			if got, want := st[0].State, tc.wantState; got != want {
				t.Errorf("state: got %q, want %q", got, want)
			}
		})
	}
	// Writing on top of git's notes commit keeps git's notes.
	if err := src.WriteStatuses(hs[1], sampleStatuses("2/2 Ready")); err != nil {
		t.Fatal(err)
	}
	if show := gittest.Run(t, dir, "notes", "--ref", "converge", "show", hs[0]); !strings.Contains(show, "1 breaking change") {
		t.Errorf("git's note lost:\n%s", show)
	}
}

// TestNotesFanout reads and writes a notes tree fanned out into two-digit
// directories, as git makes for many notes.
func TestNotesFanout(t *testing.T) {
	dir := gittest.Repo(t, map[string]string{"a.txt": "a"})
	hs := commits(t, dir, 3)
	// fast-import a notes commit with hs[0] and hs[1] under "xx/rest".
	var fi strings.Builder
	fmt.Fprintf(&fi, "commit %s\ncommitter t <t@t.invalid> 0 +0000\ndata 5\nnotes\n", NotesRef)
	for i, h := range hs[:2] {
		body := fmt.Sprintf(`[{"context":"converge/sync","state":"success","description":"fan %d","time":"2026-11-30T10:00:00Z"}]`, i)
		fmt.Fprintf(&fi, "M 100644 inline %s/%s\ndata %d\n%s\n", h[:2], h[2:], len(body), body)
	}
	fastImport := gittest.Command(dir, "fast-import", "--quiet")
	fastImport.Stdin = strings.NewReader(fi.String())
	if out, err := fastImport.CombinedOutput(); err != nil {
		t.Fatalf("git fast-import: %v\n%s", err, out)
	}
	src, err := OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	st, err := src.ReadStatuses(hs[1])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st[0].Description, "fan 1"; got != want {
		t.Errorf("fanned-out note: got %q, want %q", got, want)
	}
	// Replace a fanned-out note and add one that has no directory yet.
	if err := src.WriteStatuses(hs[0], sampleStatuses("replaced")); err != nil {
		t.Fatal(err)
	}
	if err := src.WriteStatuses(hs[2], sampleStatuses("new")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		rev      string
		wantDesc string
	}{
		{name: "replaced in its directory", rev: hs[0], wantDesc: "replaced"},
		{name: "kept", rev: hs[1], wantDesc: "fan 1"},
		{name: "added", rev: hs[2], wantDesc: "new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if show := gittest.Run(t, dir, "notes", "--ref", "converge", "show", tc.rev); !strings.Contains(show, tc.wantDesc) {
				t.Errorf("git notes show: want %q in\n%s", tc.wantDesc, show)
			}
		})
	}
	tree := gittest.Run(t, dir, "ls-tree", "-r", "--name-only", NotesRef)
	if got, want := tree, hs[0][:2]+"/"+hs[0][2:]; !strings.Contains(got, want) {
		t.Errorf("replaced note left its directory: want %s in\n%s", want, got)
	}
	if got, want := strings.Count(tree, "\n")+1, 3; got != want {
		t.Errorf("notes: got %d, want %d:\n%s", got, want, tree)
	}
	gittest.Run(t, dir, "fsck", "--strict", "--no-progress")
}

// TestWriteStatusesConcurrent runs writers with their own Source on one
// repository, from the first note on: the ref's lock file makes them take
// turns (and the compare-and-swap would catch one that did not), so no
// note is lost.
func TestWriteStatusesConcurrent(t *testing.T) {
	dir := gittest.Repo(t, map[string]string{"a.txt": "a"})
	hs := commits(t, dir, 12)
	var wg gosync.WaitGroup
	errs := make(chan error, len(hs))
	const writers = 3
	for w := range writers {
		src, err := OpenLocal(dir, "")
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for i := w; i < len(hs); i += writers {
				errs <- src.WriteStatuses(hs[i], sampleStatuses(fmt.Sprint(i)))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for i, h := range hs {
		if show := gittest.Run(t, dir, "notes", "--ref", "converge", "show", h); !strings.Contains(show, fmt.Sprintf("%q", fmt.Sprint(i))) {
			t.Errorf("note %d lost or wrong:\n%s", i, show)
		}
	}
}

// TestWriteStatusesBesideGit runs `git notes add` while WriteStatuses
// writes: converge never drops git's notes. (git itself moves the ref
// without comparing it to what it read, so git can drop a note converge
// wrote meanwhile, as it can one another git process wrote.)
func TestWriteStatusesBesideGit(t *testing.T) {
	dir := gittest.Repo(t, map[string]string{"a.txt": "a"})
	hs := commits(t, dir, 16)
	ours, theirs := hs[:8], hs[8:]
	src, err := OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	var wg gosync.WaitGroup
	errs := make(chan error, len(hs))
	wg.Go(func() {
		for i, h := range ours {
			errs <- src.WriteStatuses(h, sampleStatuses(fmt.Sprint(i)))
		}
	})
	// git fails rather than waits on a held lock: retry as a user would.
	wg.Go(func() {
		for _, h := range theirs {
			var err error
			for try := 0; try < 500; try++ {
				out, cerr := gittest.Command(dir, "notes", "--ref", "converge", "add", "-f", "-m", `[{"context":"converge/lint","state":"success","description":"by git"}]`, h).CombinedOutput()
				if cerr == nil {
					err = nil
					break
				}
				err = fmt.Errorf("git notes add: %v\n%s", cerr, out)
				if !strings.Contains(string(out), ".lock") {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for _, h := range theirs {
		st, err := src.ReadStatuses(h)
		if err != nil {
			t.Errorf("git's note on %s: %v", h, err)
			continue
		}
		if got, want := st[0].Description, "by git"; got != want {
			t.Errorf("git's note on %s: got %q, want %q", h, got, want)
		}
	}
	gittest.Run(t, dir, "fsck", "--strict", "--no-progress")
}

// TestWriteStatusesWaitsForLock: while git's lock file on the notes ref
// exists, WriteStatuses waits; once it is gone, it writes.
func TestWriteStatusesWaitsForLock(t *testing.T) {
	dir := gittest.Repo(t, map[string]string{"a.txt": "a"})
	head := gittest.Run(t, dir, "rev-parse", "HEAD")
	src, err := OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(dir, ".git", "refs", "notes", "converge.lock")
	if err := os.MkdirAll(filepath.Dir(lock), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- src.WriteStatuses(head, sampleStatuses("after the lock")) }()
	select {
	case err := <-done:
		t.Fatalf("WriteStatuses returned %v while the ref was locked", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(notesLockWait):
		t.Fatal("WriteStatuses still waiting after the lock was removed")
	}
	if show := gittest.Run(t, dir, "notes", "--ref", "converge", "show", head); !strings.Contains(show, "after the lock") {
		t.Errorf("note:\n%s", show)
	}
	if _, err := os.Stat(lock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file left behind: %v", err)
	}
}

func TestPushNotes(t *testing.T) {
	dir := gittest.Repo(t, map[string]string{"a.txt": "a"})
	bare := filepath.Join(t.TempDir(), "remote.git")
	gittest.Run(t, dir, "init", "-q", "--bare", bare)
	gittest.Run(t, dir, "remote", "add", "origin", "file://"+bare)
	gittest.Run(t, dir, "push", "-q", "origin", "main")
	src, err := OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	head := gittest.Run(t, dir, "rev-parse", "HEAD")
	if err := src.WriteStatuses(head, sampleStatuses("pushed")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := src.PushNotes(ctx); err != nil {
		t.Fatal(err)
	}
	if show := gittest.Run(t, bare, "notes", "--ref", "converge", "show", head); !strings.Contains(show, "pushed") {
		t.Errorf("remote note:\n%s", show)
	}
	// Pushing again with nothing new is not an error.
	if err := src.PushNotes(ctx); err != nil {
		t.Errorf("second push: %v", err)
	}
}

// TestPushNotesRemote: two mirrors of one remote push their notes; the
// second finds the remote moved on, merges and pushes, so the remote ends
// with every note, which git shows.
func TestPushNotesRemote(t *testing.T) {
	work := gittest.Repo(t, map[string]string{"a.txt": "a"})
	hs := commits(t, work, 3)
	bare := filepath.Join(t.TempDir(), "remote.git")
	gittest.Run(t, work, "init", "-q", "-b", "main", "--bare", bare)
	gittest.Run(t, work, "push", "-q", bare, "main")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	open := func() *Source {
		src, err := OpenRemote(ctx, RemoteOptions{URL: "file://" + bare, Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	a, b := open(), open()
	steps := []struct {
		name string
		src  *Source
		rev  string
		desc string
	}{
		{name: "a first", src: a, rev: hs[0], desc: "a on 0"},
		{name: "b behind", src: b, rev: hs[1], desc: "b on 1"},
		{name: "a behind", src: a, rev: hs[2], desc: "a on 2"},
		{name: "b again", src: b, rev: hs[0], desc: "b on 0"},
	}
	for _, st := range steps {
		if err := st.src.WriteStatuses(st.rev, sampleStatuses(st.desc)); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if err := st.src.PushNotes(ctx); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
	}
	for _, tc := range []struct {
		name     string
		rev      string
		wantDesc string
	}{
		{name: "latest writer of 0", rev: hs[0], wantDesc: "b on 0"},
		{name: "b's", rev: hs[1], wantDesc: "b on 1"},
		{name: "a's", rev: hs[2], wantDesc: "a on 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if show := gittest.Run(t, bare, "notes", "--ref", "converge", "show", tc.rev); !strings.Contains(show, tc.wantDesc) {
				t.Errorf("remote note: want %q in\n%s", tc.wantDesc, show)
			}
		})
	}
	gittest.Run(t, bare, "fsck", "--strict", "--no-progress")
}

// TestNotesOwner: a local repository's notes belong to .converge/ at its
// top unless `git config converge.state` (set with the git CLI) names
// another state; a scratch state owns nothing.
func TestNotesOwner(t *testing.T) {
	dir := gittest.Repo(t, map[string]string{"a.txt": "a"})
	src, err := OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	root := src.Root()
	scratch := t.TempDir()
	daemon := filepath.Join(t.TempDir(), "daemon-state")
	check := func(name, stateDir string, wantOwns bool, wantOwner string) {
		t.Helper()
		// Reopen: the CLI changed the config on disk.
		src, err := OpenLocal(dir, "")
		if err != nil {
			t.Fatal(err)
		}
		owns, owner, err := src.OwnsNotes(stateDir)
		if err != nil {
			t.Fatal(err)
		}
		if owns != wantOwns || owner != wantOwner {
			t.Errorf("%s: OwnsNotes(%s) = %v, %s; want %v, %s", name, stateDir, owns, owner, wantOwns, wantOwner)
		}
	}
	def := filepath.Join(root, DefaultStateDir)
	check("default state", def, true, def)
	check("scratch state", scratch, false, def)
	gittest.Run(t, dir, "config", "converge.state", daemon)
	check("configured state", daemon, true, daemon)
	check("default state once another is configured", def, false, daemon)
	gittest.Run(t, dir, "config", "converge.state", "state")
	check("configured relative to the work tree", filepath.Join(root, "state"), true, filepath.Join(root, "state"))
}

// TestNotesLockLeftBehindIsAnError: a notes lock that cannot be removed
// (here a non-empty directory in its place, which even root cannot
// remove with one unlink) is reported, not ignored: left behind it would
// block every later note write.
func TestNotesLockLeftBehindIsAnError(t *testing.T) {
	dir := t.TempDir()
	fsys := osfs.New(dir)
	f, err := fsys.Create("held")
	if err != nil {
		t.Fatal(err)
	}
	if err := fsys.MkdirAll(NotesRef+".lock/x", 0o755); err != nil {
		t.Fatal(err)
	}
	l := &notesLock{fsys: fsys, f: f}
	err = l.release()
	if err == nil || !strings.Contains(err.Error(), "remove refs/notes/converge.lock") {
		t.Fatalf("release = %v, want an error naming the lock", err)
	}
	if err := l.release(); err != nil {
		t.Errorf("second release = %v, want nil", err)
	}
}
