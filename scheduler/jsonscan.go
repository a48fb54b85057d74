package scheduler

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"
)

// A small allocation-light JSON object splitter: value flows run for
// every consumer, and encoding/json's map decoding dominated the engine's
// profile. Values are kept as raw bytes; only object structure is parsed,
// but every value is validated as strictly as encoding/json does
// (FuzzSplitObject compares the two), so a malformed status never flows
// into a spec.

var (
	errSyntax    = errors.New("invalid JSON")
	errNotObject = errors.New("not a JSON object")
)

// maxDepth is encoding/json's nesting limit: both reject a value nested
// deeper.
const maxDepth = 10000

type field struct {
	key string
	val []byte
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// scanString returns the index after the string starting at b[i] == '"'
// and whether its text must be decoded (it has escapes or non-ASCII
// bytes, which encoding/json decodes with invalid UTF-8 replaced).
func scanString(b []byte, i int) (int, bool, error) {
	dec := false
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, dec, nil
		case c == '\\':
			dec = true
			if j+1 >= len(b) {
				return 0, false, errSyntax
			}
			j++
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) || !isHex(b[j+1]) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) {
					return 0, false, errSyntax
				}
				j += 4
			default:
				return 0, false, errSyntax
			}
		case c < 0x20:
			return 0, false, errSyntax
		case c >= 0x80:
			dec = true
		}
	}
	return 0, false, errSyntax
}

// scanNumber returns the index after the number starting at b[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, i int) (int, error) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b) || !isDigit(b[i]):
		return 0, errSyntax
	case b[i] == '0':
		i++
	default:
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return 0, errSyntax
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return 0, errSyntax
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, nil
}

// scanLiteral returns the index after lit, which must start at b[i].
func scanLiteral(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, errSyntax
	}
	return i + len(lit), nil
}

// scanValue returns the index after the JSON value starting at b[i],
// which is inside depth objects and arrays. It does not look past the
// value: the caller checks what follows.
func scanValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, errSyntax
	}
	switch c := b[i]; {
	case c == '"':
		j, _, err := scanString(b, i)
		return j, err
	case c == '{', c == '[':
		if depth >= maxDepth {
			return 0, errSyntax
		}
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == closer {
			return i + 1, nil
		}
		for {
			var err error
			if c == '{' {
				if i >= len(b) || b[i] != '"' {
					return 0, errSyntax
				}
				if i, _, err = scanString(b, i); err != nil {
					return 0, err
				}
				i = skipSpace(b, i)
				if i >= len(b) || b[i] != ':' {
					return 0, errSyntax
				}
				i = skipSpace(b, i+1)
			}
			if i, err = scanValue(b, i, depth+1); err != nil {
				return 0, err
			}
			i = skipSpace(b, i)
			switch {
			case i >= len(b):
				return 0, errSyntax
			case b[i] == closer:
				return i + 1, nil
			case b[i] != ',':
				return 0, errSyntax
			}
			i = skipSpace(b, i+1)
		}
	case c == '-' || isDigit(c):
		return scanNumber(b, i)
	case c == 't':
		return scanLiteral(b, i, "true")
	case c == 'f':
		return scanLiteral(b, i, "false")
	case c == 'n':
		return scanLiteral(b, i, "null")
	}
	return 0, errSyntax
}

// splitObject returns the fields of the JSON object b (later duplicates
// win, as with encoding/json). An empty b and null have no fields; any
// other value, and anything that is not exactly one valid JSON value,
// is an error.
func splitObject(b []byte) ([]field, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var out []field
	err := eachField(b, func(raw []byte, escaped bool, val []byte) error {
		key := string(raw)
		if escaped {
			if err := json.Unmarshal(quoted(raw), &key); err != nil {
				return err
			}
		}
		out = setField(out, key, val)
		return nil
	})
	if err == errNull {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// errNull is eachField's answer for a null document: no fields.
var errNull = errors.New("null")

// quoted returns the raw key between its quotes again.
func quoted(raw []byte) []byte {
	q := make([]byte, 0, len(raw)+2)
	q = append(q, '"')
	q = append(q, raw...)
	return append(q, '"')
}

// eachField calls f with each field of the JSON object b, in order: its
// key as written (without quotes; escaped says whether it holds escapes)
// and its raw value, all slices of b. It validates b as exactly one JSON
// value: errNull for null, errNotObject for any other non-object, an
// error of f's stops it.
func eachField(b []byte, f func(key []byte, escaped bool, val []byte) error) error {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		end, err := scanValue(b, i, 0)
		if err != nil || skipSpace(b, end) != len(b) {
			return errSyntax
		}
		if b[i] == 'n' {
			return errNull
		}
		return errNotObject
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		if skipSpace(b, i+1) != len(b) {
			return errSyntax
		}
		return nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return errSyntax
		}
		j, dec, err := scanString(b, i)
		if err != nil {
			return err
		}
		key := b[i+1 : j-1]
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return errSyntax
		}
		i = skipSpace(b, i+1)
		end, err := scanValue(b, i, 1)
		if err != nil {
			return err
		}
		if err := f(key, dec, b[i:end]); err != nil {
			return err
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return errSyntax
		}
		if b[i] == '}' {
			if skipSpace(b, i+1) != len(b) {
				return errSyntax
			}
			return nil
		}
		if b[i] != ',' {
			return errSyntax
		}
		i = skipSpace(b, i+1)
	}
}

// splitArray returns the elements of the JSON array b (exactly one
// value, nested inside depth objects and arrays).
func splitArray(b []byte, depth int) ([][]byte, error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, errSyntax
	}
	i = skipSpace(b, i+1)
	var out [][]byte
	if i < len(b) && b[i] == ']' {
		if skipSpace(b, i+1) != len(b) {
			return nil, errSyntax
		}
		return out, nil
	}
	for {
		end, err := scanValue(b, i, depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, b[i:end])
		i = skipSpace(b, end)
		if i >= len(b) {
			return nil, errSyntax
		}
		if b[i] == ']' {
			if skipSpace(b, i+1) != len(b) {
				return nil, errSyntax
			}
			return out, nil
		}
		if b[i] != ',' {
			return nil, errSyntax
		}
		i = skipSpace(b, i+1)
	}
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

// getField returns the raw value at the dotted path of object b. It
// scans b in place (no field list is built: a start checks a million
// consumers' flows with it); an invalid b has no fields, as
// splitObject would say.
func getField(b []byte, path string) ([]byte, bool) {
	seg, rest, more := strings.Cut(path, ".")
	v, ok := objectField(b, seg)
	if !ok {
		return nil, false
	}
	if !more {
		return v, true
	}
	return getField(v, rest)
}

// objectField returns the value of key in the JSON object b (the last
// one, as encoding/json decodes duplicates), validating b as a whole.
func objectField(b []byte, key string) ([]byte, bool) {
	var found []byte
	ok := false
	err := eachField(b, func(raw []byte, escaped bool, val []byte) error {
		match := string(raw) == key
		if escaped {
			var k string
			if err := json.Unmarshal(quoted(raw), &k); err != nil {
				return err
			}
			match = k == key
		}
		if match {
			found, ok = val, true
		}
		return nil
	})
	if err != nil {
		return nil, false
	}
	return found, ok
}

// setFields writes each value at its dotted path into object b and
// returns the object with keys sorted; it does not modify b.
func setFields(b []byte, sets []flowSet) ([]byte, error) {
	fs, err := splitObject(b)
	if err != nil {
		return nil, err
	}
	for _, s := range sets {
		seg, rest, more := strings.Cut(s.path, ".")
		if !more {
			fs = setField(fs, seg, s.value)
			continue
		}
		var sub []byte
		for _, f := range fs {
			if f.key == seg {
				sub = f.val
			}
		}
		nv, err := setFields(sub, []flowSet{{rest, s.value}})
		if err != nil {
			return nil, errors.New("flow into " + s.path + ": " + seg + " is not an object")
		}
		fs = setField(fs, seg, nv)
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].key < fs[j].key })
	n := 2
	for _, f := range fs {
		n += len(f.key) + len(f.val) + 4
	}
	out := make([]byte, 0, n)
	out = append(out, '{')
	for i, f := range fs {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendKey(out, f.key)
		out = append(out, ':')
		out = append(out, f.val...)
	}
	return append(out, '}'), nil
}

func appendKey(out []byte, k string) []byte {
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(k)
			return append(out, q...)
		}
	}
	out = append(out, '"')
	out = append(out, k...)
	return append(out, '"')
}
