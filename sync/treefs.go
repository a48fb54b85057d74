package sync

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"time"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// treeFS is a read-only fs.FS over one git tree: documents are read from
// the object database at a revision, never from a checkout. Symlinks and
// submodules are reported with their own modes (fs.ModeSymlink,
// fs.ModeIrregular) and are never followed; opening one fails.
type treeFS struct {
	root  *object.Tree
	mtime time.Time // the commit's time, reported for every entry
}

var (
	_ fs.ReadDirFS  = (*treeFS)(nil)
	_ fs.ReadFileFS = (*treeFS)(nil)
	_ fs.StatFS     = (*treeFS)(nil)
)

// entry resolves name to its tree entry; the root is (nil, nil).
func (f *treeFS) entry(op, name string) (*object.TreeEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return nil, nil
	}
	e, err := f.root.FindEntry(name)
	if err != nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	return e, nil
}

func (f *treeFS) tree(op, name string, e *object.TreeEntry) (*object.Tree, error) {
	if e == nil {
		return f.root, nil
	}
	if e.Mode != filemode.Dir {
		return nil, &fs.PathError{Op: op, Path: name, Err: errors.New("not a directory")}
	}
	t, err := f.root.Tree(name)
	if err != nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	return t, nil
}

// Stat implements fs.StatFS.
func (f *treeFS) Stat(name string) (fs.FileInfo, error) {
	e, err := f.entry("stat", name)
	if err != nil {
		return nil, err
	}
	return f.info(name, e)
}

func (f *treeFS) info(name string, e *object.TreeEntry) (fs.FileInfo, error) {
	if e == nil {
		return fileInfo{name: ".", mode: fs.ModeDir | 0o555, mtime: f.mtime}, nil
	}
	fi := fileInfo{name: path.Base(name), mode: entryMode(e.Mode), mtime: f.mtime}
	if e.Mode.IsFile() {
		size, err := f.root.Size(name)
		if err != nil {
			return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
		}
		fi.size = size
	}
	return fi, nil
}

// ReadDir implements fs.ReadDirFS; entries are sorted by name.
func (f *treeFS) ReadDir(name string) ([]fs.DirEntry, error) {
	e, err := f.entry("readdir", name)
	if err != nil {
		return nil, err
	}
	t, err := f.tree("readdir", name, e)
	if err != nil {
		return nil, err
	}
	out := make([]fs.DirEntry, 0, len(t.Entries))
	for i := range t.Entries {
		te := &t.Entries[i]
		out = append(out, dirEntry{fs: f, dir: name, e: te})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

// ReadFile implements fs.ReadFileFS. It refuses symlinks and submodules.
func (f *treeFS) ReadFile(name string) ([]byte, error) {
	e, err := f.entry("read", name)
	if err != nil {
		return nil, err
	}
	if e == nil || !regular(e.Mode) {
		return nil, &fs.PathError{Op: "read", Path: name, Err: errors.New("not a regular file")}
	}
	file, err := f.root.TreeEntryFile(e)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	r, err := file.Reader()
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	defer r.Close()
	var buf bytes.Buffer
	buf.Grow(int(file.Size))
	if _, err := io.Copy(&buf, r); err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	return buf.Bytes(), nil
}

// Open implements fs.FS.
func (f *treeFS) Open(name string) (fs.File, error) {
	e, err := f.entry("open", name)
	if err != nil {
		return nil, err
	}
	info, err := f.info(name, e)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		entries, err := f.ReadDir(name)
		if err != nil {
			return nil, err
		}
		return &dirFile{info: info, entries: entries}, nil
	}
	b, err := f.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return &openFile{info: info, r: bytes.NewReader(b)}, nil
}

func regular(m filemode.FileMode) bool {
	return m == filemode.Regular || m == filemode.Deprecated || m == filemode.Executable
}

func entryMode(m filemode.FileMode) fs.FileMode {
	switch {
	case m == filemode.Dir:
		return fs.ModeDir | 0o555
	case m == filemode.Symlink:
		return fs.ModeSymlink | 0o777
	case m == filemode.Executable:
		return 0o555
	case regular(m):
		return 0o444
	default: // submodules and anything else
		return fs.ModeIrregular
	}
}

type fileInfo struct {
	name  string
	size  int64
	mode  fs.FileMode
	mtime time.Time
}

func (fi fileInfo) Name() string       { return fi.name }
func (fi fileInfo) Size() int64        { return fi.size }
func (fi fileInfo) Mode() fs.FileMode  { return fi.mode }
func (fi fileInfo) ModTime() time.Time { return fi.mtime }
func (fi fileInfo) IsDir() bool        { return fi.mode.IsDir() }
func (fi fileInfo) Sys() any           { return nil }

type dirEntry struct {
	fs  *treeFS
	dir string
	e   *object.TreeEntry
}

// IsSubmodule reports a gitlink (cue's loader refuses it by this).
func (d dirEntry) IsSubmodule() bool { return d.e.Mode == filemode.Submodule }

func (d dirEntry) Name() string      { return d.e.Name }
func (d dirEntry) IsDir() bool       { return d.e.Mode == filemode.Dir }
func (d dirEntry) Type() fs.FileMode { return entryMode(d.e.Mode).Type() }
func (d dirEntry) Info() (fs.FileInfo, error) {
	return d.fs.info(path.Join(d.dir, d.e.Name), d.e)
}

type openFile struct {
	info fs.FileInfo
	r    *bytes.Reader
}

func (f *openFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *openFile) Read(p []byte) (int, error) { return f.r.Read(p) }
func (f *openFile) Close() error               { return nil }

type dirFile struct {
	info    fs.FileInfo
	entries []fs.DirEntry
	off     int
}

func (d *dirFile) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *dirFile) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.Name(), Err: errors.New("is a directory")}
}
func (d *dirFile) Close() error { return nil }

// ReadDir implements fs.ReadDirFile.
func (d *dirFile) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.entries[d.off:]
	if n <= 0 {
		d.off = len(d.entries)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	if n > len(rest) {
		n = len(rest)
	}
	d.off += n
	return rest[:n], nil
}

// String is for debugging.
func (f *treeFS) String() string { return fmt.Sprintf("tree %s", f.root.Hash) }
