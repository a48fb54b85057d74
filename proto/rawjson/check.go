package rawjson

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
)

// A DuplicateKeyError is returned by Check when an object holds one key
// twice (as texts: "a" and "\u0061" are one key).
type DuplicateKeyError struct {
	// Key is the key's text.
	Key string
	// Path is where the object is in the document, as
	// `net.subnets[2]`; empty for the document itself.
	Path string
}

func (e *DuplicateKeyError) Error() string {
	if e.Path == "" {
		return "duplicate key " + strconv.Quote(e.Key)
	}
	return "duplicate key " + strconv.Quote(e.Key) + " in " + e.Path
}

// Check returns nil when b is exactly one JSON value that encoding/json
// accepts, nested at most MaxDepth deep, whose objects hold no key twice.
// Otherwise it returns ErrSyntax, ErrTooDeep or a *DuplicateKeyError.
// It is the boundary of the package's policy: a document from outside is
// checked once, then cut with Fields, Field and Elements.
func Check(b []byte) error {
	var d keyStack
	s := scanner{keys: &d}
	i := skipSpace(b, 0)
	end, err := s.value(b, i, 0)
	if err != nil {
		return err
	}
	if skipSpace(b, end) != len(b) {
		return ErrSyntax
	}
	return nil
}

// CheckObject is Check for a document that must be an object: one whose
// first byte after white space is not '{' is ErrNotObject.
func CheckObject(b []byte) error {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return ErrNotObject
	}
	return Check(b)
}

// manyKeys is how many keys an object may have before Check looks its
// keys up in a map rather than comparing each with those before it.
const manyKeys = 32

// scanner reads JSON values; with keys, it refuses an object holding one
// key twice. The recursion is bounded by MaxDepth. The text is each
// method's b, not a field: what a walk hands out of it must not make the
// key stack escape to the heap.
type scanner struct {
	keys *keyStack // nil: duplicates are not looked for
}

// keyStack holds the keys read so far of the objects being read,
// outermost object first. It holds no pointer into itself, so that Check
// keeps it on its stack.
type keyStack struct {
	n       int
	small   [24]keyRef
	more    []keyRef // past small
	decoded []string // the texts of keys that are not plain
}

// A keyRef is a key's text: b[start:end] of the document, or with end <
// 0, decoded[start].
type keyRef struct{ start, end int }

func (d *keyStack) at(i int) keyRef {
	if i < len(d.small) {
		return d.small[i]
	}
	return d.more[i-len(d.small)]
}

func (d *keyStack) push(k keyRef) {
	if d.n < len(d.small) {
		d.small[d.n] = k
	} else {
		d.more = append(d.more[:d.n-len(d.small)], k)
	}
	d.n++
}

// text returns k's text as a string (a copy).
func (s *scanner) text(b []byte, k keyRef) string {
	if k.end < 0 {
		return s.keys.decoded[k.start]
	}
	return string(b[k.start:k.end])
}

// is reports whether k's text is t.
func (s *scanner) is(b []byte, k keyRef, t []byte) bool {
	if k.end < 0 {
		return s.keys.decoded[k.start] == string(t)
	}
	return bytes.Equal(b[k.start:k.end], t)
}

// addKey records the key at b[i:j] (its quotes included) of the object
// whose first key is at base, or returns the error naming it when the
// object has it already; seen is that object's map past manyKeys keys.
func (s *scanner) addKey(b []byte, i, j int, plain bool, base int, seen *map[string]bool) error {
	d := s.keys
	k := keyRef{i + 1, j - 1}
	t := b[i+1 : j-1]
	if !plain {
		d.decoded = append(d.decoded, unquote(t))
		k = keyRef{len(d.decoded) - 1, -1}
		t = []byte(d.decoded[k.start])
	}
	if *seen != nil {
		if (*seen)[string(t)] {
			return &DuplicateKeyError{Key: string(t)}
		}
		(*seen)[string(t)] = true
	} else {
		for x := base; x < d.n; x++ {
			if s.is(b, d.at(x), t) {
				return &DuplicateKeyError{Key: string(t)}
			}
		}
		if d.n-base == manyKeys {
			*seen = make(map[string]bool, 2*manyKeys)
			for x := base; x < d.n; x++ {
				(*seen)[s.text(b, d.at(x))] = true
			}
			(*seen)[string(t)] = true
		}
	}
	d.push(k)
	return nil
}

func (s *scanner) value(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, ErrSyntax
	}
	switch c := b[i]; {
	case c == '"':
		j, _, err := String(b, i)
		return j, err
	case c == '{', c == '[':
		return s.walk(b, i, depth, nil)
	case c == '-' || isDigit(c):
		j, _, err := Number(b, i)
		return j, err
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	}
	return 0, ErrSyntax
}

// walk reads the object or array at b[i] (b[i] is '{' or '['), which
// lies inside depth objects and arrays, and returns the index after it.
// With f, it calls f with each member's key (none for an array) and
// value as written, in order; an error of f's stops it.
func (s *scanner) walk(b []byte, i, depth int, f func(k Key, val []byte) error) (int, error) {
	if depth >= MaxDepth {
		return 0, ErrTooDeep
	}
	obj := b[i] == '{'
	closer := byte(']')
	if obj {
		closer = '}'
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == closer {
		return i + 1, nil
	}
	base := 0
	if s.keys != nil {
		base = s.keys.n
	}
	var seen map[string]bool // past manyKeys keys
	for n := 0; ; n++ {
		var key Key
		if obj {
			if i >= len(b) || b[i] != '"' {
				return 0, ErrSyntax
			}
			j, plain, err := String(b, i)
			if err != nil {
				return 0, err
			}
			if s.keys != nil {
				if err := s.addKey(b, i, j, plain, base, &seen); err != nil {
					return 0, err
				}
			}
			key = Key{b[i+1 : j-1], plain}
			i = skipSpace(b, j)
			if i >= len(b) || b[i] != ':' {
				return 0, ErrSyntax
			}
			i = skipSpace(b, i+1)
		}
		end, err := s.value(b, i, depth+1)
		if err != nil {
			return 0, within(err, obj, key, n)
		}
		if f != nil {
			if err := f(key, b[i:end]); err != nil {
				return 0, err
			}
		}
		i = skipSpace(b, end)
		switch {
		case i >= len(b):
			return 0, ErrSyntax
		case b[i] == closer:
			if s.keys != nil {
				s.keys.n = base
			}
			return i + 1, nil
		case b[i] != ',':
			return 0, ErrSyntax
		}
		i = skipSpace(b, i+1)
	}
}

// within returns err, a duplicate key inside the member key (obj) or the
// element n of a container, with that place prefixed to its path.
func within(err error, obj bool, key Key, n int) error {
	var d *DuplicateKeyError
	if errors.As(err, &d) {
		if obj {
			d.Path = member(key.String(), d.Path)
		} else {
			d.Path = index(n, d.Path)
		}
	}
	return err
}

func member(key, rest string) string {
	if key == "" || strings.ContainsAny(key, ".[]\"\\ ") || !strconv.CanBackquote(key) {
		key = strconv.Quote(key)
	}
	if rest == "" || rest[0] == '[' {
		return key + rest
	}
	return key + "." + rest
}

func index(n int, rest string) string {
	i := "[" + strconv.Itoa(n) + "]"
	if rest == "" || rest[0] == '[' {
		return i + rest
	}
	return i + "." + rest
}
