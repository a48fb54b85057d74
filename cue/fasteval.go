package cue

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"cuelang.org/go/cue/token"

	"github.com/convergehq/converge"
)

// The fast path's evaluation: running a compiled composer over one
// decoded spec (run, runSel), reading values (fields, items, selectors,
// comparisons), comprehension clauses and the builtins of the subset.

// topField is a field, hidden field or let of the expression's struct.
type topField struct {
	name    string
	regular bool // a regular field: its value must be concrete data
	eval    evalFn
	// stream, for children and edges when they are list literals that
	// nothing refers to, emits each element as it is made.
	stream streamFn
}

// topField evaluates top-level field i once.
func (e *fenv) topField(i int) (any, error) {
	if e.state[i] == 2 {
		return e.top[i], nil
	}
	return e.c.eval(e, i)
}

func ofType(v any, typ string) bool {
	switch typ {
	case "_":
		return true
	case "string":
		_, ok := v.(string)
		return ok
	case "int", "number":
		_, ok := v.(int64)
		return ok
	case "bool":
		_, ok := v.(bool)
		return ok
	}
	return false
}

// selectField is v.name: the hidden field name (or definition) when
// hidden, else the regular field name. Only a definition instance has
// hidden fields (none has definitions).
func selectField(e *fenv, v any, name string, hidden bool) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		if x, ok := v[name]; ok && !hidden {
			return x, nil
		}
	case *fobj:
		if x, ok := v.get(name); ok && !hidden {
			return x, nil
		}
	case *finst:
		if i, ok := v.def.index[name]; ok && v.def.fields[i].hidden == hidden {
			return v.field(e, i)
		}
	}
	return nil, fallback("no field %s in %T", name, v)
}

// scalarEqual is CUE's == on null, bool, int and string values (values
// of two kinds differ); ok is false for anything else.
func scalarEqual(a, b any) (eq, ok bool) {
	if !isScalar(a) || !isScalar(b) {
		return false, false
	}
	return a == b, true
}

func isScalar(v any) bool {
	switch v.(type) {
	case nil, bool, int64, string:
		return true
	}
	return false
}

func compare(a, b any) (int, bool) {
	switch a := a.(type) {
	case int64:
		if b, ok := b.(int64); ok {
			switch {
			case a < b:
				return -1, true
			case a > b:
				return 1, true
			}
			return 0, true
		}
	case string:
		if b, ok := b.(string); ok {
			return strings.Compare(a, b), true
		}
	}
	return 0, false
}

// run runs the clauses from i on, calling body for each binding.
func runClauses(e *fenv, cls []clause, i int, body func() error) error {
	if i == len(cls) {
		return body()
	}
	c := cls[i]
	v, err := c.src(e)
	if err != nil {
		return err
	}
	switch c.kind {
	case token.IF:
		b, ok := v.(bool)
		if !ok {
			return fallback("if on %T", v)
		}
		if !b {
			return nil
		}
		return runClauses(e, cls, i+1, body)
	case token.LET:
		e.slots[c.val] = v
		return runClauses(e, cls, i+1, body)
	}
	if c.part && e.sel != nil {
		src, ok := v.([]any)
		if !ok || len(src) != len(e.sel) {
			return fallback("the parts list changed")
		}
		for k, x := range src {
			if !e.sel[k] {
				continue
			}
			e.part = k
			if c.key >= 0 {
				e.slots[c.key] = int64(k)
			}
			e.slots[c.val] = x
			if err := runClauses(e, cls, i+1, body); err != nil {
				return err
			}
		}
		e.part = -1
		return nil
	}
	switch src := v.(type) {
	case []any:
		for k, x := range src {
			if c.key >= 0 {
				e.slots[c.key] = int64(k)
			}
			e.slots[c.val] = x
			if err := runClauses(e, cls, i+1, body); err != nil {
				return err
			}
		}
		return nil
	case map[string]any:
		keys := make([]string, 0, len(src))
		for k := range src {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if c.key >= 0 {
				e.slots[c.key] = k
			}
			e.slots[c.val] = src[k]
			if err := runClauses(e, cls, i+1, body); err != nil {
				return err
			}
		}
		return nil
	case *fobj:
		if src.unordered {
			return fallback("for over a struct built by comprehensions")
		}
		for j, k := range src.keys {
			if c.key >= 0 {
				e.slots[c.key] = k
			}
			e.slots[c.val] = src.vals[j]
			if err := runClauses(e, cls, i+1, body); err != nil {
				return err
			}
		}
		return nil
	}
	return fallback("for over %T", v)
}

// fastBuiltin is a builtin implemented in Go as CUE's: fn returns an
// error wherever CUE's would fail (and wherever unsure).
type fastBuiltin struct {
	args int
	fn   func(args [4]any) (any, error)
}

var errArg = errors.New("argument")

// fastPackages are the imports the subset knows.
var fastPackages = map[string]bool{"crypto/sha256": true, "encoding/hex": true, "strconv": true, "strings": true}

func str(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", errArg
	}
	return s, nil
}

// intArg is an int argument that fits a Go int.
func intArg(v any) (int, error) {
	n, ok := v.(int64)
	if !ok || int64(int(n)) != n {
		return 0, errArg
	}
	return int(n), nil
}

func str1(f func(string) string) fastBuiltin {
	return fastBuiltin{1, func(a [4]any) (any, error) {
		s, err := str(a[0])
		if err != nil {
			return nil, err
		}
		return f(s), nil
	}}
}

func str2(f func(string, string) any) fastBuiltin {
	return fastBuiltin{2, func(a [4]any) (any, error) {
		s, err := str(a[0])
		if err != nil {
			return nil, err
		}
		t, err := str(a[1])
		if err != nil {
			return nil, err
		}
		return f(s, t), nil
	}}
}

var fastBuiltins = map[string]fastBuiltin{
	"len": {1, func(a [4]any) (any, error) {
		switch v := a[0].(type) {
		case string:
			return int64(len(v)), nil
		case []byte:
			return int64(len(v)), nil
		case []any:
			return int64(len(v)), nil
		case map[string]any:
			return int64(len(v)), nil
		case *fobj:
			return int64(len(v.keys)), nil
		}
		return nil, errArg
	}},
	"crypto/sha256.Sum256": {1, func(a [4]any) (any, error) {
		var h [32]byte
		switch v := a[0].(type) {
		case string:
			h = sha256.Sum256([]byte(v))
		case []byte:
			h = sha256.Sum256(v)
		default:
			return nil, errArg
		}
		return h[:], nil
	}},
	"encoding/hex.Encode": {1, func(a [4]any) (any, error) {
		switch v := a[0].(type) {
		case string:
			return hex.EncodeToString([]byte(v)), nil
		case []byte:
			return hex.EncodeToString(v), nil
		}
		return nil, errArg
	}},
	"strconv.ParseInt": {3, func(a [4]any) (any, error) {
		s, err := str(a[0])
		if err != nil {
			return nil, err
		}
		base, err := intArg(a[1])
		if err != nil {
			return nil, err
		}
		bits, err := intArg(a[2])
		if err != nil {
			return nil, err
		}
		return parseInt(s, base, bits)
	}},
	"strconv.Atoi": {1, func(a [4]any) (any, error) {
		s, err := str(a[0])
		if err != nil {
			return nil, err
		}
		return parseInt(s, 10, 0)
	}},
	"strconv.FormatInt": {2, func(a [4]any) (any, error) {
		n, ok := a[0].(int64)
		base, err := intArg(a[1])
		if !ok || err != nil || base < 2 || base > 62 {
			return nil, errArg
		}
		return big.NewInt(n).Text(base), nil
	}},
	"strconv.Quote":      str1(strconv.Quote),
	"strings.ToLower":    str1(strings.ToLower),
	"strings.ToUpper":    str1(strings.ToUpper),
	"strings.TrimSpace":  str1(strings.TrimSpace),
	"strings.HasPrefix":  str2(func(s, t string) any { return strings.HasPrefix(s, t) }),
	"strings.HasSuffix":  str2(func(s, t string) any { return strings.HasSuffix(s, t) }),
	"strings.TrimPrefix": str2(func(s, t string) any { return strings.TrimPrefix(s, t) }),
	"strings.TrimSuffix": str2(func(s, t string) any { return strings.TrimSuffix(s, t) }),
	"strings.Contains":   str2(func(s, t string) any { return strings.Contains(s, t) }),
	"strings.Split": str2(func(s, t string) any {
		parts := strings.Split(s, t)
		out := make([]any, len(parts))
		for i, p := range parts {
			out[i] = p
		}
		return out
	}),
	"strings.Join": {2, func(a [4]any) (any, error) {
		l, ok := a[0].([]any)
		sep, err := str(a[1])
		if !ok || err != nil {
			return nil, errArg
		}
		parts := make([]string, len(l))
		for i, x := range l {
			if parts[i], err = str(x); err != nil {
				return nil, err
			}
		}
		return strings.Join(parts, sep), nil
	}},
	"strings.Replace": {4, func(a [4]any) (any, error) {
		s, e1 := str(a[0])
		o, e2 := str(a[1])
		n, e3 := str(a[2])
		k, e4 := intArg(a[3])
		if e1 != nil || e2 != nil || e3 != nil || e4 != nil {
			return nil, errArg
		}
		return strings.Replace(s, o, n, k), nil
	}},
	"strings.SliceRunes": {3, func(a [4]any) (any, error) {
		s, e1 := str(a[0])
		start, e2 := intArg(a[1])
		end, e3 := intArg(a[2])
		if e1 != nil || e2 != nil || e3 != nil {
			return nil, errArg
		}
		if start >= 0 && start <= end && end <= len(s) {
			// ASCII up to end: byte offsets are rune offsets.
			ascii := true
			for i := 0; i < end; i++ {
				if s[i] >= utf8.RuneSelf {
					ascii = false
					break
				}
			}
			if ascii {
				return s[start:end], nil
			}
		}
		runes := []rune(s)
		if start < 0 || start > end || end > len(runes) {
			return nil, errArg
		}
		return string(runes[start:end]), nil
	}},
}

// parseInt is CUE's strconv.ParseInt (big.Int's SetString, then the
// bit size check) for results that fit an int64.
func parseInt(s string, base, bits int) (any, error) {
	if bits < 0 || base != 0 && (base < 2 || base > 62) {
		return nil, errArg // CUE's error (big.Int's SetString panics)
	}
	if bits == 0 || bits > 64 {
		bits = 64
	}
	// Plain digits of the base (no sign, prefix or underscore): the
	// same number big.Int would read, without its allocation.
	if base >= 2 && base <= 36 && len(s) > 0 && len(s) <= 12 {
		var n int64
		ok := true
		for i := 0; i < len(s); i++ {
			d := digitVal(s[i])
			if d >= base {
				ok = false
				break
			}
			n = n*int64(base) + int64(d)
		}
		if ok {
			if bits < 64 && n >= 1<<(bits-1) {
				return nil, errArg
			}
			return n, nil
		}
	}
	i, ok := new(big.Int).SetString(s, base)
	if !ok || !i.IsInt64() {
		return nil, errArg
	}
	n := i.Int64()
	if bits < 64 && (n >= 1<<(bits-1) || n < -(1<<(bits-1))) {
		return nil, errArg
	}
	return n, nil
}

func digitVal(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'z':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'Z':
		return int(c-'A') + 10
	}
	return 99
}

// run composes spec (decoded by decodeJSON) on the fast path; ok is
// false when CUE must compose it instead (see errFallback).
func (c *fastComposer) run(spec any) (children []converge.Child, edges []converge.Edge, err error) {
	children, edges, _, _, err = c.runSel(spec, nil)
	return children, edges, err
}

// runSel is run; with sel (the parts shape only), it composes only the
// elements of the parts list sel selects, and returns each child's and
// each edge's element index in childPart and edgePart.
func (c *fastComposer) runSel(spec any, sel []bool) (children []converge.Child, edges []converge.Edge, childPart, edgePart []int, err error) {
	e := &fenv{c: c, spec: spec, slots: make([]any, c.slots), top: make([]any, len(c.top)), state: make([]uint8, len(c.top)), sel: sel, part: -1}
	// A whole composition (every element selected, as composeAll does)
	// starts from the last one's size.
	whole := !slices.Contains(sel, false)
	if whole {
		children = make([]converge.Child, 0, c.lastChildren.Load())
		edges = make([]converge.Edge, 0, c.lastEdges.Load())
	}
	defer func() {
		if r := recover(); r != nil {
			// A bug of the fast path must not take the control plane
			// down: CUE composes instead.
			children, edges, err = nil, nil, fallback("panic: %v", r)
		}
		if err == nil && whole {
			c.lastChildren.Store(int64(len(children)))
			c.lastEdges.Store(int64(len(edges)))
		}
	}()
	tagChild := func() {
		if sel != nil {
			childPart = append(childPart, e.part)
		}
	}
	tagEdge := func() {
		if sel != nil {
			edgePart = append(edgePart, e.part)
		}
	}
	addChild := func(it any) error {
		ch, err := e.child(it)
		children = append(children, ch)
		tagChild()
		return err
	}
	addEdge := func(it any) error {
		ed, err := e.edge(it)
		edges = append(edges, ed)
		tagEdge()
		return err
	}
	// Every top-level field, in order; a reference to one not yet
	// evaluated evaluates it first. Children and edges, when nothing
	// refers to them, are streamed: each item is converted as it is
	// made, and no list of them is held.
	for i, f := range c.top {
		var err error
		switch {
		case f.stream != nil && i == c.children:
			err = f.stream(e, &sink{value: flatten(addChild), child: func(ch converge.Child) { children = append(children, ch); tagChild() }})
		case f.stream != nil && i == c.edges:
			err = f.stream(e, &sink{value: flatten(addEdge), edge: func(ed converge.Edge) { edges = append(edges, ed); tagEdge() }})
		default:
			_, err = c.eval(e, i)
		}
		if err != nil {
			return nil, nil, nil, nil, err
		}
	}
	for i, f := range c.top {
		if f.regular && i != c.children && i != c.edges {
			// Dropped, but it must be data (CUE marshals it).
			if _, err := e.appendJSON(nil, e.top[i]); err != nil {
				return nil, nil, nil, nil, err
			}
		}
	}
	if c.children >= 0 && c.top[c.children].stream == nil {
		if err := items(e.top[c.children], addChild); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	if c.edges >= 0 && c.top[c.edges].stream == nil {
		if err := items(e.top[c.edges], addEdge); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	return children, edges, childPart, edgePart, nil
}

// flatten is the emit function of a streamed children or edges list:
// an element that is a list is flattened (one level), each item handed
// to add.
func flatten(add func(any) error) func(v any, inner bool) error {
	return func(v any, inner bool) error {
		l, isList := v.([]any)
		switch {
		case isList && inner:
			return fallback("children or edges nested two levels")
		case isList:
			for _, x := range l {
				if _, ok := x.([]any); ok {
					return fallback("children or edges nested two levels")
				}
				if err := add(x); err != nil {
					return err
				}
			}
			return nil
		}
		return add(v)
	}
}

// eval evaluates top-level field i once.
func (c *fastComposer) eval(e *fenv, i int) (any, error) {
	switch e.state[i] {
	case 2:
		return e.top[i], nil
	case 1:
		return nil, fallback("cycle through %s", c.top[i].name)
	}
	e.state[i] = 1
	v, err := c.top[i].eval(e)
	if err != nil {
		return nil, err
	}
	e.top[i], e.state[i] = v, 2
	return v, nil
}

// items flattens a children or edges list one level.
func items(v any, each func(any) error) error {
	l, ok := v.([]any)
	if !ok {
		return fallback("children or edges of %T", v)
	}
	for _, it := range l {
		if inner, ok := it.([]any); ok {
			for _, x := range inner {
				if err := each(x); err != nil {
					return err
				}
			}
			continue
		}
		if err := each(it); err != nil {
			return err
		}
	}
	return nil
}

// fieldsOf calls f with each regular field of a struct value.
func (e *fenv) fieldsOf(v any, f func(k string, v any) error) error {
	switch v := v.(type) {
	case *fobj:
		for i, k := range v.keys {
			if err := f(k, v.vals[i]); err != nil {
				return err
			}
		}
		return nil
	case map[string]any:
		for k, x := range v {
			if err := f(k, x); err != nil {
				return err
			}
		}
		return nil
	case *finst:
		for i, df := range v.def.fields {
			if df.hidden {
				continue
			}
			x, err := v.field(e, i)
			if err != nil {
				return err
			}
			if err := f(df.name, x); err != nil {
				return err
			}
		}
		return nil
	}
	return fallback("%T is not a struct", v)
}
