package state

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/convergehq/converge/state/internal/rules"
)

// FormatVersion is the version of the store's on-disk layout that this
// build writes. Open refuses a store written by another format: a newer
// one (ErrNewerFormat) or an older one it cannot migrate (ErrOldFormat).
// Formats 1 (edges in their own bucket) and 2 (one owner-index key per
// child) existed only before the first release and are not migrated;
// format 3 (roots not in the owner index) is migrated at Open, and so is
// format 4 (no specs bucket: its rows keep their declared specs, which
// format 5 still reads) by creating the bucket. A format 5 store may hold
// rows whose big declared spec is kept apart (rules.ApartSize), which an
// older binary would take for malformed rows: it refuses the store.
const FormatVersion = 5

// FileName is the name of the database file inside the store directory.
const FileName = "state.db"

// ErrLocked is returned when another process (or another Store in this
// process) holds the store. The wrapping error names the file.
var ErrLocked = errors.New("store is locked by another process")

// ErrNewerFormat is returned by Open when the store was written by a newer
// converge whose format this build does not understand.
var ErrNewerFormat = errors.New("store format is newer than this converge supports")

// ErrOldFormat is returned by Open when the store was written by an older
// format that this build does not migrate.
var ErrOldFormat = errors.New("store format is older than this converge supports")

// Options tune Open. The zero value is the production default.
type Options struct {
	// LockTimeout is how long Open waits for another process to release
	// the store before returning ErrLocked; default 1s.
	LockTimeout time.Duration
	// MaxEvents is how many events the store keeps; older ones are
	// trimmed. Default 200000.
	MaxEvents int
	// MaxRevisions is how many revision records the store keeps, the
	// newest by Seen; the applied revision's record is kept besides.
	// PutRevision trims the oldest beyond it. Default 1000.
	MaxRevisions int
	// NoSync skips fsync on commit: a crash may lose or corrupt the store.
	// For tests and benchmarks only.
	NoSync bool
	// Reinit makes Open move a state file that is empty or damaged
	// (ErrDamaged) aside, to state.db.damaged-TIME, and start a fresh
	// store; MovedAside then names it. An intact store opens as it is.
	Reinit bool

	// noLock opens without the lock file: for a private file nobody
	// else knows of (Compact's copy).
	noLock bool
}

// DefaultMaxEvents is how many events a store keeps by default, on
// every backend (Options.MaxEvents).
const DefaultMaxEvents = 200000

const (
	defaultLockTimeout = time.Second
	defaultMaxRevs     = 1000
)

// Store is converge's durable state over one bbolt file. It is safe for
// concurrent use: bbolt serialises writers and lets readers run alongside.
// Its reads, Commit and the rules of Check are the store's rules
// (state/internal/rules) over the file's transactions (kv.go).
type Store struct {
	*rulesStore
	db *bolt.DB
	// file is the state file bbolt has open, and lock the lock file
	// held from Open to Close (nil for Compact's private copy).
	file  *os.File
	lock  *fileLock
	path  string
	aside string // where Open moved a damaged file (Options.Reinit), or ""

	mu    sync.Mutex // guards stats
	stats Stats

	// pageAlloc0 is bbolt's allocated-page byte count after Open.
	pageAlloc0 int64
	// big: the file was at least releaseMin at Open or at the last
	// write, so its mapped pages are released (CommitRows).
	big atomic.Bool
	// stopRelease ends the goroutine that releases mapped pages
	// (releaser); closeOnce guards it and the database's Close.
	stopRelease chan struct{}
	releaseDone chan struct{}
	// committing is set while a write transaction runs: the releaser
	// then runs every releaseCommitting.
	committing atomic.Bool
	closeOnce  sync.Once
	closeErr   error

	// broken is the error of a write transaction that panicked on a
	// damaged page: bbolt then keeps its writer's lock, so Close must
	// not wait for it (the file stays open until the process exits).
	broken atomic.Pointer[error]
	// replaced is the error of the commit that found the state file
	// replaced (ErrReplaced): every later write returns it.
	replaced atomic.Pointer[error]
}

// Verify returns ErrReplaced (wrapped, naming the path) when the path no
// longer names the file this store has open, or nil. Every commit checks
// it after it is durable; a command checks it before it reports success.
func (s *Store) Verify(context.Context) error {
	if err := sameFile(s.file, s.path); err != nil {
		return fmt.Errorf("verify state: %w", err)
	}
	return nil
}

// releaseEvery is how often the pages of state.db that bbolt's mmap
// touched are released from the resident set (releaseMapped). One commit
// of a million-row store can touch hundreds of megabytes of pages, so a
// release after each commit is not enough: the releaser runs alongside,
// every releaseCommitting while a commit runs. Each page a lookup maps
// brings up to 15 around it (the kernel's fault-around, 64 KiB), and a
// commit maps each leaf it changes twice: when its puts find the leaf
// (released every releaseWalks lookups) and when bbolt writes the new
// pages from the old ones at the commit, which no lookup counts. 8,192
// rows all over the key space so mapped 300-400 MB at a million rows.
const (
	releaseEvery      = 250 * time.Millisecond
	releaseCommitting = 5 * time.Millisecond
)

// releaseMin is the file size below which pages are not released: a
// small store's pages cost less than the faults to bring them back.
const releaseMin = 32 << 20

// releaser releases the store's mapped pages every releaseEvery until
// stopRelease is closed.
func (s *Store) releaser() {
	defer close(s.releaseDone)
	t := time.NewTicker(releaseCommitting)
	defer t.Stop()
	var idle time.Duration
	for {
		select {
		case <-s.stopRelease:
			return
		case <-t.C:
			if idle += releaseCommitting; idle < releaseEvery && !s.committing.Load() {
				continue
			}
			idle = 0
			releaseMapped(s.db, releaseMin)
		}
	}
}

// Stats are counters of committed write transactions since Open.
type Stats struct {
	// Commits counts write transactions that wrote something (Commit,
	// PutRevision); a batch equal to what is stored commits nothing.
	Commits uint64
	// Puts counts bucket Put calls; Deletes counts deletions of keys that
	// existed.
	Puts    uint64
	Deletes uint64
	// Bytes is the sum of key and value lengths put.
	Bytes uint64
	// LongestCommit is the longest write transaction, fsync included:
	// how much work a crash at the worst moment could lose.
	LongestCommit time.Duration
	// PageBytes is the size of the pages the commits wrote (bbolt's
	// dirty pages, freelist included; each commit also writes one meta
	// page, not counted here).
	PageBytes uint64
}

// rulesStore is the store's rules, embedded in Store under a name that
// is not exported.
type rulesStore = rules.Store

// Bucket names (rules.Bucket's).
var (
	bResources = bucketNames[rules.Resources]
	bOwners    = bucketNames[rules.Owners]
	bProducers = bucketNames[rules.Producers]
	bEvents    = bucketNames[rules.Events]
	bMeta      = bucketNames[rules.Meta]

	allBuckets = bucketNames[:]
)

// mFormat is the meta key of the store's format.
var mFormat = rules.MetaFormat

// Open opens the store in dir, creating dir (0700) and dir/state.db (0600)
// if needed. It returns ErrLocked (wrapped, naming the file) if another
// process holds the store for longer than opts.LockTimeout,
// ErrNewerFormat if the file was written by a newer format, and
// ErrDamaged if the file exists but is empty or damaged (unless
// opts.Reinit). Only a missing file starts a fresh store.
func Open(dir string, opts Options) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open state: %w", err)
	}
	return openFile(filepath.Join(dir, FileName), opts)
}

// openFile opens the store in the file at path, holding the lock file
// beside it (lock.go) from before it looks at the file until Close.
func openFile(path string, opts Options) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = defaultLockTimeout
	}
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = DefaultMaxEvents
	}
	if opts.MaxRevisions <= 0 {
		opts.MaxRevisions = defaultMaxRevs
	}
	deadline := time.Now().Add(opts.LockTimeout)
	var lock *fileLock
	if !opts.noLock {
		var err error
		if lock, err = acquireLock(path+".lock", path, opts.LockTimeout); err != nil {
			return nil, err
		}
	}
	s, err := openLocked(path, opts, deadline, "")
	if err != nil {
		lock.release()
		return nil, err
	}
	s.lock = lock
	return s, nil
}

// openLocked opens the store in the file at path; the caller holds its
// lock, so no converge commits to the file, replaces it or moves it aside
// while this looks at it. aside is where an earlier round moved a damaged
// file (a fresh store that is damaged too is an error, never moved twice).
func openLocked(path string, opts Options, deadline time.Time, aside string) (*Store, error) {
	if aside == "" {
		var err error
		if aside, err = checkFile(path, opts); err != nil {
			return nil, err
		}
	}
	var file *os.File
	db, err := openBolt(path, &bolt.Options{
		// The lock file keeps every converge out; bbolt's own flock
		// waits only for something else holding the file (a bbolt
		// tool, say).
		Timeout:      max(time.Until(deadline), lockPollEvery),
		NoSync:       opts.NoSync,
		FreelistType: bolt.FreelistMapType,
		// Reserve address space so a growing file rarely remaps (a remap
		// waits for every open read transaction). It is not file size.
		InitialMmapSize: 1 << 30,
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, perm)
			file = f
			return f, err
		},
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open state: %s: %w (waited %v; something other than converge holds the file)", path, ErrLocked, opts.LockTimeout)
	}
	if isDamage(err) && aside == "" {
		if aside, err = damaged(path, opts, "not a store: "+err.Error()); err != nil {
			return nil, err
		}
		return openLocked(path, opts, deadline, aside) // a fresh store
	}
	if err != nil {
		return nil, fmt.Errorf("open state: %s: %w", path, err)
	}
	// The path names the file bbolt opened, and goes on naming it while
	// the lock is held, unless something outside converge replaces it:
	// the guard after every commit (update) catches that.
	if err := sameFile(file, path); err != nil {
		db.Close()
		return nil, fmt.Errorf("open state: %w", err)
	}
	// A store in the current format with every bucket needs no write
	// transaction: committing one (even an empty one) costs an fsync,
	// the most of what a read command's open took.
	current, why, err := checkOpened(db, path)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open state: %s: %w", path, err)
	}
	if why != "" {
		db.Close()
		if aside != "" {
			// The store just started afresh is damaged: never move
			// aside twice, say so.
			return nil, fmt.Errorf("open state: %s: %w: %s", path, ErrDamaged, why)
		}
		if aside, err = damaged(path, opts, why); err != nil {
			return nil, err
		}
		return openLocked(path, opts, deadline, aside)
	}
	if !current {
		if err := db.Update(initBuckets); err != nil {
			db.Close()
			return nil, fmt.Errorf("open state: %s: %w", path, err)
		}
	}
	s := &Store{db: db, file: file, path: path, aside: aside, pageAlloc0: pageAlloc(db),
		stopRelease: make(chan struct{}), releaseDone: make(chan struct{})}
	s.rulesStore = rules.New(boltKV{s}, rules.Options{Name: path, Owners: rules.Chunked,
		MaxEvents: opts.MaxEvents, MaxRevisions: opts.MaxRevisions})
	_ = db.View(func(tx *bolt.Tx) error {
		s.big.Store(tx.Size() >= releaseMin)
		return nil
	})
	if releaseSupported {
		go s.releaser()
	} else {
		close(s.releaseDone)
	}
	return s, nil
}

// isCurrent reports whether tx's store has every bucket and the current
// format, so initBuckets would change nothing.
func isCurrent(tx *bolt.Tx) bool {
	for _, name := range allBuckets {
		if tx.Bucket(name) == nil {
			return false
		}
	}
	v := tx.Bucket(bMeta).Get(mFormat)
	return len(v) == 8 && binary.BigEndian.Uint64(v) == FormatVersion
}

// initBuckets creates missing buckets and checks or writes the format.
func initBuckets(tx *bolt.Tx) error {
	if m := tx.Bucket(bMeta); m != nil {
		v := m.Get(mFormat)
		if len(v) != 8 {
			return fmt.Errorf("meta: format: malformed value %x", v)
		}
		switch f := binary.BigEndian.Uint64(v); {
		case f > FormatVersion:
			return fmt.Errorf("format %d: %w (%d)", f, ErrNewerFormat, FormatVersion)
		case f == 3 || f == 4:
			if f == 3 {
				if err := indexRoots(tx); err != nil {
					return fmt.Errorf("migrate format 3 to %d: %w", FormatVersion, err)
				}
			}
			// The specs bucket is created below.
			if err := m.Put(mFormat, u64(FormatVersion)); err != nil {
				return err
			}
		case f < FormatVersion:
			return fmt.Errorf("format %d: %w (%d); remove the file and sync again", f, ErrOldFormat, FormatVersion)
		}
	}
	for _, name := range allBuckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	m := tx.Bucket(bMeta)
	if m.Get(mFormat) == nil {
		if err := m.Put(mFormat, u64(FormatVersion)); err != nil {
			return err
		}
	}
	return nil
}

// indexRoots adds every resource without an owner to the owner index,
// under the empty owner (format 3 to 4).
func indexRoots(tx *bolt.Tx) error {
	return rules.IndexRoots(&writer{reader: reader{tx}}, rules.Chunked)
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Close releases the store and its lock. Later calls return an error.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stopRelease)
		<-s.releaseDone
		if broken := s.broken.Load(); broken != nil {
			s.closeErr = fmt.Errorf("close state: %w (left open: a write found it damaged)", *broken)
			return
		}
		var errs []error
		if err := s.db.Close(); err != nil {
			errs = append(errs, err)
		}
		if err := s.lock.release(); err != nil {
			errs = append(errs, fmt.Errorf("release lock: %w", err))
		}
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("close state: %w", err)
		}
	})
	return s.closeErr
}

// Stats returns the counters of committed write transactions since Open.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	st := s.stats
	s.mu.Unlock()
	st.PageBytes = uint64(pageAlloc(s.db) - s.pageAlloc0)
	return st
}

// fillPercent is the page fill of split pages (bbolt's default is 0.5).
var fillPercent = 0.9

// pageAlloc returns the bytes of pages db's transactions have allocated.
func pageAlloc(db *bolt.DB) int64 {
	st := db.Stats()
	return st.TxStats.GetPageAlloc()
}

// errNoChange makes update roll back a transaction that wrote nothing.
var errNoChange = errors.New("no change")

// update runs fn in one write transaction through a counting writer and
// adds its counters to Stats if it commits. A transaction that wrote
// nothing (every put equal to what was stored) is rolled back instead:
// no fsync, and Stats does not count it.
func (s *Store) update(fn func(w *writer) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = s.damagedErr(p)
			s.broken.Store(&err)
		}
	}()
	if r := s.replaced.Load(); r != nil {
		return *r // nothing more to a file nobody reads
	}
	var w writer
	start := time.Now()
	s.committing.Store(true)
	defer s.committing.Store(false)
	err = s.db.Update(func(tx *bolt.Tx) error {
		// Keys mostly arrive in order within a kind (and updates do not
		// split pages), so pack pages fuller than bbolt's default half:
		// fewer pages written per commit.
		for _, name := range allBuckets {
			tx.Bucket(name).FillPercent = fillPercent
		}
		w = writer{reader: reader{tx}}
		if err := fn(&w); err != nil {
			return err
		}
		if w.puts == 0 && w.dels == 0 {
			return errNoChange // roll back: no commit, no fsync
		}
		s.big.Store(tx.Size() >= releaseMin)
		return nil
	})
	if err == errNoChange {
		return nil
	}
	if err != nil {
		return err
	}
	took := time.Since(start)
	// The guard after every commit: the commit is durable in the file
	// bbolt holds, which must be the one the path names (lock.go).
	if err := s.Verify(context.Background()); err != nil {
		s.replaced.Store(&err)
		return err
	}
	s.mu.Lock()
	s.stats.Commits++
	s.stats.LongestCommit = max(s.stats.LongestCommit, took)
	s.stats.Puts += w.puts
	s.stats.Deletes += w.dels
	s.stats.Bytes += w.bytes
	s.mu.Unlock()
	return nil
}

var u64 = rules.U64
