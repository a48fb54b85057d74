package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"runtime/debug"
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

// emptyWait is how long Open lets an empty file be: a converge creating
// the store holds it empty until bbolt writes its first pages, a few
// milliseconds under its lock.
const emptyWait = time.Second

// checkEmpty returns ErrDamaged (wrapped, naming path) when path exists
// and stays empty or is truncated (checkSize), or with opts.Reinit moves
// it aside and returns the new name. A missing file is no error.
func checkEmpty(path string, opts Options) (aside string, err error) {
	deadline := time.Now().Add(min(opts.LockTimeout, emptyWait))
	for {
		fi, err := os.Stat(path)
		if errors.Is(err, os.ErrNotExist) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("open state: %w", err)
		}
		if fi.Size() > 0 {
			why, err := checkSize(path)
			if err != nil {
				return "", fmt.Errorf("open state: %w", err)
			}
			if why != "" {
				return damaged(path, opts, why)
			}
			return "", nil
		}
		if time.Now().After(deadline) {
			return damaged(path, opts, "empty (0 bytes)")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// damaged returns ErrDamaged, wrapped with path and why, or with
// opts.Reinit renames path to path.damaged-TIME (kept for a post-mortem,
// never deleted) and returns that name, so Open starts a fresh store.
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
// process exits (its mapping holds the file, and so its lock): the
// caller reports the damage. checkSize has ruled out the common fault,
// a truncated file.
func openBolt(path string, o *bolt.Options) (db *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			db, err = nil, fmt.Errorf("%w: %v", errFault, p)
		}
	}()
	return bolt.Open(path, 0o600, o)
}

// The meta page of a bbolt file (format version 2): a 16-byte page
// header, then magic, version, page size and flags (4 bytes each), the
// root bucket (root page, sequence), the freelist page, the page count
// (pgid: the pages in use), the txid and an FNV-1a checksum of what
// precedes it, 8 bytes each.
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	metaOff        = 16
	metaPgidOff    = metaOff + 16 + 16 + 8
	metaTxidOff    = metaPgidOff + 8
	metaSumOff     = metaTxidOff + 8
	metaEnd        = metaSumOff + 8
	minPageSize    = 1024
	maxMetaPageLen = 64 << 10
)

// checkSize reads path's meta pages as bbolt would and says why the file
// is damaged ("" if it looks whole): no valid meta page, or shorter than
// the pages its newest valid meta page counts. bbolt maps the file and
// would fault reading a page past its end, which no error reports.
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
	meta := func(off int64) (pageSize uint32, pgid, txid uint64, ok bool) {
		if n, _ := f.ReadAt(buf, off); n < metaEnd {
			return 0, 0, 0, false
		}
		ne := binary.NativeEndian
		h := fnv.New64a()
		h.Write(buf[metaOff:metaSumOff])
		if ne.Uint32(buf[metaOff:]) != boltMagic || ne.Uint32(buf[metaOff+4:]) != boltVersion ||
			h.Sum64() != ne.Uint64(buf[metaSumOff:]) {
			return 0, 0, 0, false
		}
		return ne.Uint32(buf[metaOff+8:]), ne.Uint64(buf[metaPgidOff:]), ne.Uint64(buf[metaTxidOff:]), true
	}
	ps0, pgid, txid, ok0 := meta(0)
	// The second meta page is one page in: of the first's size, or
	// (first one damaged) of any size bbolt might have used.
	sizes := []int64{int64(ps0)}
	if !ok0 {
		sizes = nil
		for ps := int64(minPageSize); ps <= maxMetaPageLen; ps *= 2 {
			sizes = append(sizes, ps)
		}
	}
	ok1 := false
	for _, ps := range sizes {
		if ps1, pgid1, txid1, ok := meta(ps); ok && int64(ps1) == ps {
			ok1 = true
			if !ok0 || txid1 > txid {
				pgid, ps0 = pgid1, ps1
			}
			break
		}
	}
	if !ok0 && !ok1 {
		return "", nil // bbolt says what is wrong (ErrInvalid)
	}
	if need := int64(pgid) * int64(ps0); fi.Size() < need {
		return fmt.Sprintf("truncated: %d bytes, its pages need %d", fi.Size(), need), nil
	}
	return "", nil
}

// isDamage reports whether err, from openBolt, says the file is not a
// readable bbolt database (rather than, say, unreadable for permissions).
func isDamage(err error) bool {
	return errors.Is(err, errFault) || errors.Is(err, bolterrors.ErrInvalid) || errors.Is(err, bolterrors.ErrVersionMismatch) ||
		errors.Is(err, bolterrors.ErrChecksum) || errors.Is(err, bolterrors.ErrInvalidMapping)
}

// checkOpened looks at what bbolt opened before anything reads it: a
// file shorter than the pages its meta page counts was truncated (reading
// the missing pages would fault), and a page bbolt cannot decode panics
// inside bbolt. Both are ErrDamaged; current reports isCurrent.
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
		current = isCurrent(tx)
		return nil
	})
	return current, why, err
}

// MovedAside returns where Open moved a damaged state file
// (Options.Reinit) before it started this fresh store, or "".
func (s *Store) MovedAside() string { return s.aside }
