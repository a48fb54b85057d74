package rawjson

import (
	"bytes"
	"encoding/json"
	"reflect"
)

// Equal reports whether a and b encode the same value as encoding/json
// decodes it: object key order, white space and number spelling do not
// matter, a duplicate key reads as its last value, and a text that is not
// exactly one JSON value equals nothing but its very bytes. It walks the
// raw texts and compares equal bytes without decoding them, so a 15 MB
// spec that differs in one element costs a scan, not two decoded trees.
func Equal(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	eq, err := equal(a, b, 0)
	return err == nil && eq
}

// field is one member of an object: its key's text and raw value.
type field struct {
	key string
	val []byte
}

// fieldsOf returns the fields of the object b inside depth objects and
// arrays, a later duplicate replacing an earlier one.
func fieldsOf(b []byte, depth int) ([]field, error) {
	var out []field
	err := fields(b, depth, func(k Key, v []byte) error {
		out = setField(out, k.String(), v)
		return nil
	})
	return out, err
}

func setField(fs []field, key string, val []byte) []field {
	for k := range fs {
		if fs[k].key == key {
			fs[k].val = val
			return fs
		}
	}
	return append(fs, field{key, val})
}

// equal is Equal for values inside depth objects and arrays; an error
// means one side is not exactly one JSON value.
func equal(a, b []byte, depth int) (bool, error) {
	a, b = trimSpace(a), trimSpace(b)
	if len(a) == 0 || len(b) == 0 {
		return false, ErrSyntax
	}
	if bytes.Equal(a, b) {
		// Equal bytes: equal if valid.
		end, err := Value(a, 0, depth)
		if err != nil || end != len(a) {
			return false, ErrSyntax
		}
		return true, nil
	}
	switch {
	case a[0] == '{' && b[0] == '{':
		x, err := fieldsOf(a, depth)
		if err != nil {
			return false, err
		}
		y, err := fieldsOf(b, depth)
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
			if eq, err := equal(f.val, w, depth+1); err != nil || !eq {
				return false, err
			}
		}
		return true, nil
	case a[0] == '[' && b[0] == '[':
		var x, y [][]byte
		if err := elements(a, depth, func(v []byte) error { x = append(x, v); return nil }); err != nil {
			return false, err
		}
		if err := elements(b, depth, func(v []byte) error { y = append(y, v); return nil }); err != nil {
			return false, err
		}
		if len(x) != len(y) {
			return false, nil
		}
		for i := range x {
			if eq, err := equal(x[i], y[i], depth+1); err != nil || !eq {
				return false, err
			}
		}
		return true, nil
	}
	// Scalars, or values of different types: decode them (small).
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false, ErrSyntax
	}
	return reflect.DeepEqual(x, y), nil
}

// trimSpace cuts JSON white space (not Unicode's: "0\v" is no JSON) off
// both ends of b.
func trimSpace(b []byte) []byte {
	i, j := skipSpace(b, 0), len(b)
	for j > i && isSpace(b[j-1]) {
		j--
	}
	return b[i:j]
}
