package sync

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/convergehq/converge"
)

// NotesRef is the ref holding converge's commit statuses as git notes:
// `git notes --ref converge show REV` prints them.
const NotesRef = "refs/notes/converge"

// ErrNoNote is returned by ReadStatuses when the commit has no note under
// NotesRef.
var ErrNoNote = errors.New("no converge note")

// Note is the JSON document stored as a commit's note under NotesRef:
//
//	{
//	  "statuses": [
//	    {"context": "converge/validate", "state": "success", "description": "…", "time": "…"},
//	    …
//	  ]
//	}
//
// The format is stable: new information is only ever added as new keys.
// Statuses are ordered validate, lint, sync, then any other context by
// name.
type Note struct {
	Statuses []converge.CommitStatus `json:"statuses"`
}

// DefaultStateDir is the state directory of a local repository when none
// is named: .converge/ at the top of its work tree.
const DefaultStateDir = ".converge"

// NotesOwner returns the state directory that owns the source's git notes
// (and the forge statuses copied from them): only that state writes them,
// so a run on another state (a scratch --state) never replaces the
// repository's verdicts with its own. It is, in order:
//
//   - the directory `git config converge.state` names (relative to the
//     work tree's top, or absolute);
//   - for a remote repository, stateDir itself: the notes are in the
//     mirror inside the state directory, and only --push-status copies
//     them to the remote;
//   - for a local work tree, DefaultStateDir at its top;
//   - for a local bare repository, stateDir (there is no default).
func (s *Source) NotesOwner(stateDir string) (string, error) {
	cfg, err := s.repo.Config()
	if err != nil {
		return "", fmt.Errorf("read notes owner: %w", err)
	}
	if v := cfg.Raw.Section("converge").Option("state"); v != "" {
		if !filepath.IsAbs(v) && s.root != "" {
			v = filepath.Join(s.root, v)
		}
		return filepath.Clean(v), nil
	}
	if s.Remote() || s.root == "" {
		return stateDir, nil
	}
	return filepath.Join(s.root, DefaultStateDir), nil
}

// OwnsNotes reports whether the state in stateDir owns the source's notes
// (NotesOwner), and which state does.
func (s *Source) OwnsNotes(stateDir string) (owns bool, owner string, err error) {
	owner, err = s.NotesOwner(stateDir)
	if err != nil {
		return false, "", err
	}
	return sameDir(owner, stateDir), owner, nil
}

// sameDir reports whether a and b name the same directory (either may not
// exist yet).
func sameDir(a, b string) bool {
	if ea, err := filepath.EvalSymlinks(a); err == nil {
		a = ea
	}
	if eb, err := filepath.EvalSymlinks(b); err == nil {
		b = eb
	}
	return filepath.Clean(a) == filepath.Clean(b)
}

// notesCASRetries bounds WriteStatuses' attempts when another writer moves
// the notes ref between its read and its compare-and-swap.
const notesCASRetries = 8

// ErrNotesLocked is returned when NotesRef stays locked (its .lock file
// exists) for longer than notesLockWait: another writer is slow, or one
// crashed and left the lock behind (then remove
// .git/refs/notes/converge.lock, as git would tell you).
var ErrNotesLocked = errors.New("notes ref locked by another writer")

// notesLockWait bounds how long WriteStatuses waits for another writer's
// lock on NotesRef.
const notesLockWait = 5 * time.Second

// notesSignature is the author and committer of notes commits.
var notesSignature = object.Signature{Name: "converge", Email: "converge@localhost"}

// WriteStatuses stores statuses as the note of commit hash under NotesRef,
// replacing the note it had and keeping every other commit's note. It
// writes the blob, the notes tree (flat or with the fan-out directories
// `git notes` makes for many notes) and a notes commit whose parent is
// the previous notes commit, then moves the ref with a compare-and-swap,
// retrying when another writer won the race. A note identical to the
// stored one writes nothing.
//
// Writers take git's lock file on the ref first, so converge processes
// and the git CLI take turns; the compare-and-swap also guards against a
// writer that ignores the lock.
func (s *Source) WriteStatuses(hash string, statuses []converge.CommitStatus) (err error) {
	target, err := s.commitHash(hash)
	if err != nil {
		return fmt.Errorf("write statuses: %w", err)
	}
	body, err := encodeNote(statuses)
	if err != nil {
		return fmt.Errorf("write statuses of %s: %w", target, err)
	}
	blob, err := s.putObject(plumbing.BlobObject, body)
	if err != nil {
		return fmt.Errorf("write statuses of %s: %w", target, err)
	}
	lock, err := s.lockNotes()
	if err != nil {
		return fmt.Errorf("write statuses of %s: %w", target, err)
	}
	defer func() {
		if rerr := lock.release(); rerr != nil {
			err = errors.Join(err, fmt.Errorf("write statuses of %s: %w", target, rerr))
		}
	}()
	for range notesCASRetries {
		err = s.writeNote(lock, target, blob)
		if !errors.Is(err, storage.ErrReferenceHasChanged) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("write statuses of %s: %w", target, err)
	}
	return nil
}

// notesLock is git's lock on NotesRef: the file refs/notes/converge.lock,
// created exclusively, as git itself does before it updates a ref. Holding
// it, a writer updates the ref as git does: it writes the new hash into the
// lock file and renames that over the ref, so a reader (git included)
// never sees the ref file half written.
type notesLock struct {
	fsys billy.Filesystem // nil: storage not on a file system, no lock
	f    billy.File       // the open lock file
	done bool             // the lock file was renamed over the ref or removed
}

// lockNotes takes the lock, waiting up to notesLockWait for another
// holder (converge or git).
func (s *Source) lockNotes() (*notesLock, error) {
	fss, ok := s.repo.Storer.(*filesystem.Storage)
	if !ok {
		return &notesLock{}, nil
	}
	fsys := fss.Filesystem()
	deadline := time.Now().Add(notesLockWait)
	for {
		f, err := fsys.OpenFile(NotesRef+".lock", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err == nil {
			return &notesLock{fsys: fsys, f: f}, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("lock %s: %w", NotesRef, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("lock %s: %w", NotesRef, ErrNotesLocked)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// release removes the lock file unless it became the ref.
// release removes the lock file unless the ref update consumed it. A
// lock that cannot be removed is an error: left behind, it would block
// every later note write, git's own included.
func (l *notesLock) release() error {
	if l.fsys == nil || l.done {
		return nil
	}
	l.done = true
	cerr := l.f.Close()
	if err := l.fsys.Remove(NotesRef + ".lock"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s.lock: %w (remove it by hand once no converge or git writes notes)", NotesRef, err)
	}
	return cerr
}

// setNotesRef points NotesRef at h if it still is old (nil: absent), or
// returns storage.ErrReferenceHasChanged.
func (s *Source) setNotesRef(l *notesLock, h plumbing.Hash, old *plumbing.Reference) error {
	ref := plumbing.NewHashReference(plumbing.ReferenceName(NotesRef), h)
	if l.fsys == nil {
		return s.repo.Storer.CheckAndSetReference(ref, old)
	}
	cur, err := s.notesRef()
	if err != nil && !errors.Is(err, plumbing.ErrReferenceNotFound) {
		return err
	}
	if (cur == nil) != (old == nil) || (cur != nil && cur.Hash() != old.Hash()) {
		return storage.ErrReferenceHasChanged
	}
	if _, err := l.f.Write([]byte(h.String() + "\n")); err != nil {
		return err
	}
	if err := l.f.Close(); err != nil {
		return err
	}
	l.done = true // closed; removed or renamed below
	if err := l.fsys.Rename(NotesRef+".lock", NotesRef); err != nil {
		if rerr := l.fsys.Remove(NotesRef + ".lock"); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return errors.Join(err, fmt.Errorf("remove %s.lock: %w", NotesRef, rerr))
		}
		return err
	}
	return nil
}

// writeNote makes one attempt at pointing NotesRef at a notes commit whose
// tree maps target to blob.
func (s *Source) writeNote(lock *notesLock, target, blob plumbing.Hash) error {
	old, err := s.notesRef()
	if err != nil && !errors.Is(err, plumbing.ErrReferenceNotFound) {
		return fmt.Errorf("read %s: %w", NotesRef, err)
	}
	var parent *object.Commit
	var tree *object.Tree
	if old != nil {
		if parent, err = s.repo.CommitObject(old.Hash()); err != nil {
			return fmt.Errorf("read notes commit: %w", err)
		}
		if tree, err = parent.Tree(); err != nil {
			return fmt.Errorf("read notes tree: %w", err)
		}
	}
	root, changed, err := s.putNote(tree, target.String(), blob)
	if err != nil {
		return err
	}
	if !changed {
		return nil
	}
	now := time.Now()
	c := &object.Commit{
		Author:    notesSignature,
		Committer: notesSignature,
		Message:   "converge: statuses of " + target.String() + "\n",
		TreeHash:  root,
	}
	c.Author.When, c.Committer.When = now, now
	if parent != nil {
		c.ParentHashes = []plumbing.Hash{parent.Hash}
	}
	obj := s.repo.Storer.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return fmt.Errorf("encode notes commit: %w", err)
	}
	ch, err := s.repo.Storer.SetEncodedObject(obj)
	if err != nil {
		return fmt.Errorf("store notes commit: %w", err)
	}
	if err := s.setNotesRef(lock, ch, old); err != nil {
		if errors.Is(err, storage.ErrReferenceHasChanged) {
			return err
		}
		return fmt.Errorf("update %s: %w", NotesRef, err)
	}
	return nil
}

// notesRef reads NotesRef. go-git updates a loose ref by truncating and
// rewriting its file under a lock that readers do not take, so a reader
// can see the file empty, which go-git reports as ErrReferenceNotFound;
// while the loose file exists, notesRef reads again (up to ~50 ms) rather
// than take a ref being rewritten for an absent one.
func (s *Source) notesRef() (*plumbing.Reference, error) {
	name := plumbing.ReferenceName(NotesRef)
	for i := 0; ; i++ {
		ref, err := s.repo.Storer.Reference(name)
		if !errors.Is(err, plumbing.ErrReferenceNotFound) || i == 50 {
			return ref, err
		}
		fss, ok := s.repo.Storer.(*filesystem.Storage)
		if !ok {
			return ref, err
		}
		if _, serr := fss.Filesystem().Stat(NotesRef); serr != nil {
			return ref, err
		}
		time.Sleep(time.Millisecond)
	}
}

// putNote stores a copy of tree (nil: empty) in which the note of the
// commit whose remaining hex is name points at blob, and returns the new
// tree's hash. It descends into a fan-out directory named after the next
// two hex digits when tree has one, as `git notes` does, and otherwise
// writes the note at this level. changed is false when the note already
// pointed at blob.
func (s *Source) putNote(tree *object.Tree, name string, blob plumbing.Hash) (plumbing.Hash, bool, error) {
	var entries []object.TreeEntry
	if tree != nil {
		entries = append(entries, tree.Entries...)
	}
	for i, e := range entries {
		switch {
		case e.Mode == filemode.Dir && len(name) > 2 && e.Name == name[:2]:
			sub, err := s.repo.TreeObject(e.Hash)
			if err != nil {
				return plumbing.ZeroHash, false, fmt.Errorf("read notes tree %s: %w", e.Name, err)
			}
			h, changed, err := s.putNote(sub, name[2:], blob)
			if err != nil || !changed {
				return plumbing.ZeroHash, changed, err
			}
			entries[i].Hash = h
			return s.putTree(entries)
		case e.Mode != filemode.Dir && e.Name == name:
			if e.Hash == blob {
				return plumbing.ZeroHash, false, nil
			}
			entries[i].Hash = blob
			return s.putTree(entries)
		}
	}
	entries = append(entries, object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: blob})
	return s.putTree(entries)
}

// putTree stores a tree of entries in git's order (names compared as if
// directories ended in "/").
func (s *Source) putTree(entries []object.TreeEntry) (plumbing.Hash, bool, error) {
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(entries, func(i, j int) bool { return key(entries[i]) < key(entries[j]) })
	obj := s.repo.Storer.NewEncodedObject()
	if err := (&object.Tree{Entries: entries}).Encode(obj); err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("encode notes tree: %w", err)
	}
	h, err := s.repo.Storer.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("store notes tree: %w", err)
	}
	return h, true, nil
}

// putObject stores body as a loose object of type t.
func (s *Source) putObject(t plumbing.ObjectType, body []byte) (plumbing.Hash, error) {
	obj := s.repo.Storer.NewEncodedObject()
	obj.SetType(t)
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("store %s: %w", t, err)
	}
	if _, err := w.Write(body); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("store %s: %w", t, err)
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("store %s: %w", t, err)
	}
	h, err := s.repo.Storer.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("store %s: %w", t, err)
	}
	return h, nil
}

// ReadStatuses returns the statuses stored as the note of commit hash
// (any revision go-git resolves) under NotesRef, or ErrNoNote. It reads
// flat and fanned-out notes trees, and notes written by `git notes` as
// well as by WriteStatuses; a note that is a bare JSON list of statuses
// is accepted too.
func (s *Source) ReadStatuses(hash string) ([]converge.CommitStatus, error) {
	target, err := s.commitHash(hash)
	if err != nil {
		return nil, fmt.Errorf("read statuses: %w", err)
	}
	ref, err := s.notesRef()
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return nil, fmt.Errorf("read statuses of %s: %w", target, ErrNoNote)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", NotesRef, err)
	}
	c, err := s.repo.CommitObject(ref.Hash())
	if err != nil {
		return nil, fmt.Errorf("read notes commit: %w", err)
	}
	tree, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("read notes tree: %w", err)
	}
	blob, err := s.findNote(tree, target.String())
	if err != nil {
		return nil, fmt.Errorf("read statuses of %s: %w", target, err)
	}
	b, err := s.repo.BlobObject(blob)
	if err != nil {
		return nil, fmt.Errorf("read note of %s: %w", target, err)
	}
	r, err := b.Reader()
	if err != nil {
		return nil, fmt.Errorf("read note of %s: %w", target, err)
	}
	defer r.Close()
	body, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read note of %s: %w", target, err)
	}
	st, err := decodeNote(body)
	if err != nil {
		return nil, fmt.Errorf("decode note of %s: %w", target, err)
	}
	return st, nil
}

// findNote returns the blob noting the commit whose remaining hex is
// name, looking at this level and in fan-out directories.
func (s *Source) findNote(tree *object.Tree, name string) (plumbing.Hash, error) {
	for _, e := range tree.Entries {
		switch {
		case e.Mode != filemode.Dir && e.Name == name:
			return e.Hash, nil
		case e.Mode == filemode.Dir && len(e.Name) == 2 && strings.HasPrefix(name, e.Name) && len(name) > 2:
			sub, err := s.repo.TreeObject(e.Hash)
			if err != nil {
				return plumbing.ZeroHash, fmt.Errorf("read notes tree %s: %w", e.Name, err)
			}
			if h, err := s.findNote(sub, name[2:]); err == nil {
				return h, nil
			}
		}
	}
	return plumbing.ZeroHash, ErrNoNote
}

// PushNotes pushes NotesRef to the source's "origin" remote (the
// --push-status of a remote source), with the source's credentials. It
// never forces: when the remote's notes have moved on (another writer
// pushed), it fetches them, merges them into the local notes (mergeNotes)
// and pushes again, up to three times. Nothing to push is not an error.
func (s *Source) PushNotes(ctx context.Context) error {
	where := s.url
	if where == "" {
		where = "origin"
	}
	_, err := gitOp(ctx, s, "push "+NotesRef+" to "+where, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.pushNotes(ctx)
	})
	return err
}

// pushNotes is PushNotes, unbounded.
func (s *Source) pushNotes(ctx context.Context) error {
	spec := config.RefSpec(NotesRef + ":" + NotesRef)
	for attempt := 1; ; attempt++ {
		err := s.repo.PushContext(ctx, &git.PushOptions{RemoteName: "origin", RefSpecs: []config.RefSpec{spec}, Auth: s.auth})
		if err == nil || errors.Is(err, git.NoErrAlreadyUpToDate) {
			return nil
		}
		if attempt == 3 || !strings.Contains(err.Error(), "non-fast-forward") {
			return fmt.Errorf("push %s: %w", NotesRef, err)
		}
		if err := s.pullNotes(ctx); err != nil {
			return fmt.Errorf("push %s: %w", NotesRef, err)
		}
	}
}

// remoteNotesRef holds the remote's notes while they are merged.
const remoteNotesRef = "refs/converge/remote-notes"

// pullNotes fetches the remote's NotesRef and merges it into the local
// one.
func (s *Source) pullNotes(ctx context.Context) error {
	spec := config.RefSpec("+" + NotesRef + ":" + remoteNotesRef)
	err := s.repo.FetchContext(ctx, &git.FetchOptions{RemoteName: "origin", RefSpecs: []config.RefSpec{spec},
		Auth: s.auth, Tags: git.NoTags, Force: true})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return fmt.Errorf("fetch %s: %w", NotesRef, err)
	}
	theirs, err := s.repo.Storer.Reference(remoteNotesRef)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", NotesRef, err)
	}
	return s.mergeNotes(theirs.Hash().String())
}

// mergeNotes merges the notes commit theirs into NotesRef. When one side
// contains the other, NotesRef ends at the newer one. Otherwise a merge
// commit (parents: ours, theirs) gets a flat notes tree with every note of
// both sides; a commit noted on both keeps the local note, the verdict
// this converge reached.
func (s *Source) mergeNotes(theirs string) (err error) {
	lock, err := s.lockNotes()
	if err != nil {
		return fmt.Errorf("merge notes: %w", err)
	}
	defer func() {
		if rerr := lock.release(); rerr != nil {
			err = errors.Join(err, fmt.Errorf("merge notes: %w", rerr))
		}
	}()
	tc, err := s.repo.CommitObject(plumbing.NewHash(theirs))
	if err != nil {
		return fmt.Errorf("merge notes: read %s: %w", theirs, err)
	}
	old, err := s.notesRef()
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return s.setNotesRef(lock, tc.Hash, nil)
	}
	if err != nil {
		return fmt.Errorf("merge notes: %w", err)
	}
	oc, err := s.repo.CommitObject(old.Hash())
	if err != nil {
		return fmt.Errorf("merge notes: read %s: %w", old.Hash(), err)
	}
	if oc.Hash == tc.Hash {
		return nil
	}
	if ok, err := tc.IsAncestor(oc); err != nil || ok {
		return err // ours already has theirs
	}
	if ok, err := oc.IsAncestor(tc); err != nil {
		return err
	} else if ok {
		return s.setNotesRef(lock, tc.Hash, old)
	}
	merged := map[string]plumbing.Hash{}
	for _, c := range []*object.Commit{tc, oc} { // ours last: ours wins
		t, err := c.Tree()
		if err != nil {
			return fmt.Errorf("merge notes: %w", err)
		}
		if err := s.flattenNotes(t, "", merged); err != nil {
			return fmt.Errorf("merge notes: %w", err)
		}
	}
	entries := make([]object.TreeEntry, 0, len(merged))
	for name, h := range merged {
		entries = append(entries, object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: h})
	}
	root, _, err := s.putTree(entries)
	if err != nil {
		return fmt.Errorf("merge notes: %w", err)
	}
	now := time.Now()
	c := &object.Commit{Author: notesSignature, Committer: notesSignature, TreeHash: root,
		Message: "converge: merge notes from origin\n", ParentHashes: []plumbing.Hash{oc.Hash, tc.Hash}}
	c.Author.When, c.Committer.When = now, now
	obj := s.repo.Storer.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return fmt.Errorf("merge notes: encode commit: %w", err)
	}
	h, err := s.repo.Storer.SetEncodedObject(obj)
	if err != nil {
		return fmt.Errorf("merge notes: store commit: %w", err)
	}
	return s.setNotesRef(lock, h, old)
}

// flattenNotes adds every note below tree to notes, keyed by the noted
// commit's full hex (prefix holds the fan-out directories above). Entries
// that are not notes are left out.
func (s *Source) flattenNotes(tree *object.Tree, prefix string, notes map[string]plumbing.Hash) error {
	for _, e := range tree.Entries {
		name := prefix + e.Name
		switch {
		case e.Mode == filemode.Dir && len(e.Name) == 2 && len(name) < 40:
			sub, err := s.repo.TreeObject(e.Hash)
			if err != nil {
				return fmt.Errorf("read notes tree %s: %w", name, err)
			}
			if err := s.flattenNotes(sub, name, notes); err != nil {
				return err
			}
		case e.Mode != filemode.Dir && plumbing.IsHash(name):
			notes[name] = e.Hash
		}
	}
	return nil
}

// commitHash resolves rev to the hash of a commit.
func (s *Source) commitHash(rev string) (plumbing.Hash, error) {
	if plumbing.IsHash(rev) {
		h := plumbing.NewHash(rev)
		if _, err := s.repo.CommitObject(h); err != nil {
			return plumbing.ZeroHash, fmt.Errorf("read commit %s: %w", rev, err)
		}
		return h, nil
	}
	h, err := s.repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("resolve %s: %w", rev, err)
	}
	return *h, nil
}

// contextRank orders the known contexts first.
var contextRank = map[string]int{converge.ContextValidate: 0, converge.ContextLint: 1, converge.ContextSync: 2}

// encodeNote returns the Note of statuses as indented JSON ending in a
// newline, statuses in a stable order.
func encodeNote(statuses []converge.CommitStatus) ([]byte, error) {
	st := append([]converge.CommitStatus(nil), statuses...)
	rank := func(c string) int {
		if r, ok := contextRank[c]; ok {
			return r
		}
		return len(contextRank)
	}
	sort.SliceStable(st, func(i, j int) bool {
		ri, rj := rank(st[i].Context), rank(st[j].Context)
		if ri != rj {
			return ri < rj
		}
		return st[i].Context < st[j].Context
	})
	for i := range st {
		st[i].Time = st[i].Time.UTC()
	}
	if st == nil {
		st = []converge.CommitStatus{}
	}
	b, err := json.MarshalIndent(Note{Statuses: st}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// decodeNote reads a Note, or a bare JSON list of statuses.
func decodeNote(body []byte) ([]converge.CommitStatus, error) {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		var st []converge.CommitStatus
		err := json.Unmarshal(body, &st)
		return st, err
	}
	var n Note
	if err := json.Unmarshal(body, &n); err != nil {
		return nil, err
	}
	return n.Statuses, nil
}
