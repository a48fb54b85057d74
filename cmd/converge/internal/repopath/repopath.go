// Package repopath says where a command's repository and documents are,
// from its --repo, its --path and the current directory: whether --repo
// names a remote repository (IsRemote), a --path given inside a work tree
// as a path below its root (CwdRelative), whether two paths name one
// directory (SamePath), and the directory `validate DIR` may read
// (ValidateDir). Documents come from inside the repository, never from
// beside it; its errors name the flag or argument.
package repopath

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/convergehq/converge"
	gitsync "github.com/convergehq/converge/sync"
)

// IsRemote reports whether repo names a remote repository (a URL or an
// scp-like ssh address) rather than a local path.
func IsRemote(repo string) bool {
	if strings.Contains(repo, "://") {
		return true
	}
	host, _, ok := strings.Cut(repo, ":")
	return ok && strings.Contains(host, "@") && !strings.ContainsAny(host, `/\`)
}

// CwdRelative returns path, given while the current directory is inside
// repo's work tree, relative to the work tree's root (slash-separated, ""
// for the root). Outside the work tree, and for an absolute path (which
// the source refuses), it returns path unchanged: relative to the root.
func CwdRelative(repo, path string) (string, error) {
	if filepath.IsAbs(path) {
		return path, nil
	}
	src, err := gitsync.OpenLocal(repo, "")
	if err != nil || src.Root() == "" {
		return path, nil
	}
	cwd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("resolve --path: %w", err)
	}
	root, err := filepath.EvalSymlinks(src.Root())
	if err != nil {
		return path, nil
	}
	if c, err := filepath.EvalSymlinks(cwd); err == nil {
		cwd = c
	}
	below, err := filepath.Rel(root, cwd)
	if err != nil || below == ".." || strings.HasPrefix(below, ".."+string(filepath.Separator)) {
		return path, nil // not inside the work tree
	}
	rel, err := filepath.Rel(root, filepath.Join(cwd, path))
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("--path %s: outside the repository %s", path, src.Root())
	}
	if rel == "." {
		return "", nil
	}
	return filepath.ToSlash(rel), nil
}

// SamePath reports whether a and b name the same directory.
func SamePath(a, b string) bool {
	ea, err1 := filepath.EvalSymlinks(a)
	eb, err2 := filepath.EvalSymlinks(b)
	if err1 != nil || err2 != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return ea == eb
}

// ValidateDir returns the directory `validate DIR` reads, repo being
// --repo. A relative DIR
// whose ".." leaves the current directory is refused unless it stays
// inside the work tree of the repository the current directory is in, as
// --path is (CwdRelative): documents come from that repository, never from
// beside it. An absolute DIR is taken as given.
func ValidateDir(repo, arg string) (string, error) {
	clean := filepath.Clean(arg)
	if filepath.IsAbs(clean) || (clean != ".." && !strings.HasPrefix(clean, ".."+string(filepath.Separator))) {
		return arg, nil
	}
	refuse := fmt.Errorf("validate %s: outside the repository (\"..\" refused; give an absolute directory to read one elsewhere)", arg)
	src, err := gitsync.OpenLocal(repo, "")
	if err != nil || src.Root() == "" {
		return "", refuse
	}
	root, err := filepath.EvalSymlinks(src.Root())
	if err != nil {
		return "", refuse
	}
	cwd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("validate %s: %w", arg, err)
	}
	if c, err := filepath.EvalSymlinks(cwd); err == nil {
		cwd = c
	}
	rel, err := filepath.Rel(root, filepath.Join(cwd, clean))
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", refuse
	}
	return arg, nil
}

// SameRepo reports whether repo (a --repo value) names src's repository.
func SameRepo(repo string, src *converge.AppliedSource) bool {
	if IsRemote(repo) || src.Remote {
		return repo == src.Repo
	}
	s, err := gitsync.OpenLocal(repo, "")
	return err == nil && SamePath(s.Root(), src.Repo)
}
