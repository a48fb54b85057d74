package rawjson

import (
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// MaxDepth is how deep objects and arrays may nest: encoding/json's own
// limit, so that what Check accepts encoding/json decodes.
const MaxDepth = 10000

var (
	// ErrSyntax is returned when a text is not exactly one JSON value.
	ErrSyntax = errors.New("invalid JSON")
	// ErrTooDeep is returned when objects and arrays nest deeper than
	// MaxDepth.
	ErrTooDeep = errors.New("invalid JSON: nested deeper than " + strconv.Itoa(MaxDepth))
	// ErrNotObject is returned when a text that must be an object (or
	// null, for Fields) is another value.
	ErrNotObject = errors.New("not a JSON object")
	// ErrNotArray is returned when a text that must be an array is another
	// value.
	ErrNotArray = errors.New("not a JSON array")
)

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// String returns the index after the JSON string that starts at b[i]
// (b[i] is '"'), and whether the bytes between its quotes are its text:
// they hold no escape and are valid UTF-8. A string that is not plain
// reads as encoding/json decodes it (Key.String).
func String(b []byte, i int) (end int, plain bool, err error) {
	plain = true
	ascii := true
	for j := i + 1; j < len(b); j++ {
		c := b[j]
		if c >= 0x20 && c < 0x80 && c != '"' && c != '\\' {
			continue
		}
		switch {
		case c == '"':
			if plain && !ascii {
				plain = utf8.Valid(b[i+1 : j])
			}
			return j + 1, plain, nil
		case c == '\\':
			plain = false
			if j+1 >= len(b) {
				return 0, false, ErrSyntax
			}
			j++
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) || !isHex(b[j+1]) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) {
					return 0, false, ErrSyntax
				}
				j += 4
			default:
				return 0, false, ErrSyntax
			}
		case c < 0x20:
			return 0, false, ErrSyntax
		default:
			ascii = false
		}
	}
	return 0, false, ErrSyntax
}

// Number returns the index after the JSON number that starts at b[i]
// (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?), and whether it is
// written as an integer: neither fraction nor exponent.
func Number(b []byte, i int) (end int, isInt bool, err error) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b) || !isDigit(b[i]):
		return 0, false, ErrSyntax
	case b[i] == '0':
		i++
	default:
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	isInt = true
	if i < len(b) && b[i] == '.' {
		isInt = false
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return 0, false, ErrSyntax
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		isInt = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return 0, false, ErrSyntax
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, isInt, nil
}

// literal returns the index after lit, which must start at b[i].
func literal(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, ErrSyntax
	}
	return i + len(lit), nil
}

// Value returns the index after the JSON value that starts at b[i], which
// lies inside depth objects and arrays (0 for a document). It does not
// look past the value, nor for duplicate keys: the caller checks what
// follows.
func Value(b []byte, i, depth int) (int, error) {
	var s scanner
	return s.value(b, i, depth)
}

// A Key is an object key as written, without its quotes: a slice of the
// document.
type Key struct {
	raw   []byte
	plain bool
}

// Is reports whether k's text is s.
func (k Key) Is(s string) bool {
	if k.plain {
		return string(k.raw) == s
	}
	return k.String() == s
}

// String returns k's text, as encoding/json decodes it.
func (k Key) String() string {
	if k.plain {
		return string(k.raw)
	}
	return unquote(k.raw)
}

// unquote decodes the text of a valid JSON string written without its
// quotes.
func unquote(raw []byte) string {
	q := make([]byte, 0, len(raw)+2)
	q = append(q, '"')
	q = append(q, raw...)
	q = append(q, '"')
	var s string
	if json.Unmarshal(q, &s) != nil {
		// String accepted it, so encoding/json decodes it (invalid
		// UTF-8 and lone surrogates become U+FFFD): not reached.
		return string(raw)
	}
	return s
}

// Fields calls f with each member of the JSON object b, in order: its key
// and its value as written (a slice of b). b must be exactly one JSON
// value; null has no members (encoding/json decodes it into an empty map)
// and any other value is ErrNotObject. An error of f's stops the walk and
// is returned. Duplicate keys are not looked for: Check did, at the
// boundary (f sees each one; keeping the last is encoding/json's reading).
func Fields(b []byte, f func(k Key, val []byte) error) error {
	return fields(b, 0, f)
}

// fields is Fields for an object inside depth objects and arrays.
func fields(b []byte, depth int, f func(k Key, val []byte) error) error {
	return whole(b, depth, '{', f)
}

// Field returns the value of key in the JSON object b (the last one, as
// encoding/json decodes duplicates) and whether it is there, checking b as
// Fields does.
func Field(b []byte, key string) (val []byte, ok bool, err error) {
	err = Fields(b, func(k Key, v []byte) error {
		if k.Is(key) {
			val, ok = v, true
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return val, ok, nil
}

// Elements calls f with each element of the JSON array b, in order, as
// written (a slice of b). b must be exactly one JSON array (ErrNotArray
// otherwise). An error of f's stops the walk and is returned.
func Elements(b []byte, f func(val []byte) error) error {
	return elements(b, 0, f)
}

// elements is Elements for an array inside depth objects and arrays.
func elements(b []byte, depth int, f func(val []byte) error) error {
	return whole(b, depth, '[', func(_ Key, v []byte) error { return f(v) })
}

// whole walks b, exactly one JSON value inside depth objects and arrays,
// that must be an object (opener '{'; null has no members) or an array
// ('['), calling f with each member or element.
func whole(b []byte, depth int, opener byte, f func(k Key, val []byte) error) error {
	var s scanner
	i := skipSpace(b, 0)
	var end int
	var err error
	if i < len(b) && b[i] == opener {
		end, err = s.walk(b, i, depth, f)
	} else {
		end, err = s.value(b, i, depth)
	}
	if err != nil {
		return err
	}
	if skipSpace(b, end) != len(b) {
		return ErrSyntax
	}
	switch {
	case b[i] == opener:
		return nil
	case opener == '{' && b[i] == 'n':
		return nil
	case opener == '{':
		return ErrNotObject
	}
	return ErrNotArray
}
