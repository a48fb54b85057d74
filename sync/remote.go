package sync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
)

// RemoteOptions configure OpenRemote.
type RemoteOptions struct {
	// URL of the repository: file://, http(s)://, ssh:// or git://, or an
	// scp-like user@host:path.
	URL string
	// Ref is the branch to follow; "" follows the remote's HEAD branch.
	Ref string
	// Dir is the parent directory of the local mirror (the state
	// directory's "sources").
	Dir string
	// Auth authenticates to the remote (nil for none).
	Auth transport.AuthMethod
	// Timeout bounds the first clone and each fetch and push of notes
	// (0: DefaultGitTimeout); see Source.SetTimeout.
	Timeout time.Duration
}

// OpenRemote opens the local bare mirror of a remote repository, cloning
// it into o.Dir on first use. Documents are read from the mirror's
// objects; Fetch brings new commits.
func OpenRemote(ctx context.Context, o RemoteOptions) (*Source, error) {
	dir := mirrorDir(o.Dir, o.URL)
	s := &Source{url: o.URL, auth: o.Auth, ref: o.Ref}
	s.SetTimeout(o.Timeout)
	repo, err := git.PlainOpen(dir)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		if err := os.MkdirAll(o.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("clone %s: %w", o.URL, err)
		}
		opts := &git.CloneOptions{URL: o.URL, Auth: o.Auth, Tags: git.NoTags, SingleBranch: true}
		if o.Ref != "" {
			opts.ReferenceName = plumbing.NewBranchReferenceName(o.Ref)
		}
		// The clone is made beside dir and renamed into place: a clone
		// abandoned at its deadline, or cut short by the process's end,
		// never leaves a half mirror where the next run would open it.
		tmp := dir + ".clone"
		if err := os.RemoveAll(tmp); err != nil {
			return nil, fmt.Errorf("clone %s: %w", o.URL, err)
		}
		_, err = gitOp(ctx, s, "clone "+o.URL, func(ctx context.Context) (struct{}, error) {
			_, err := git.PlainCloneContext(ctx, tmp, true, opts)
			if err == nil {
				err = os.Rename(tmp, dir)
			}
			if err != nil {
				os.RemoveAll(tmp)
			}
			return struct{}{}, err
		})
		if errors.Is(err, ErrTimeout) || errors.Is(err, context.Canceled) {
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("clone %s: %w", o.URL, err)
		}
		if repo, err = git.PlainOpen(dir); err != nil {
			return nil, fmt.Errorf("open mirror of %s: %w", o.URL, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("open mirror of %s: %w", o.URL, err)
	}
	s.repo = repo
	if s.ref == "" {
		head, err := repo.Reference(plumbing.HEAD, false)
		if err != nil {
			return nil, fmt.Errorf("read HEAD of mirror of %s: %w", o.URL, err)
		}
		s.ref = head.Target().Short()
	}
	return s, nil
}

// mirrorDir is where the mirror of url lives below dir.
func mirrorDir(dir, url string) string {
	sum := sha256.Sum256([]byte(url))
	return filepath.Join(dir, hex.EncodeToString(sum[:8]))
}

// Remote reports whether the source is a mirror of a remote repository.
// A remote repository never makes converge start a command.
func (s *Source) Remote() bool { return s.url != "" }

// URL returns the remote's URL, or "" for a local repository.
func (s *Source) URL() string { return s.url }

// Fetch brings the followed branch up to date with the remote. It asks the
// remote for its head first and skips the fetch when that is the commit
// the mirror already has. It reports whether the branch moved. For a local
// repository it does nothing.
func (s *Source) Fetch(ctx context.Context) (moved bool, err error) {
	if s.url == "" {
		return false, nil
	}
	return gitOp(ctx, s, "fetch "+s.url, s.fetch)
}

// fetch is Fetch, unbounded.
func (s *Source) fetch(ctx context.Context) (moved bool, err error) {
	branch := plumbing.NewBranchReferenceName(s.ref)
	remote, err := s.repo.Remote("origin")
	if err != nil {
		return false, fmt.Errorf("fetch %s: %w", s.url, err)
	}
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: s.auth})
	if err != nil {
		return false, fmt.Errorf("list %s: %w", s.url, err)
	}
	var want plumbing.Hash
	for _, r := range refs {
		if r.Name() == branch {
			want = r.Hash()
		}
	}
	if want.IsZero() {
		return false, fmt.Errorf("fetch %s: no branch %s", s.url, s.ref)
	}
	if have, err := s.repo.Reference(branch, true); err == nil && have.Hash() == want {
		return false, nil
	}
	spec := config.RefSpec("+" + branch.String() + ":" + branch.String())
	err = s.repo.FetchContext(ctx, &git.FetchOptions{RemoteName: "origin", RefSpecs: []config.RefSpec{spec},
		Auth: s.auth, Tags: git.NoTags, Force: true})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return false, fmt.Errorf("fetch %s: %w", s.url, err)
	}
	return true, nil
}
