package state

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// MeasureRaw measures this machine's raw bbolt limits in a scratch
// database under dir, for benchmarks that report converge's own rates
// against them in the same run: putsPerSec with 1,000 puts of ~200-byte
// values per fsynced transaction, and txnsPerSec with one put per fsynced
// transaction. Each is measured for about d. dir is removed afterwards.
func MeasureRaw(dir string, d time.Duration) (putsPerSec, txnsPerSec float64, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, 0, fmt.Errorf("measure bbolt: %w", err)
	}
	defer os.RemoveAll(dir)
	db, err := bolt.Open(filepath.Join(dir, "raw.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return 0, 0, fmt.Errorf("measure bbolt: %w", err)
	}
	defer db.Close()
	val := make([]byte, 200)
	var key [8]byte
	var seq uint64
	run := func(perTxn int) (float64, error) {
		start := time.Now()
		var n int
		for time.Since(start) < d {
			err := db.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("raw"))
				if err != nil {
					return err
				}
				for i := 0; i < perTxn; i++ {
					seq++
					binary.BigEndian.PutUint64(key[:], seq)
					if err := b.Put(key[:], val); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return 0, fmt.Errorf("measure bbolt: %w", err)
			}
			n++
		}
		return float64(n*perTxn) / time.Since(start).Seconds(), nil
	}
	if putsPerSec, err = run(1000); err != nil {
		return 0, 0, err
	}
	if txnsPerSec, err = run(1); err != nil {
		return 0, 0, err
	}
	return putsPerSec, txnsPerSec, nil
}
