package etcdstate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/convergehq/converge/state/etcdtest"
	"github.com/convergehq/converge/state/internal/rules"
)

// TestWriterSeesItsOwnWrites: a write's scans, counts and first keys
// merge what is stored with what the write put and deleted, in either
// direction, from any key, keys only or not, across pages (the rules'
// Chunked owner index scans backwards inside a write; etcd's own layout
// never does, so only this test holds that path).
func TestWriterSeesItsOwnWrites(t *testing.T) {
	cluster := etcdtest.Start(t, etcdtest.Options{})
	s, err := Open(Options{Endpoints: cluster.Endpoints, Prefix: "/kv-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	model := map[string]string{}
	err = s.update(ctx, func(w rules.Writer) error {
		for i := range 150 {
			k := fmt.Sprintf("a\x00%03d", i)
			model[k] = "stored " + k
			if err := w.Put(rules.Owners, []byte(k), []byte(model[k])); err != nil {
				return err
			}
		}
		model["b\x00x"] = "other owner"
		return w.Put(rules.Owners, []byte("b\x00x"), []byte(model["b\x00x"]))
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.update(ctx, func(w rules.Writer) error {
		for i := range 150 {
			k := fmt.Sprintf("a\x00%03d", i)
			switch i % 3 {
			case 0:
				delete(model, k)
				if err := w.Delete(rules.Owners, []byte(k)); err != nil {
					return err
				}
			case 1:
				model[k] = "rewritten " + k
				if err := w.Put(rules.Owners, []byte(k), []byte(model[k])); err != nil {
					return err
				}
			}
			if i%10 == 5 { // a key between the stored ones
				k += "+"
				model[k] = "new " + k
				if err := w.Put(rules.Owners, []byte(k), []byte(model[k])); err != nil {
					return err
				}
			}
		}
		for _, tt := range []struct {
			from           string
			desc, keysOnly bool
		}{{}, {desc: true}, {from: "a\x00077"}, {from: "a\x00077", desc: true}, {from: "a\x00075+", desc: true}, {keysOnly: true}} {
			var want []string
			for _, k := range slices.Sorted(maps.Keys(model)) {
				if strings.HasPrefix(k, "a\x00") && (tt.from == "" || !tt.desc && k >= tt.from || tt.desc && k <= tt.from) {
					want = append(want, k+"="+model[k])
				}
			}
			if tt.desc {
				slices.Reverse(want)
			}
			var got []string
			r := rules.Range{Prefix: []byte("a\x00"), Desc: tt.desc, KeysOnly: tt.keysOnly}
			if tt.from != "" {
				r.From = []byte(tt.from)
			}
			err := w.Scan(rules.Owners, r, func(k, v []byte) error {
				if tt.keysOnly {
					v = []byte(model[string(k)])
				}
				got = append(got, string(k)+"="+string(v))
				return nil
			})
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				t.Errorf("Scan from %q desc %v keys only %v:\ngot  %q\nwant %q", tt.from, tt.desc, tt.keysOnly, got, want)
			}
			if n, err := w.Count(rules.Owners, []byte("a\x00")); err != nil || tt.from == "" && !tt.desc && n != len(want) {
				t.Errorf("Count = %d, %v; want %d", n, err, len(want))
			}
		}
		firsts, err := w.FirstKeys(rules.Owners, [][]byte{[]byte("a\x00"), []byte("b\x00"), []byte("c\x00")})
		if err != nil {
			return err
		}
		if got, want := fmt.Sprintf("%q", firsts), `["a\x00001" "b\x00x" ""]`; got != want {
			t.Errorf("FirstKeys = %s, want %s", got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
