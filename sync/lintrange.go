package sync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	gosync "sync"

	"golang.org/x/sync/errgroup"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
)

// LintGroup is the findings of one commit of a linted range, or of the
// range as a whole (LintRange).
type LintGroup struct {
	// Header is "commit abc1234 subject" or "range abc1234..def5678".
	Header string
	// ID is the commit's hash, or "abc1234..def5678" for the range.
	ID       string
	Findings []converge.Finding
	// Range says the group is the range as a whole, not one commit.
	Range bool
}

// lintTree is one revision's documents below the linted path.
type lintTree struct {
	tree     fs.FS // nil when the path does not exist at the revision
	kinds    []*converge.Kind
	findings []converge.Finding
}

// LintRange lints each first-parent commit of base..head against its
// first parent, and head against the first commit's parent (the range as
// a whole): the breaking-change walk of `converge lint`. It returns one
// group per commit, oldest first, then the range group (left out when the
// range is a single commit: it would repeat it), and the number of
// commits. A commit's invalid documents are findings of its group.
//
// Loading (validating every document) is most of the cost: each distinct
// tree below sub is loaded once, on GOMAXPROCS goroutines, under sb's
// budget (in this process when sb is nil); reads of the git object
// database are serialized (go-git is not safe for concurrent use).
func LintRange(ctx context.Context, sb *cue.Sandbox, src *Source, sub, base, head string) ([]LintGroup, int, error) {
	commits, err := src.FirstParents(base, head)
	if err != nil {
		return nil, 0, err
	}
	// revs[0] is the first commit's parent (zero for a root commit),
	// revs[i+1] is commits[i]: along the first-parent chain, each commit's
	// parent is the one before it.
	revs := make([]converge.Revision, 0, len(commits)+2)
	if len(commits) > 0 {
		p, ok, err := src.FirstParent(commits[0])
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			p = converge.Revision{}
		}
		revs = append(revs, p)
	}
	revs = append(revs, commits...)
	keys := make([]string, len(revs))
	jobs := map[string]converge.Revision{}
	for i, r := range revs {
		if r.Hash == "" {
			continue // before the root commit: no documents
		}
		if keys[i], err = src.TreeHash(r, sub); err != nil {
			return nil, 0, err
		}
		if keys[i] != "" {
			jobs[keys[i]] = r
		}
	}
	trees, err := loadTrees(ctx, sb, src, sub, jobs)
	if err != nil {
		return nil, 0, err
	}
	at := func(i int) *lintTree {
		if l, ok := trees[keys[i]]; ok {
			return l
		}
		return &lintTree{}
	}
	var groups []LintGroup
	for i, c := range commits {
		prev, cur := at(i), at(i+1)
		fs := append([]converge.Finding{}, cur.findings...)
		fs = append(fs, lintTrees(prev, cur)...)
		groups = append(groups, LintGroup{Header: "commit " + shortHash(c.Hash) + " " + c.Subject, ID: c.Hash, Findings: fs})
	}
	if len(commits) > 1 {
		// The range as a whole starts at the first commit's parent: base
		// itself when head descends from it, else the point where head's
		// first-parent chain joins base's history (a branch behind main).
		h := commits[len(commits)-1]
		rng := shortHash(revs[0].Hash) + ".." + shortHash(h.Hash)
		groups = append(groups, LintGroup{Header: "range " + rng, ID: rng, Findings: lintTrees(at(0), at(len(commits))), Range: true})
	}
	return groups, len(commits), nil
}

// loadTrees loads the documents of each job (tree hash to a revision
// holding it) concurrently, each under the load budget (sb).
func loadTrees(ctx context.Context, sb *cue.Sandbox, src *Source, sub string, jobs map[string]converge.Revision) (map[string]*lintTree, error) {
	var mu gosync.Mutex // guards src and every tree read from it
	out := make(map[string]*lintTree, len(jobs))
	var outMu gosync.Mutex // guards out
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for key, rev := range jobs {
		g.Go(func() error {
			mu.Lock()
			tree, err := src.FS(rev, sub)
			mu.Unlock()
			if err != nil {
				return err
			}
			tree = &lockedFS{mu: &mu, fsys: tree}
			var res *cue.Result
			if sb != nil {
				res, err = sb.Load(ctx, tree, ".", cue.Options{})
			} else {
				res, err = cue.Load(tree, ".", cue.Options{})
			}
			if err != nil {
				return fmt.Errorf("load %s: %w", rev, err)
			}
			outMu.Lock()
			out[key] = &lintTree{tree: tree, kinds: res.Desired.Kinds, findings: res.Findings}
			outMu.Unlock()
			return nil
		})
	}
	return out, g.Wait()
}

// lockedFS serializes every access to a git tree FS (including DirEntry.Info,
// which reads blob sizes) with mu. It serves ReadDir, ReadFile and Stat,
// all that cue.Load and the lint locator use; Open reads the whole file
// under mu.
type lockedFS struct {
	mu   *gosync.Mutex
	fsys fs.FS
}

func (l *lockedFS) Open(name string) (fs.File, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fi, err := fs.Stat(l.fsys, name)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, &fs.PathError{Op: "open", Path: name, Err: errors.New("directory: use ReadDir")}
	}
	b, err := fs.ReadFile(l.fsys, name)
	if err != nil {
		return nil, err
	}
	return &memFile{Reader: bytes.NewReader(b), info: fi}, nil
}

func (l *lockedFS) ReadFile(name string) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fs.ReadFile(l.fsys, name)
}

func (l *lockedFS) Stat(name string) (fs.FileInfo, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fs.Stat(l.fsys, name)
}

func (l *lockedFS) ReadDir(name string) ([]fs.DirEntry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	es, err := fs.ReadDir(l.fsys, name)
	for i, e := range es {
		es[i] = lockedEntry{DirEntry: e, mu: l.mu}
	}
	return es, err
}

// lockedEntry is a DirEntry whose Info takes the tree's lock.
type lockedEntry struct {
	fs.DirEntry
	mu *gosync.Mutex
}

func (e lockedEntry) Info() (fs.FileInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.DirEntry.Info()
}

// memFile is a file read into memory.
type memFile struct {
	*bytes.Reader
	info fs.FileInfo
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *memFile) Close() error               { return nil }

// lintTrees lints cur's kinds against prev's. A kind version that is only
// missing because its document in cur is invalid (the file still has
// validation findings) is not reported as removed: its validation
// findings say what is wrong.
func lintTrees(prev, cur *lintTree) []converge.Finding {
	bad := map[string]bool{}
	for _, f := range cur.findings {
		bad[f.File] = true
	}
	var out []converge.Finding
	for _, f := range cue.LintTrees(prev.kinds, cur.kinds, prev.tree, cur.tree) {
		if f.Rule == cue.RuleKVRemoved && bad[f.File] {
			continue
		}
		out = append(out, f)
	}
	return out
}

// shortHash is hash's first seven characters, as git abbreviates it.
func shortHash(hash string) string {
	if len(hash) > 7 {
		return hash[:7]
	}
	return hash
}
