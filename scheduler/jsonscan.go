package scheduler

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"
)

// A small allocation-light JSON object splitter: value flows run for
// every consumer, and encoding/json's map decoding dominated the engine's
// profile. Values are kept as raw bytes; only object structure is parsed.

var errNotObject = errors.New("not a JSON object")

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

// scanString returns the index after the string starting at b[i] == '"'
// and whether it contains escapes.
func scanString(b []byte, i int) (int, bool, error) {
	esc := false
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			esc = true
			j++
		case '"':
			return j + 1, esc, nil
		}
	}
	return 0, false, errNotObject
}

// scanValue returns the index after the JSON value starting at b[i].
func scanValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errNotObject
	}
	switch b[i] {
	case '"':
		j, _, err := scanString(b, i)
		return j, err
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				k, _, err := scanString(b, j)
				if err != nil {
					return 0, err
				}
				j = k - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errNotObject
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && !isSpace(b[j]) {
			j++
		}
		if j == i {
			return 0, errNotObject
		}
		return j, nil
	}
}

// splitObject returns the fields of the JSON object b (later duplicates
// win, as with encoding/json).
func splitObject(b []byte) ([]field, error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		if i >= len(b) || string(b[i:]) == "null" {
			return nil, nil
		}
		return nil, errNotObject
	}
	i = skipSpace(b, i+1)
	var out []field
	if i < len(b) && b[i] == '}' {
		return out, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, errNotObject
		}
		j, esc, err := scanString(b, i)
		if err != nil {
			return nil, err
		}
		var key string
		if esc {
			if err := json.Unmarshal(b[i:j], &key); err != nil {
				return nil, err
			}
		} else {
			key = string(b[i+1 : j-1])
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return nil, errNotObject
		}
		i = skipSpace(b, i+1)
		end, err := scanValue(b, i)
		if err != nil {
			return nil, err
		}
		out = setField(out, key, b[i:end])
		i = skipSpace(b, end)
		if i >= len(b) {
			return nil, errNotObject
		}
		if b[i] == '}' {
			return out, nil
		}
		if b[i] != ',' {
			return nil, errNotObject
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

// getField returns the raw value at the dotted path of object b.
func getField(b []byte, path string) ([]byte, bool) {
	seg, rest, more := strings.Cut(path, ".")
	fs, err := splitObject(b)
	if err != nil {
		return nil, false
	}
	for _, f := range fs {
		if f.key == seg {
			if !more {
				return f.val, true
			}
			return getField(f.val, rest)
		}
	}
	return nil, false
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
