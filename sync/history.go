package sync

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/convergehq/converge"
)

// FirstParents lists the commits of `git rev-list --first-parent
// base..head`, oldest first: head and its first parents back to (not
// including) the first one reachable from base. base and head are any
// revision expressions go-git resolves. The result is empty when head is
// reachable from base.
func (s *Source) FirstParents(base, head string) ([]converge.Revision, error) {
	bh, err := s.repo.ResolveRevision(plumbing.Revision(base))
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", base, err)
	}
	hh, err := s.repo.ResolveRevision(plumbing.Revision(head))
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", head, err)
	}
	reachable := map[plumbing.Hash]bool{}
	iter, err := s.repo.Log(&git.LogOptions{From: *bh})
	if err != nil {
		return nil, fmt.Errorf("walk history of %s: %w", base, err)
	}
	err = iter.ForEach(func(c *object.Commit) error {
		reachable[c.Hash] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk history of %s: %w", base, err)
	}
	var out []converge.Revision
	for h := *hh; !reachable[h]; {
		c, err := s.repo.CommitObject(h)
		if err != nil {
			return nil, fmt.Errorf("read commit %s: %w", h, err)
		}
		out = append(out, s.revisionOf(c))
		if c.NumParents() == 0 {
			break
		}
		h = c.ParentHashes[0]
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// FirstParent returns rev's first parent, or false for a root commit.
func (s *Source) FirstParent(rev converge.Revision) (converge.Revision, bool, error) {
	c, err := s.repo.CommitObject(plumbing.NewHash(rev.Hash))
	if err != nil {
		return converge.Revision{}, false, fmt.Errorf("read commit %s: %w", rev.Hash, err)
	}
	if c.NumParents() == 0 {
		return converge.Revision{}, false, nil
	}
	p, err := s.repo.CommitObject(c.ParentHashes[0])
	if err != nil {
		return converge.Revision{}, false, fmt.Errorf("read commit %s: %w", c.ParentHashes[0], err)
	}
	return s.revisionOf(p), true, nil
}

func (s *Source) revisionOf(c *object.Commit) converge.Revision {
	subject, _, _ := strings.Cut(c.Message, "\n")
	return converge.Revision{Ref: s.ref, Hash: c.Hash.String(), Time: c.Committer.When.UTC(), Subject: subject}
}

// TreeHash returns the hash of the tree below sub ("" or "." for the root)
// at rev, or "" when rev has no directory sub. Two revisions with the same
// tree hash hold the same documents.
func (s *Source) TreeHash(rev converge.Revision, sub string) (string, error) {
	c, err := s.repo.CommitObject(plumbing.NewHash(rev.Hash))
	if err != nil {
		return "", fmt.Errorf("read commit %s: %w", rev.Hash, err)
	}
	t, err := c.Tree()
	if err != nil {
		return "", fmt.Errorf("read tree of %s: %w", rev.Hash, err)
	}
	sub = strings.Trim(filepath.ToSlash(sub), "/")
	if sub == "" || sub == "." {
		return t.Hash.String(), nil
	}
	st, err := t.Tree(sub)
	if errors.Is(err, object.ErrDirectoryNotFound) || errors.Is(err, object.ErrEntryNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read tree %s of %s: %w", sub, rev.Hash, err)
	}
	return st.Hash.String(), nil
}
