package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// CompactResult is what Compact did: the file's size before and after.
type CompactResult struct {
	Before, After int64
}

// compactTxSize is how many bytes bbolt.Compact copies per transaction.
const compactTxSize = 64 << 20

// beforeSwap runs between writing and checking the compacted file and
// renaming it over the store; tests make it fail to stand in for a crash.
var beforeSwap = func(tmp string) error { return nil }

// Compact rewrites the store in dir into a fresh file holding only its
// live pages and swaps it in: bbolt never returns the pages of deleted
// data to the file system, so a store that once held far more than it
// does now stays that size until compacted.
//
// It holds the store's lock throughout (so it returns ErrLocked, wrapped,
// while another process has the store), refuses a store that fails
// Check, writes DIR/state.db.compact, fsyncs it, checks it (Check, and
// every bucket's keys and values equal the original's), then renames it
// over state.db, if the path still names the file it copied (else
// ErrReplaced), and fsyncs the directory. An Open waiting meanwhile
// waits on the lock file, not on the old file, so it opens the new one. A crash at any point leaves
// state.db whole: the old file until the rename, the new one after; a
// stale state.db.compact is removed by the next Compact.
func Compact(ctx context.Context, dir string, opts Options) (CompactResult, error) {
	var res CompactResult
	path := filepath.Join(dir, FileName)
	fi, err := os.Stat(path)
	if err != nil {
		return res, fmt.Errorf("compact state: %w", err)
	}
	res.Before = fi.Size()
	src, err := Open(dir, opts)
	if err != nil {
		return res, fmt.Errorf("compact state: %w", err)
	}
	defer src.Close()
	if err := src.Check(ctx); err != nil {
		return res, fmt.Errorf("compact state: refusing an inconsistent store: %w", err)
	}

	tmp := path + ".compact"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return res, fmt.Errorf("compact state: %w", err)
	}
	if err := copyCompact(src.db, tmp); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("compact state: %s: %w", tmp, err)
	}
	if err := verifyCopy(ctx, src.db, tmp, opts); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("compact state: %s: %w", tmp, err)
	}
	if err := beforeSwap(tmp); err != nil {
		return res, fmt.Errorf("compact state: %w", err)
	}
	fi, err = os.Stat(tmp)
	if err != nil {
		return res, fmt.Errorf("compact state: %w", err)
	}
	res.After = fi.Size()
	// Only over the file it copied: the lock keeps every converge from
	// replacing it, so this fails only when something outside did.
	if err := sameFile(src.file, path); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("compact state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("compact state: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return res, fmt.Errorf("compact state: %w", err)
	}
	return res, nil
}

// copyCompact writes src's buckets into a new bbolt file at path, fsynced.
func copyCompact(src *bolt.DB, path string) error {
	dst, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return err
	}
	if err := bolt.Compact(dst, src, compactTxSize); err != nil {
		dst.Close()
		return fmt.Errorf("copy: %w", err)
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return fmt.Errorf("sync: %w", err)
	}
	return dst.Close()
}

// verifyCopy opens the compacted file as a store, runs Check and compares
// every bucket with src key by key.
func verifyCopy(ctx context.Context, src *bolt.DB, path string, opts Options) error {
	opts.NoSync = true // read only: nothing to make durable
	opts.noLock = true // a file only this Compact knows of
	st, err := openFile(path, opts)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Check(ctx); err != nil {
		return err
	}
	return src.View(func(stx *bolt.Tx) error {
		return st.db.View(func(dtx *bolt.Tx) error {
			for _, name := range allBuckets {
				sc, dc := stx.Bucket(name).Cursor(), dtx.Bucket(name).Cursor()
				sk, sv := sc.First()
				dk, dv := dc.First()
				for ; sk != nil || dk != nil; sk, sv, dk, dv = next2(sc, dc) {
					if !bytes.Equal(sk, dk) || !bytes.Equal(sv, dv) {
						return fmt.Errorf("bucket %s: copy differs at key %q (original %q)", name, dk, sk)
					}
				}
			}
			return nil
		})
	})
}

func next2(a, b *bolt.Cursor) (ak, av, bk, bv []byte) {
	ak, av = a.Next()
	bk, bv = b.Next()
	return
}

// syncDir fsyncs dir, making a rename in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
