package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// ErrDamaged is returned by Open when the state file exists but holds no
// store it can read: it is empty (0 bytes), shorter than its own pages
// say, or not a bbolt file. Only a missing file starts a fresh store: a
// file that exists held state once, and starting afresh would create
// every resource again (a real provider would make duplicates).
// Options.Reinit moves such a file aside instead. The wrapping error
// names the file and what is wrong with it.
var ErrDamaged = errors.New("state file is empty or damaged")

// checkFile returns ErrDamaged (wrapped, naming path) when path exists
// and is empty or truncated (checkSize), or with opts.Reinit moves it
// aside and returns the new name. A missing file is no error. The caller
// holds the store's lock: no converge is creating or growing the file
// while this reads its size and then its meta pages (an empty file is
// one whose creator died before bbolt wrote its first pages).
func checkFile(path string, opts Options) (aside string, err error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("open state: %w", err)
	}
	if fi.Size() == 0 {
		return damaged(path, opts, "empty (0 bytes)")
	}
	beforeMetaRead(path)
	why, err := checkSize(path)
	if err != nil {
		return "", fmt.Errorf("open state: %w", err)
	}
	if why != "" {
		return damaged(path, opts, why)
	}
	return "", nil
}

// beforeMetaRead runs between checkFile's size check and its read of
// the meta pages; a test commits there to show the lock keeps writers
// out.
var beforeMetaRead = func(path string) {}

// damaged returns ErrDamaged, wrapped with path and why, or with
// opts.Reinit renames path to path.damaged-TIME (kept for a post-mortem,
// never deleted) and returns that name, so Open starts a fresh store.
// The caller holds the store's lock.
func damaged(path string, opts Options, why string) (aside string, err error) {
	if !opts.Reinit {
		return "", fmt.Errorf("open state: %s: %w: %s", path, ErrDamaged, why)
	}
	aside = path + ".damaged-" + time.Now().UTC().Format("20060102T150405.000Z")
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("open state: move damaged %s aside: %w", path, err)
	}
	return aside, nil
}

// errFault is openBolt's error when reading the file faulted or panicked
// inside bbolt.
var errFault = errors.New("reading it failed")

// openBolt is bolt.Open, with a fault reading the mapped file or a panic
// of bbolt's on a page it cannot decode returned as errFault instead of
// crashing the process. What bbolt had opened then stays open until the
// process exits (its mapping holds the file, and so its lock), so the
// fault is remembered (faulted): opening the same file again in this
// process reports the same damage instead of a lock it cannot get.
// checkSize has ruled out the common faults, a truncated file and a
// freelist page that is not one.
func openBolt(path string, o *bolt.Options) (db *bolt.DB, err error) {
	if err := faultedBefore(path); err != nil {
		return nil, err
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			db, err = nil, fmt.Errorf("%w: %v", errFault, p)
			if fi, serr := os.Stat(path); serr == nil {
				faulted.Store(path, faultRecord{fi, err})
			}
		}
	}()
	return bolt.Open(path, 0o600, o)
}

// faulted maps a state file's path to the faultRecord of the fault that
// opening it caused in this process.
var faulted sync.Map

type faultRecord struct {
	fi  os.FileInfo
	err error
}

// faultedBefore returns the error opening path faulted with before, if
// the file there is still the one that faulted (same inode, size and
// modification time).
func faultedBefore(path string) error {
	v, ok := faulted.Load(path)
	if !ok {
		return nil
	}
	r := v.(faultRecord)
	fi, err := os.Stat(path)
	if err != nil || !os.SameFile(fi, r.fi) || fi.Size() != r.fi.Size() || !fi.ModTime().Equal(r.fi.ModTime()) {
		faulted.Delete(path)
		return nil
	}
	return r.err
}

// The meta page of a bbolt file (format version 2): a 16-byte page
// header, then magic, version, page size and flags (4 bytes each), the
// root bucket (root page, sequence), the freelist page, the page count
// (pgid: the pages in use), the txid and an FNV-1a checksum of what
// precedes it, 8 bytes each.
const (
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	metaOff         = 16
	metaRootOff     = metaOff + 16
	metaFreelistOff = metaRootOff + 16
	metaPgidOff     = metaFreelistOff + 8
	metaTxidOff     = metaPgidOff + 8
	metaSumOff      = metaTxidOff + 8
	metaEnd         = metaSumOff + 8
	minPageSize     = 1024
	maxMetaPageLen  = 64 << 10
)

// checkSize reads path's meta pages as bbolt would and says why the file
// is damaged ("" if it looks whole): a meta page that is not valid (its
// magic, version or checksum is wrong), shorter than the pages its newest
// valid meta page counts, or a freelist or root page that is not what
// that meta page says it is. bbolt maps the file and would fault reading
// a page past its end, which no error reports, and it falls back to the
// older meta page when the newer one is invalid, silently losing the
// last commit. bbolt writes a meta page whole, in one sector, so only
// damage from outside makes one invalid.
func checkSize(path string) (why string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	buf := make([]byte, metaEnd)
	type metaPage struct {
		pageSize       uint32
		root, freelist uint64
		pgid, txid     uint64
	}
	meta := func(off int64) (m metaPage, ok bool) {
		if n, _ := f.ReadAt(buf, off); n < metaEnd {
			return m, false
		}
		ne := binary.NativeEndian
		h := fnv.New64a()
		h.Write(buf[metaOff:metaSumOff])
		if ne.Uint32(buf[metaOff:]) != boltMagic || ne.Uint32(buf[metaOff+4:]) != boltVersion ||
			h.Sum64() != ne.Uint64(buf[metaSumOff:]) {
			return m, false
		}
		return metaPage{pageSize: ne.Uint32(buf[metaOff+8:]), root: ne.Uint64(buf[metaRootOff:]),
			freelist: ne.Uint64(buf[metaFreelistOff:]), pgid: ne.Uint64(buf[metaPgidOff:]),
			txid: ne.Uint64(buf[metaTxidOff:])}, true
	}
	m0, ok0 := meta(0)
	// The second meta page is one page in: of the first's size, or
	// (first one damaged) of any size bbolt might have used.
	sizes := []int64{int64(m0.pageSize)}
	if !ok0 {
		sizes = nil
		for ps := int64(minPageSize); ps <= maxMetaPageLen; ps *= 2 {
			sizes = append(sizes, ps)
		}
	}
	var m1 metaPage
	ok1 := false
	for _, ps := range sizes {
		if m, ok := meta(ps); ok && int64(m.pageSize) == ps {
			m1, ok1 = m, true
			break
		}
	}
	switch {
	case !ok0 && !ok1:
		return "", nil // bbolt says what is wrong (ErrInvalid)
	case ok0 && !ok1 && fi.Size() < 2*int64(m0.pageSize):
		return fmt.Sprintf("truncated: %d bytes, shorter than its two meta pages", fi.Size()), nil
	case !ok0:
		return fmt.Sprintf("meta page 0 is not valid (bad magic, version or checksum); meta page 1 holds transaction %d, and anything committed after it would be lost", m1.txid), nil
	case !ok1:
		return fmt.Sprintf("meta page 1 is not valid (bad magic, version or checksum); meta page 0 holds transaction %d, and anything committed after it would be lost", m0.txid), nil
	}
	m := m0
	if m1.txid > m0.txid {
		m = m1
	}
	ps := int64(m.pageSize)
	if need := int64(m.pgid) * ps; fi.Size() < need {
		return fmt.Sprintf("truncated: %d bytes, its pages need %d", fi.Size(), need), nil
	}
	// The pages the newest meta page points at: each page starts with
	// its own id and its type (bbolt's page header).
	hdr := make([]byte, 24)
	ne := binary.NativeEndian
	page := func(what string, id uint64, types ...uint16) string {
		if id < 2 || id >= m.pgid {
			return fmt.Sprintf("%s page %d is outside the store's pages (2 to %d)", what, id, m.pgid-1)
		}
		if n, _ := f.ReadAt(hdr, int64(id)*ps); n < len(hdr) {
			return fmt.Sprintf("%s page %d cannot be read", what, id)
		}
		if got := ne.Uint64(hdr); got != id || !slices.Contains(types, ne.Uint16(hdr[8:])) {
			return fmt.Sprintf("%s page %d is not a %s page (it says page %d, type %#x)", what, id, what, got, ne.Uint16(hdr[8:]))
		}
		if overflow := uint64(ne.Uint32(hdr[12:])); id+overflow >= m.pgid {
			return fmt.Sprintf("%s page %d runs past the store's pages (%d more pages)", what, id, overflow)
		}
		return ""
	}
	if m.freelist != pgidNoFreelist {
		if why := page("freelist", m.freelist, pageFreelist); why != "" {
			return why, nil
		}
		// The ids it lists must fit in its pages: bbolt allocates what
		// the count says before it reads them.
		n, at := uint64(ne.Uint16(hdr[10:])), uint64(16)
		if n == 0xFFFF {
			n, at = ne.Uint64(hdr[16:]), 24
		}
		if room := (uint64(ne.Uint32(hdr[12:])) + 1) * uint64(ps); n > (room-at)/8 {
			return fmt.Sprintf("freelist page %d lists %d pages, more than its %d bytes hold", m.freelist, n, room), nil
		}
	}
	return page("root", m.root, pageBranch, pageLeaf), nil
}

// bbolt's page types, and the freelist page id of a store that keeps no
// freelist on disk.
const (
	pageBranch     = 0x01
	pageLeaf       = 0x02
	pageFreelist   = 0x10
	pgidNoFreelist = ^uint64(0)
)

// isDamage reports whether err, from openBolt, says the file is not a
// readable bbolt database (rather than, say, unreadable for permissions).
func isDamage(err error) bool {
	return errors.Is(err, errFault) || errors.Is(err, bolterrors.ErrInvalid) || errors.Is(err, bolterrors.ErrVersionMismatch) ||
		errors.Is(err, bolterrors.ErrChecksum) || errors.Is(err, bolterrors.ErrInvalidMapping)
}

// checkOpened looks at what bbolt opened before anything reads it: a
// file shorter than the pages its meta page counts was truncated (reading
// the missing pages would fault), and a page bbolt cannot decode panics
// inside bbolt. Both are ErrDamaged; current reports isCurrent. It also
// walks each bucket to its first and last key (a few pages each, whatever
// the store's size), so damage to a bucket's root or edges shows here
// rather than half-way through a command; damage deeper in the tree shows
// when a read reaches it (view), or in `state gc`'s full check.
func checkOpened(db *bolt.DB, path string) (current bool, why string, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, "", err
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	err = db.View(func(tx *bolt.Tx) (err error) {
		if size := tx.Size(); fi.Size() < size {
			why = fmt.Sprintf("truncated: %d bytes, its pages need %d", fi.Size(), size)
			return nil
		}
		defer func() {
			if p := recover(); p != nil {
				why = fmt.Sprint("unreadable: ", p)
			}
		}()
		for _, name := range allBuckets {
			if b := tx.Bucket(name); b != nil {
				c := b.Cursor()
				c.First()
				c.Last()
			}
		}
		current = isCurrent(tx)
		return nil
	})
	return current, why, err
}

// view is s.db.View, with a page bbolt cannot decode (it panics) or a
// fault reading the mapped file returned as ErrDamaged, naming the file,
// instead of crashing the command.
func (s *Store) view(fn func(*bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = s.damagedErr(p)
		}
	}()
	return s.db.View(fn)
}

// damagedErr is the error of a read or write that found the file
// damaged: what bbolt panicked with.
func (s *Store) damagedErr(p any) error {
	return fmt.Errorf("%s: %w: unreadable: %v", s.path, ErrDamaged, p)
}

// CloseAndMoveAside closes s and moves its state file aside, to
// state.db.damaged-TIME (kept, never deleted), returning that name: what
// Open does with Options.Reinit for a file it finds damaged, for damage
// that showed only later, when a read reached it. It holds the store's
// lock until the file is moved, and moves it only while the path still
// names the file s had open (else ErrReplaced): another converge cannot
// open it in between, nor is a file someone else put there moved.
func (s *Store) CloseAndMoveAside() (string, error) {
	lock := s.lock
	s.lock = nil // kept past Close
	defer lock.release()
	idErr := sameFile(s.file, s.path)
	s.Close() // damaged: whatever it says
	if idErr != nil {
		return "", fmt.Errorf("move damaged state aside: %w", idErr)
	}
	return damaged(s.path, Options{Reinit: true}, "")
}

// MovedAside returns where Open moved a damaged state file
// (Options.Reinit) before it started this fresh store, or "".
func (s *Store) MovedAside() string { return s.aside }
