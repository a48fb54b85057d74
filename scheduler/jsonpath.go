package scheduler

import (
	"bytes"
	"encoding/json"
	"reflect"
	"sort"
)

// flowSet is one value to write at a dotted path.
type flowSet struct {
	path  string
	value json.RawMessage
}

// jsonEqual reports whether a and b encode the same value, as
// encoding/json decodes it (object key order and number spelling do not
// matter; invalid JSON equals nothing but its very bytes). It walks the
// raw texts and compares equal bytes without decoding them, so a
// 15 MB BOM that differs in one team costs a scan, not two decoded
// trees.
func jsonEqual(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	eq, err := rawEqual(a, b, 0)
	return err == nil && eq
}

// rawEqual is jsonEqual for values inside depth objects and arrays; an
// error means one side is not exactly one valid JSON value.
func rawEqual(a, b []byte, depth int) (bool, error) {
	a, b = bytes.TrimSpace(a), bytes.TrimSpace(b)
	if len(a) == 0 || len(b) == 0 {
		return false, errSyntax
	}
	if bytes.Equal(a, b) {
		// Equal bytes: equal if valid.
		end, err := scanValue(a, 0, depth)
		if err != nil || end != len(a) {
			return false, errSyntax
		}
		return true, nil
	}
	if depth >= maxDepth {
		return false, errSyntax
	}
	switch {
	case a[0] == '{' && b[0] == '{':
		x, err := splitObject(a)
		if err != nil {
			return false, err
		}
		y, err := splitObject(b)
		if err != nil {
			return false, err
		}
		if len(x) != len(y) {
			return false, nil
		}
		var byKey map[string][]byte
		if len(y) > 16 {
			byKey = make(map[string][]byte, len(y))
			for _, f := range y {
				byKey[f.key] = f.val
			}
		}
		for _, f := range x {
			var w []byte
			var ok bool
			if byKey != nil {
				w, ok = byKey[f.key]
			} else {
				for _, g := range y {
					if g.key == f.key {
						w, ok = g.val, true
						break
					}
				}
			}
			if !ok {
				return false, nil
			}
			if eq, err := rawEqual(f.val, w, depth+1); err != nil || !eq {
				return false, err
			}
		}
		return true, nil
	case a[0] == '[' && b[0] == '[':
		x, err := splitArray(a, depth)
		if err != nil {
			return false, err
		}
		y, err := splitArray(b, depth)
		if err != nil {
			return false, err
		}
		if len(x) != len(y) {
			return false, nil
		}
		for i := range x {
			if eq, err := rawEqual(x[i], y[i], depth+1); err != nil || !eq {
				return false, err
			}
		}
		return true, nil
	}
	// Scalars, or values of different types: decode them (small).
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false, errSyntax
	}
	return reflect.DeepEqual(x, y), nil
}

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
