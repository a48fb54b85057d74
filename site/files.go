package site

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/convergehq/converge"
)

// ErrNotSite is returned by Build when the output directory is not empty
// and was not written by Build (it lacks the marker file), so Build will
// not remove anything in it.
var ErrNotSite = errors.New("output directory is not empty and holds no converge site")

// markerFile marks a directory Build owns.
const markerFile = ".converge-site"

// seg returns s if it is a plain DNS label of at most 100 bytes, and
// otherwise "_" followed by 32 hex digits of its SHA-256: a file name that
// cannot climb out of its directory, collide with a label or confuse a
// case-insensitive file system.
func seg(s string) string {
	if safeLabel(s) {
		return s
	}
	h := sha256.Sum256([]byte(s))
	return "_" + hex.EncodeToString(h[:16])
}

func safeLabel(s string) bool {
	if s == "" || len(s) > 100 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Shards is how many pages the resources of one kind are spread over. A
// resource's page is fixed by its name alone (see ResourcePath), so its
// link never changes as the store grows; a million resources make about
// 12,000 files instead of a million, and at up to ~4,000 resources a kind
// most pages hold one resource.
const Shards = 4096

// shardKey names one resource page: a kind and a shard of it.
type shardKey struct {
	kind string
	n    uint32
}

// shardOf returns the page id is on: FNV-1a of its name, modulo Shards.
func shardOf(id converge.ID) shardKey {
	h := fnv.New32a()
	h.Write([]byte(id.Name()))
	return shardKey{id.Kind(), h.Sum32() % Shards}
}

// path returns the page's file relative to the site root.
func (k shardKey) path() string {
	const hex = "0123456789abcdef"
	return "r/" + seg(k.kind) + "/" + string([]byte{hex[k.n>>8&0xf], hex[k.n>>4&0xf], hex[k.n&0xf]}) + ".html"
}

// anchor returns the fragment naming id's section on its page.
func anchor(id converge.ID) string { return seg(id.Name()) }

// ResourcePath returns the link to id's section relative to the site
// root: "r/KIND/SHARD.html#NAME", where SHARD is three hex digits of a
// hash of the name (see Shards). The page shows that section alone when
// opened at its fragment. The status reporters use it to build target
// URLs.
func ResourcePath(id converge.ID) string {
	return shardOf(id).path() + "#" + anchor(id)
}

// GraphPath returns the path of root's composition graph relative to the
// site root: "graph/KIND/NAME.svg".
func GraphPath(id converge.ID) string {
	return "graph/" + seg(id.Kind()) + "/" + seg(id.Name()) + ".svg"
}

// listKey names one paginated list: a kind (Phase ""), a kind in one phase,
// or one phase across kinds (Kind "").
type listKey struct {
	Kind  string
	Phase converge.Phase
}

// path returns the list's page (1-based) relative to the site root.
func (k listKey) path(page int) string {
	var p string
	switch {
	case k.Kind == "":
		p = "phases/" + strings.ToLower(string(k.Phase))
	case k.Phase == "":
		p = "kinds/" + seg(k.Kind)
	default:
		p = "kinds/" + seg(k.Kind) + "." + strings.ToLower(string(k.Phase))
	}
	if page > 1 {
		p += "-p" + strconv.Itoa(page)
	}
	return p + ".html"
}

// writer writes files under a site directory and counts what it wrote.
// With atomic set it writes a temporary file and renames it, so a served
// page is never seen half-written (Update); without, it writes in place
// and skips a file that already holds the same bytes (Build, where file
// system calls dominate). A writer is used by one goroutine at a time.
type writer struct {
	dir    string
	atomic bool
	dirs   map[string]bool // directories known to exist
	files  int
	same   int // files left alone: they already held the bytes
	bytes  int64
	// largest and largestName are the biggest file this writer was given
	// (written or left alone).
	largest     int64
	largestName string
	// buf is a page buffer its user may reuse between writes.
	buf []byte
}

func (w *writer) write(rel string, data []byte) error {
	full := filepath.Join(w.dir, filepath.FromSlash(rel))
	if err := w.mkdirFor(full); err != nil {
		return fmt.Errorf("write %s: %w", rel, err)
	}
	if !w.atomic {
		// Reading is much cheaper than rewriting (which truncates, and
		// makes ext4 flush on close), and a rebuild changes few pages.
		if old, err := os.ReadFile(full); err == nil && bytes.Equal(old, data) {
			w.count(rel, int64(len(data)), false)
			return nil
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", rel, err)
		}
	} else {
		tmp := full + ".tmp"
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", rel, err)
		}
		if err := os.Rename(tmp, full); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("write %s: %w", rel, err)
		}
	}
	w.count(rel, int64(len(data)), true)
	return nil
}

// mkdirFor creates the directory of the file full unless w knows it.
func (w *writer) mkdirFor(full string) error {
	d := filepath.Dir(full)
	if w.dirs[d] {
		return nil
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	if w.dirs == nil {
		w.dirs = make(map[string]bool)
	}
	w.dirs[d] = true
	return nil
}

// count records the file rel of size bytes as written, or as left alone
// because it already held them.
func (w *writer) count(rel string, size int64, written bool) {
	if size > w.largest {
		w.largest, w.largestName = size, rel
	}
	if written {
		w.files++
		w.bytes += size
	} else {
		w.same++
	}
}

// sameBody reports whether the page rel under dir holds data but for
// its <header>…</header> (see sameFile).
func sameBody(dir, rel string, data []byte) bool {
	old, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
	return err == nil && bytes.Equal(withoutPageHeader(old), withoutPageHeader(data))
}

// withoutPageHeader is page without its first <header>…</header>.
func withoutPageHeader(page []byte) []byte {
	i := bytes.Index(page, []byte("<header>"))
	j := bytes.Index(page, []byte("</header>"))
	if i < 0 || j < i {
		return page
	}
	return slices.Concat(page[:i], page[j:])
}

// add counts what x wrote as written by w.
func (w *writer) add(x *writer) {
	w.files += x.files
	w.same += x.same
	w.bytes += x.bytes
	if x.largest > w.largest {
		w.largest, w.largestName = x.largest, x.largestName
	}
}

func (w *writer) remove(rel string) error {
	err := os.Remove(filepath.Join(w.dir, filepath.FromSlash(rel)))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", rel, err)
	}
	return nil
}

// prepare makes dir ready for a full build: it creates it, or checks that
// it is empty or holds the marker of an earlier build, and writes the
// marker.
func prepare(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create site directory: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read site directory: %w", err)
	}
	if len(ents) > 0 {
		if _, err := os.Stat(filepath.Join(dir, markerFile)); err != nil {
			return fmt.Errorf("%s: %w", dir, ErrNotSite)
		}
	}
	return os.WriteFile(filepath.Join(dir, markerFile), []byte("written by converge site build; the whole directory is replaced on each build\n"), 0o644)
}

// prune removes, under the site's generated sub-directories, every file
// that keep does not list (stale pages of resources that are gone).
func prune(dir string, keep map[string]bool) (int, error) {
	removed := 0
	for _, sub := range []string{"r", "graph", "groups", "kinds", "phases"} {
		root := filepath.Join(dir, sub)
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.IsDir() {
				return nil
			}
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			if !keep[filepath.ToSlash(rel)] {
				if err := os.Remove(p); err != nil {
					return err
				}
				removed++
			}
			return nil
		})
		if err != nil {
			return removed, fmt.Errorf("prune site: %w", err)
		}
	}
	return removed, nil
}
