package sync

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Uncommitted lists the files below dir (slash-separated, relative to
// the repository root; "" for all) whose work-tree content differs from
// the followed branch's head commit while that branch is checked out:
// edited, deleted, or new and not ignored. A sync or plan applies
// commits, so these are what it does not apply. Converge's own .converge/
// directory is not counted. It returns nothing for a bare or remote
// repository, or while another branch is checked out.
//
// It compares the files below dir with the commit's tree (by size, then
// by blob hash) instead of asking for the status of the whole work tree,
// which would hash a gigabyte state.db in .converge/.
func (s *Source) Uncommitted(dir string) ([]string, error) {
	if s.root == "" || s.Remote() {
		return nil, nil
	}
	head, err := s.repo.Reference(plumbing.HEAD, false)
	if err != nil {
		return nil, fmt.Errorf("read HEAD: %w", err)
	}
	if s.ref != "HEAD" && (head.Type() != plumbing.SymbolicReference || head.Target().Short() != s.ref) {
		return nil, nil
	}
	ref, err := s.repo.Reference(plumbing.HEAD, true)
	if err != nil {
		return nil, fmt.Errorf("read HEAD: %w", err)
	}
	commit, err := s.repo.CommitObject(ref.Hash())
	if err != nil {
		return nil, fmt.Errorf("read HEAD commit: %w", err)
	}
	tree, err := commit.Tree()
	if err != nil {
		return nil, fmt.Errorf("read HEAD tree: %w", err)
	}
	prefix := strings.Trim(path.Clean("/"+filepath.ToSlash(dir)), "/")
	committed := map[string]*object.File{}
	err = tree.Files().ForEach(func(f *object.File) error {
		if strings.HasPrefix(f.Name, ".converge/") {
			return nil // converge's own, committed or not
		}
		if prefix == "" || strings.HasPrefix(f.Name, prefix+"/") {
			committed[f.Name] = f
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read HEAD tree: %w", err)
	}
	wt, err := s.repo.Worktree()
	if err != nil {
		return nil, fmt.Errorf("open work tree: %w", err)
	}
	patterns, _ := gitignore.ReadPatterns(wt.Filesystem, nil) // unreadable ignore files: nothing ignored
	ignored := gitignore.NewMatcher(patterns)

	var out []string
	seen := map[string]bool{}
	top := filepath.Join(s.root, filepath.FromSlash(prefix))
	err = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, rerr := filepath.Rel(s.root, p)
		if rerr != nil {
			return rerr
		}
		rel = filepath.ToSlash(rel)
		parts := strings.Split(rel, "/")
		if d.IsDir() {
			if rel != "." && (d.Name() == ".git" || rel == ".converge" || ignored.Match(parts, true)) {
				return filepath.SkipDir
			}
			if rel != "." {
				if _, err := os.Lstat(filepath.Join(p, ".git")); err == nil {
					return filepath.SkipDir // a submodule's checkout: not this repository's files
				}
			}
			return nil
		}
		if !d.Type().IsRegular() && d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		f, ok := committed[rel]
		if !ok {
			if !ignored.Match(parts, false) {
				out = append(out, rel)
			}
			return nil
		}
		seen[rel] = true
		if changed, err := differs(p, d, f); err != nil {
			return err
		} else if changed {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read work tree: %w", err)
	}
	for name := range committed {
		if !seen[name] {
			out = append(out, name) // deleted
		}
	}
	sort.Strings(out)
	return out, nil
}

// differs reports whether the work-tree file at p holds other content
// than the committed f.
func differs(p string, d fs.DirEntry, f *object.File) (bool, error) {
	if d.Type()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(p)
		if err != nil {
			return false, err
		}
		return plumbing.ComputeHash(plumbing.BlobObject, []byte(target)) != f.Hash, nil
	}
	info, err := d.Info()
	if err != nil {
		return false, err
	}
	if info.Size() != f.Size {
		return true, nil
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return false, err
	}
	return plumbing.ComputeHash(plumbing.BlobObject, b) != f.Hash, nil
}
