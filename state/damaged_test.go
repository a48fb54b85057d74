package state_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/statetest"
)

// TestOpenDamaged: only a missing state file starts a fresh store. An
// existing one that is empty, truncated or not a store is ErrDamaged,
// naming the file and what is wrong, and left as it is; with Reinit it is
// moved aside, kept whole, and a fresh store starts.
func TestOpenDamaged(t *testing.T) {
	// A real store with one resource, the bytes the cases damage.
	good := t.TempDir()
	st, err := state.Open(good, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var rs []*converge.Resource
	for i := range 2000 {
		rs = append(rs, res("vpc", fmt.Sprint("a", i), ""))
	}
	commit(t, st, &converge.Batch{Resources: rs})
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(filepath.Join(good, state.FileName))
	if err != nil {
		t.Fatal(err)
	}
	zeroed := append([]byte(nil), whole...)
	clear(zeroed[:8192]) // both meta pages
	m := newestMeta(whole)
	damage := func(f func(b []byte)) []byte {
		b := append([]byte(nil), whole...)
		f(b)
		return b
	}
	ps := int(m.pageSize)
	tests := []struct {
		name    string
		content []byte
		wantWhy string
	}{
		{name: "empty", content: []byte{}, wantWhy: "empty (0 bytes)"},
		{name: "truncated", content: whole[:16384], wantWhy: "truncated"},
		{name: "one page", content: whole[:4096], wantWhy: "truncated"},
		{name: "half a meta page", content: whole[:50], wantWhy: "not a store: invalid database"},
		{name: "not a store", content: []byte(strings.Repeat("not a bbolt file\n", 1000)), wantWhy: "not a store"},
		{name: "meta pages zeroed", content: zeroed, wantWhy: "not a store"},
		// bbolt would fall back to the other meta page, losing the
		// commits after it without a word.
		{name: "meta page 0 zeroed", content: damage(func(b []byte) { clear(b[:ps]) }), wantWhy: "meta page 0 is not valid"},
		{name: "meta page 1 zeroed", content: damage(func(b []byte) { clear(b[ps : 2*ps]) }), wantWhy: "meta page 1 is not valid"},
		{name: "freelist page garbage", content: damage(func(b []byte) { garbage(b[int(m.freelist)*ps:][:ps]) }), wantWhy: "freelist page"},
		{name: "root page garbage", content: damage(func(b []byte) { garbage(b[int(m.root)*ps:][:ps]) }), wantWhy: "root page"},
		{name: "pages garbage", content: damage(func(b []byte) { garbage(b[2*ps : int(m.pgid)*ps]) }), wantWhy: "state file is empty or damaged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, state.FileName)
			if err := os.WriteFile(path, tt.content, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := state.Open(dir, state.Options{LockTimeout: 50e6})
			if err == nil {
				s.Close()
				t.Fatalf("Open of a %s file succeeded, want ErrDamaged", tt.name)
			}
			if !errors.Is(err, state.ErrDamaged) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.wantWhy) {
				t.Errorf("Open: %v; want ErrDamaged naming %s and %q", err, path, tt.wantWhy)
			}
			if got, err := os.ReadFile(path); err != nil || string(got) != string(tt.content) {
				t.Errorf("the damaged file changed (%d bytes, %v), want it left as it was", len(got), err)
			}
			// Again in the same process: the same damage, not a lock
			// that a faulted open kept.
			if s, err := state.Open(dir, state.Options{LockTimeout: 50e6}); err == nil || !errors.Is(err, state.ErrDamaged) {
				if s != nil {
					s.Close()
				}
				t.Errorf("second Open: %v; want ErrDamaged again", err)
			}

			s = statetest.OpenDir(t, dir, state.Options{Reinit: true, LockTimeout: 50e6})
			aside := s.MovedAside()
			if !strings.HasPrefix(aside, path+".damaged-") {
				t.Fatalf("MovedAside = %q, want %s.damaged-…", aside, path)
			}
			if got, err := os.ReadFile(aside); err != nil || string(got) != string(tt.content) {
				t.Errorf("moved-aside file: %d bytes, %v; want the damaged file whole", len(got), err)
			}
			if rs, err := s.Resources(context.Background(), state.Filter{}); err != nil || len(rs) != 0 {
				t.Errorf("fresh store holds %d resources, %v; want none", len(rs), err)
			}
		})
	}

	// Reinit leaves an intact store alone, and a missing file starts fresh.
	s := statetest.OpenDir(t, good, state.Options{Reinit: true})
	if s.MovedAside() != "" {
		t.Errorf("an intact store was moved aside to %s", s.MovedAside())
	}
	if r, err := s.Resource(context.Background(), "vpc/a0"); err != nil || r == nil {
		t.Errorf("intact store after Reinit: %v, %v", r, err)
	}
	if s := statetest.OpenDir(t, t.TempDir(), state.Options{}); s.MovedAside() != "" {
		t.Errorf("a new store says it moved %s aside", s.MovedAside())
	}
}

// TestOpenFaulted: a file whose meta and freelist page headers are sound
// but whose freelist makes bbolt fault (or panic) inside Open is
// ErrDamaged, and stays ErrDamaged when this process opens it again
// (bbolt keeps the lock of an open that faulted until the process exits).
func TestOpenFaulted(t *testing.T) {
	dir := t.TempDir()
	st, err := state.Open(dir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var rs []*converge.Resource
	for i := range 500 {
		rs = append(rs, res("vpc", fmt.Sprint("a", i), ""))
	}
	commit(t, st, &converge.Batch{Resources: rs})
	commit(t, st, &converge.Batch{DeletedResources: []converge.ID{"vpc/a1", "vpc/a2"}})
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, state.FileName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := newestMeta(b)
	if m.freelist == ^uint64(0) {
		t.Skip("this store keeps no freelist on disk")
	}
	// The freelist page's count says "more than 64K ids, the first
	// element holds how many": claim 2^40 of them.
	fl := b[int(m.freelist)*int(m.pageSize):]
	binary.NativeEndian.PutUint16(fl[10:], 0xFFFF)
	binary.NativeEndian.PutUint64(fl[16:], 1<<40)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		s, err := state.Open(dir, state.Options{LockTimeout: 50e6})
		if err == nil {
			s.Close()
			t.Fatalf("Open %d of a store with a bad freelist succeeded", i+1)
		}
		if !errors.Is(err, state.ErrDamaged) || !strings.Contains(err.Error(), path) {
			t.Errorf("Open %d: %v; want ErrDamaged naming %s", i+1, err, path)
		}
	}
}

// TestReadDamaged: damage that Open's checks do not reach (here, every
// page written over while the store is open) makes reads and commits
// fail with ErrDamaged naming the file, instead of panicking inside bbolt
// or answering with nothing.
func TestReadDamaged(t *testing.T) {
	dir := t.TempDir()
	st, err := state.Open(dir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var rs []*converge.Resource
	for i := range 2000 {
		rs = append(rs, res("vpc", fmt.Sprint("a", i), ""))
	}
	commit(t, st, &converge.Batch{Resources: rs})
	path := filepath.Join(dir, state.FileName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := newestMeta(b)
	ps := int(m.pageSize)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, int(m.pgid)*ps-2*ps)
	garbage(junk)
	if _, err := f.WriteAt(junk, int64(2*ps)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, state.ErrDamaged) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v; want ErrDamaged naming %s", what, err, path)
		}
	}
	_, err = st.Resources(context.Background(), state.Filter{})
	want("Resources", err)
	_, err = st.Resource(context.Background(), "vpc/a1000")
	want("Resource", err)
	_, err = st.Load(context.Background())
	want("Load", err)
	_, err = st.Events(context.Background(), "", 10)
	want("Events", err)
	want("Commit", st.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{res("vpc", "b", "")}}))
}

// boltMeta is what the tests read of a bbolt meta page.
type boltMeta struct {
	pageSize                   uint32
	root, freelist, pgid, txid uint64
}

// newestMeta reads b's meta page with the highest transaction id.
func newestMeta(b []byte) boltMeta {
	ne := binary.NativeEndian
	read := func(off int) boltMeta {
		return boltMeta{pageSize: ne.Uint32(b[off+24:]), root: ne.Uint64(b[off+32:]), freelist: ne.Uint64(b[off+48:]),
			pgid: ne.Uint64(b[off+56:]), txid: ne.Uint64(b[off+64:])}
	}
	m0 := read(0)
	if m1 := read(int(m0.pageSize)); m1.txid > m0.txid {
		return m1
	}
	return m0
}

// garbage fills b with reproducible random bytes.
func garbage(b []byte) {
	r := rand.New(rand.NewPCG(7, 11))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}
