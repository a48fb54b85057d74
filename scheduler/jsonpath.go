package scheduler

import (
	"encoding/json"
	"sort"

	"github.com/convergehq/converge/proto/rawjson"
)

// flowSet is one value to write at a dotted path.
type flowSet struct {
	path  string
	value json.RawMessage
}

// jsonEqual reports whether a and b encode the same value, as
// encoding/json decodes it (rawjson.Equal: object key order and number
// spelling do not matter; invalid JSON equals nothing but its very
// bytes), comparing the raw texts so that a 15 MB BOM that differs in
// one team costs a scan, not two decoded trees.
func jsonEqual(a, b json.RawMessage) bool { return rawjson.Equal(a, b) }

// topLevelDiff lists the top-level fields whose values differ. The
// objects are split in place (no copy of a 15 MB BOM's values).
func topLevelDiff(a, b json.RawMessage) []string {
	x, _ := splitObject(a)
	y, _ := splitObject(b)
	in := func(fs []field, k string) ([]byte, bool) {
		for _, f := range fs {
			if f.key == k {
				return f.val, true
			}
		}
		return nil, false
	}
	var out []string
	for _, f := range x {
		if w, ok := in(y, f.key); !ok || !jsonEqual(f.val, w) {
			out = append(out, f.key)
		}
	}
	for _, f := range y {
		if _, ok := in(x, f.key); !ok {
			out = append(out, f.key)
		}
	}
	sort.Strings(out)
	return out
}
