package sync

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/convergehq/converge"
)

// ErrNoRepository is returned when the path is not inside a git repository.
var ErrNoRepository = errors.New("not a git repository")

// Source is a git repository converge reads desired state from, and the
// branch it follows.
type Source struct {
	repo *git.Repository
	// root is the top of the local work tree ("" for a bare repository).
	root string
	// ref is the branch followed, short form ("main"); "HEAD" when the
	// repository's HEAD is detached.
	ref string
	// url is the remote's URL for a mirror ("" for a local repository),
	// and auth its credentials.
	url  string
	auth transport.AuthMethod
	// timeout bounds each fetch and push (0: DefaultGitTimeout); git
	// lets one of them at a time touch the repository, an abandoned one
	// included.
	timeout atomic.Int64 // a time.Duration
	git     gate
}

// SetTimeout bounds each later fetch and push of notes (0:
// DefaultGitTimeout). One that takes longer is abandoned with an error
// wrapping ErrTimeout.
// It is safe to call while a fetch or push runs (the next one uses it).
func (s *Source) SetTimeout(d time.Duration) { s.timeout.Store(int64(d)) }

// Timeout returns what bounds each fetch and push of notes.
func (s *Source) Timeout() time.Duration {
	if d := time.Duration(s.timeout.Load()); d > 0 {
		return d
	}
	return DefaultGitTimeout
}

// gitOp runs op (a clone, fetch or push named what) bounded by s's
// timeout (bounded). op must not write anything its caller reads but
// its result: an abandoned op runs on.
func gitOp[T any](ctx context.Context, s *Source, what string, op func(context.Context) (T, error)) (T, error) {
	return bounded(ctx, &s.git, s.Timeout(), what, "--git-timeout, git_timeout in converge.cue", op)
}

// OpenLocal opens the repository containing path (a work tree or a bare
// repository). ref is the branch to follow; "" follows the branch HEAD
// points at.
func OpenLocal(path, ref string) (*Source, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open repository %s: %w", path, err)
	}
	repo, err := git.PlainOpenWithOptions(abs, &git.PlainOpenOptions{DetectDotGit: true})
	if errors.Is(err, git.ErrRepositoryNotExists) {
		return nil, fmt.Errorf("open repository %s: %w", path, ErrNoRepository)
	}
	if err != nil {
		return nil, fmt.Errorf("open repository %s: %w", path, err)
	}
	s := &Source{repo: repo}
	if wt, err := repo.Worktree(); err == nil {
		s.root = wt.Filesystem.Root()
	}
	if ref == "" {
		head, err := repo.Reference(plumbing.HEAD, false)
		if err != nil {
			return nil, fmt.Errorf("read HEAD of %s: %w", path, err)
		}
		ref = "HEAD"
		if head.Type() == plumbing.SymbolicReference && head.Target().IsBranch() {
			ref = head.Target().Short()
		}
	}
	s.ref = ref
	return s, nil
}

// Root returns the top of the local work tree, or "" for a bare repository.
func (s *Source) Root() string { return s.root }

// Ref returns the branch the source follows.
func (s *Source) Ref() string { return s.ref }

// Head resolves the followed branch to its newest commit.
func (s *Source) Head() (converge.Revision, error) {
	var h *plumbing.Hash
	var err error
	if s.ref == "HEAD" {
		h, err = s.repo.ResolveRevision(plumbing.Revision("HEAD"))
	} else {
		var r *plumbing.Reference
		r, err = s.repo.Reference(plumbing.NewBranchReferenceName(s.ref), true)
		if err == nil {
			hh := r.Hash()
			h = &hh
		}
	}
	if err != nil {
		return converge.Revision{}, fmt.Errorf("resolve %s: %w", s.ref, err)
	}
	return s.Revision(h.String())
}

// Revision describes the commit named by rev (a hash, branch or any
// revision expression go-git resolves).
func (s *Source) Revision(rev string) (converge.Revision, error) {
	h, err := s.repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return converge.Revision{}, fmt.Errorf("resolve %s: %w", rev, err)
	}
	c, err := s.repo.CommitObject(*h)
	if err != nil {
		return converge.Revision{}, fmt.Errorf("read commit %s: %w", h, err)
	}
	subject, _, _ := strings.Cut(c.Message, "\n")
	return converge.Revision{Ref: s.ref, Hash: h.String(), Time: c.Committer.When.UTC(), Subject: subject}, nil
}

// Message returns the whole message of the commit hash and its author
// ("Name <email>").
func (s *Source) Message(hash string) (message, author string, err error) {
	c, err := s.repo.CommitObject(plumbing.NewHash(hash))
	if err != nil {
		return "", "", fmt.Errorf("read commit %s: %w", hash, err)
	}
	return c.Message, c.Author.Name + " <" + c.Author.Email + ">", nil
}

// FS returns the files of rev's tree below sub ("" or "." for the root) as
// a read-only fs.FS.
func (s *Source) FS(rev converge.Revision, sub string) (fs.FS, error) {
	c, err := s.repo.CommitObject(plumbing.NewHash(rev.Hash))
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", rev.Hash, err)
	}
	t, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("read tree of %s: %w", rev.Hash, err)
	}
	var fsys fs.FS = &treeFS{root: t, mtime: c.Committer.When}
	if strings.HasPrefix(filepath.ToSlash(sub), "/") {
		return nil, fmt.Errorf("path %q: must be a relative path inside the repository", sub)
	}
	sub = strings.TrimSuffix(filepath.ToSlash(sub), "/")
	if sub == "" || sub == "." {
		return fsys, nil
	}
	if !fs.ValidPath(sub) {
		return nil, fmt.Errorf("path %q: must be a relative path inside the repository", sub)
	}
	fi, err := fs.Stat(fsys, sub)
	if err != nil {
		return nil, fmt.Errorf("path %s at %s: %w", sub, rev, fs.ErrNotExist)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("path %s at %s: not a directory", sub, rev)
	}
	return fs.Sub(fsys, sub)
}
