package cue

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/literal"
	"cuelang.org/go/cue/token"

	"github.com/convergehq/converge"
)

// The fast path's output: children and edges streamed from list
// literals into a sink, converted into converge.Child and converge.Edge
// as they are made, their specs written straight as JSON bytes
// (appendJSON, in CUE's field order).

// listStream compiles a list literal to stream its elements (see
// streamFn): a comprehension whose value is a list literal ({[...]}), or
// an element that is one, is streamed too, its items marked inner. An
// item written as a struct literal of static labels is converted as it
// is evaluated, with no struct value built (for children when edges is
// false, else for edges).
func (cc *composeCompiler) listStream(x *ast.ListLit, sc *fscope, inner, edges bool) streamFn {
	type elem struct {
		val    evalFn
		stream streamFn
		direct func(e *fenv, s *sink) error
		cls    []clause
	}
	item := func(x ast.Expr, sc *fscope) elem {
		if st, ok := unparen(x).(*ast.StructLit); ok && staticLabels(st) != nil {
			if edges {
				if f := cc.directEdge(st, sc); f != nil {
					return elem{direct: f}
				}
			} else if f := cc.directChild(st, sc); f != nil {
				return elem{direct: f}
			}
		}
		if l, ok := unparen(x).(*ast.ListLit); ok && !inner {
			return elem{stream: cc.listStream(l, sc, true, edges)}
		}
		return elem{val: cc.expr(x, sc)}
	}
	var elems []elem
	for _, el := range x.Elts {
		switch el := el.(type) {
		case *ast.Comprehension:
			cls, body, st := cc.comprehension(el, sc)
			var it elem
			if l := embeddedList(st); l != nil {
				it = item(l, body)
			} else if staticLabels(st) != nil {
				it = item(st, body)
			} else {
				it = elem{val: cc.structLit(st, body)}
			}
			it.cls = cls
			elems = append(elems, it)
		case *ast.Ellipsis:
			panic(unsupported("an open list"))
		default:
			elems = append(elems, item(el, sc))
		}
	}
	return func(e *fenv, s *sink) error {
		for _, el := range elems {
			one := func() error {
				switch {
				case el.stream != nil:
					return el.stream(e, s)
				case el.direct != nil:
					return el.direct(e, s)
				}
				v, err := el.val(e)
				if err != nil {
					return err
				}
				return s.value(v, inner)
			}
			if el.cls == nil {
				if err := one(); err != nil {
					return err
				}
				continue
			}
			if err := runClauses(e, el.cls, 0, one); err != nil {
				return err
			}
		}
		return nil
	}
}

// staticLabels returns the labels of a struct literal made of fields
// with static, regular, distinct labels only (no let, comprehension,
// embedding, alias, optional field), or nil.
func staticLabels(st *ast.StructLit) []string {
	labels := []string{}
	seen := map[string]bool{}
	for _, d := range st.Elts {
		switch d := d.(type) {
		case *ast.CommentGroup:
		case *ast.Field:
			if d.Alias != nil || d.Constraint != token.ILLEGAL {
				return nil
			}
			var name string
			switch l := d.Label.(type) {
			case *ast.Ident:
				if isHidden(l.Name) || isDef(l.Name) {
					return nil
				}
				name = l.Name
			case *ast.BasicLit:
				if l.Kind != token.STRING {
					return nil
				}
				n, err := literal.Unquote(l.Value)
				if err != nil {
					return nil
				}
				name = n
			default:
				return nil
			}
			if seen[name] {
				return nil
			}
			seen[name] = true
			labels = append(labels, name)
		default:
			return nil
		}
	}
	return labels
}

// fieldScope is the scope of a static struct literal's field values:
// its own labels are opaque (as in structLit).
func fieldScope(st *ast.StructLit, sc *fscope) *fscope {
	inner := &fscope{parent: sc, names: map[string]binding{}}
	for _, l := range staticLabels(st) {
		inner.names[l] = binding{kind: bindOpaque}
	}
	return inner
}

// directChild compiles a child written as a struct literal of static
// labels into its conversion (as child does it), or returns nil for a
// label a child does not have.
func (cc *composeCompiler) directChild(st *ast.StructLit, sc *fscope) func(e *fenv, s *sink) error {
	for _, l := range staticLabels(st) {
		switch l {
		case "kind", "kind_version", "name", "spec", "provider_config_ref":
		default:
			return nil
		}
	}
	inner := fieldScope(st, sc)
	var sets []func(e *fenv, c *converge.Child) error
	for _, d := range st.Elts {
		f, ok := d.(*ast.Field)
		if !ok {
			continue
		}
		name, _ := labelOf(f.Label)
		switch name {
		case "kind", "name", "provider_config_ref":
			str := cc.strOf(f.Value, inner)
			set := func(c *converge.Child, s string) { c.Kind = s }
			if name == "name" {
				set = func(c *converge.Child, s string) { c.Name = s }
			} else if name == "provider_config_ref" {
				set = func(c *converge.Child, s string) { c.ProviderConfigRef = s }
			}
			sets = append(sets, func(e *fenv, c *converge.Child) error {
				s, err := str(e)
				set(c, s)
				return err
			})
		case "kind_version":
			val := cc.expr(f.Value, inner)
			sets = append(sets, func(e *fenv, c *converge.Child) error {
				v, err := val(e)
				if err != nil {
					return err
				}
				n, ok := v.(int64)
				if !ok || int64(int(n)) != n {
					return fallback("kind_version of %T", v)
				}
				c.KindVersion = int(n)
				return nil
			})
		case "spec":
			js := cc.jsonOf(f.Value, inner)
			sets = append(sets, func(e *fenv, c *converge.Child) error {
				if cap(e.buf)-len(e.buf) < 512 {
					e.buf = make([]byte, 0, 32<<10) // see child
				}
				start := len(e.buf)
				b, err := js(e, e.buf)
				if err != nil {
					return err
				}
				e.buf = b
				c.Spec = b[start:len(b):len(b)]
				return nil
			})
		}
	}
	return func(e *fenv, s *sink) error {
		var c converge.Child
		for _, set := range sets {
			if err := set(e, &c); err != nil {
				return err
			}
		}
		if c.KindVersion == 0 {
			c.KindVersion = 1 // composeShape's default
		}
		s.child(c)
		return nil
	}
}

// directEdge is directChild for an edge.
func (cc *composeCompiler) directEdge(st *ast.StructLit, sc *fscope) func(e *fenv, s *sink) error {
	for _, l := range staticLabels(st) {
		switch l {
		case "consumer", "producer", "flows":
		default:
			return nil
		}
	}
	inner := fieldScope(st, sc)
	var sets []func(e *fenv, ed *converge.Edge) error
	for _, d := range st.Elts {
		f, ok := d.(*ast.Field)
		if !ok {
			continue
		}
		switch name, _ := labelOf(f.Label); name {
		case "consumer", "producer":
			str := cc.strOf(f.Value, inner)
			consumer := name == "consumer"
			sets = append(sets, func(e *fenv, ed *converge.Edge) error {
				s, err := str(e)
				if consumer {
					ed.Consumer = converge.ID(s)
				} else {
					ed.Producer = converge.ID(s)
				}
				return err
			})
		case "flows":
			val := cc.expr(f.Value, inner)
			sets = append(sets, func(e *fenv, ed *converge.Edge) error {
				v, err := val(e)
				if err != nil {
					return err
				}
				ed.Flows, err = e.flowsOf(v)
				return err
			})
		}
	}
	return func(e *fenv, s *sink) error {
		var ed converge.Edge
		for _, set := range sets {
			if err := set(e, &ed); err != nil {
				return err
			}
		}
		s.edge(ed)
		return nil
	}
}

// strOf compiles x where a string is wanted (anything else falls back).
func (cc *composeCompiler) strOf(x ast.Expr, sc *fscope) strFn {
	if str := cc.stringOf(x, sc); str != nil {
		return str
	}
	val := cc.expr(x, sc)
	return func(e *fenv) (string, error) {
		v, err := val(e)
		if err != nil {
			return "", err
		}
		s, ok := v.(string)
		if !ok {
			return "", fallback("%T where a string is wanted", v)
		}
		return s, nil
	}
}

// jsonFn appends the JSON of an expression's value to b.
type jsonFn func(e *fenv, b []byte) ([]byte, error)

// jsonOf compiles x to append its value's JSON (as appendJSON does): a
// constant once, a struct literal of static labels field by field with
// no struct value built, an interpolation with no value boxed.
func (cc *composeCompiler) jsonOf(x ast.Expr, sc *fscope) jsonFn {
	if isConst(x) {
		val := cc.expr(x, sc)
		v, _ := val(&fenv{})
		if b, err := (&fenv{}).appendJSON(nil, v); err == nil {
			return func(_ *fenv, out []byte) ([]byte, error) { return append(out, b...), nil }
		}
	}
	if str := cc.stringOf(x, sc); str != nil {
		return func(e *fenv, b []byte) ([]byte, error) {
			s, err := str(e)
			if err != nil {
				return nil, err
			}
			return appendString(b, s)
		}
	}
	if st, ok := unparen(x).(*ast.StructLit); ok && staticLabels(st) != nil {
		inner := fieldScope(st, sc)
		type field struct {
			key []byte // "key":
			val jsonFn
		}
		var fields []field
		for _, d := range st.Elts {
			f, ok := d.(*ast.Field)
			if !ok {
				continue
			}
			name, _ := labelOf(f.Label)
			k, err := appendString(nil, name)
			if err != nil {
				panic(unsupported("label %q", name))
			}
			fields = append(fields, field{key: append(k, ':'), val: cc.jsonOf(f.Value, inner)})
		}
		return func(e *fenv, b []byte) ([]byte, error) {
			b = append(b, '{')
			for i, f := range fields {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, f.key...)
				var err error
				if b, err = f.val(e, b); err != nil {
					return nil, err
				}
			}
			return append(b, '}'), nil
		}
	}
	val := cc.expr(x, sc)
	return func(e *fenv, b []byte) ([]byte, error) {
		v, err := val(e)
		if err != nil {
			return nil, err
		}
		return e.appendJSON(b, v)
	}
}

// embeddedList returns the list literal a struct literal is ({[...]}),
// or nil.
func embeddedList(st *ast.StructLit) *ast.ListLit {
	var list *ast.ListLit
	for _, d := range st.Elts {
		switch d := d.(type) {
		case *ast.CommentGroup:
		case *ast.EmbedDecl:
			l, ok := unparen(d.Expr).(*ast.ListLit)
			if !ok || list != nil {
				return nil
			}
			list = l
		default:
			return nil
		}
	}
	return list
}

// child converts one item of children.
func (e *fenv) child(it any) (converge.Child, error) {
	var c converge.Child
	err := e.fieldsOf(it, func(k string, x any) error {
		var ok bool
		switch k {
		case "kind":
			c.Kind, ok = x.(string)
		case "name":
			c.Name, ok = x.(string)
		case "provider_config_ref":
			c.ProviderConfigRef, ok = x.(string)
		case "kind_version":
			var n int64
			n, ok = x.(int64)
			c.KindVersion = int(n)
			ok = ok && int64(int(n)) == n
		case "spec":
			if cap(e.buf)-len(e.buf) < 512 {
				// Specs are sliced from chunks: a child's spec keeps
				// at most its chunk alive, and growing never copies
				// the specs before it.
				e.buf = make([]byte, 0, 32<<10)
			}
			start := len(e.buf)
			b, err := e.appendJSON(e.buf, x)
			if err != nil {
				return err
			}
			e.buf = b
			c.Spec = b[start:len(b):len(b)]
			ok = true
		}
		if !ok {
			return fallback("child field %s of %T", k, x)
		}
		return nil
	})
	if c.KindVersion == 0 {
		c.KindVersion = 1 // composeShape's default
	}
	return c, err
}

// edge converts one item of edges.
func (e *fenv) edge(it any) (converge.Edge, error) {
	var ed converge.Edge
	err := e.fieldsOf(it, func(k string, x any) error {
		var ok bool
		switch k {
		case "consumer":
			var s string
			s, ok = x.(string)
			ed.Consumer = converge.ID(s)
		case "producer":
			var s string
			s, ok = x.(string)
			ed.Producer = converge.ID(s)
		case "flows":
			f, err := e.flowsOf(x)
			if err != nil {
				return err
			}
			ed.Flows, ok = f, true
		}
		if !ok {
			return fallback("edge field %s of %T", k, x)
		}
		return nil
	})
	return ed, err
}

// flowsOf is an edge's flows: a struct of strings, as flowsOf of its
// map. The flows of a constant struct are computed once and shared (as
// the Go composer shares them).
func (e *fenv) flowsOf(x any) ([]converge.ValueFlow, error) {
	o, _ := x.(*fobj)
	if o != nil && o.constant {
		if f, ok := e.flows[o]; ok {
			return f, nil
		}
	}
	m := map[string]string{}
	err := e.fieldsOf(x, func(from string, to any) error {
		s, ok := to.(string)
		if !ok {
			return fallback("flow %s of %T", from, to)
		}
		m[from] = s
		return nil
	})
	if err != nil {
		return nil, err
	}
	f := flowsOf(m)
	if o != nil && o.constant {
		if e.flows == nil {
			e.flows = map[*fobj][]converge.ValueFlow{}
		}
		e.flows[o] = f
	}
	return f, nil
}

// appendJSON appends v's JSON to b as CUE would marshal it (field order
// aside): null, bools, ints, strings, lists, structs without hidden
// fields and definitions. Anything else falls back.
func (e *fenv) appendJSON(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		return strconv.AppendBool(b, v), nil
	case int64:
		return strconv.AppendInt(b, v, 10), nil
	case string:
		return appendString(b, v)
	case []any:
		b = append(b, '[')
		for i, x := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = e.appendJSON(b, x); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendString(b, k); err != nil {
				return nil, err
			}
			b = append(b, ':')
			if b, err = e.appendJSON(b, v[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case *fobj, *finst:
		if o, ok := v.(*fobj); ok && o.unordered {
			// CUE orders the fields of such a struct its own way (those
			// of an if before the others, those of a for after).
			return nil, fallback("a struct built by comprehensions or with dynamic labels in the output")
		}
		b = append(b, '{')
		first := true
		err := e.fieldsOf(v, func(k string, x any) error {
			if !first {
				b = append(b, ',')
			}
			first = false
			var err error
			if b, err = appendString(b, k); err != nil {
				return err
			}
			b = append(b, ':')
			b, err = e.appendJSON(b, x)
			return err
		})
		if err != nil {
			return nil, err
		}
		return append(b, '}'), nil
	}
	return nil, fallback("a value of %T in the output", v)
}

// appendString appends s as a JSON string as CUE marshals it: Go's
// encoding/json without HTML escaping.
func appendString(b []byte, s string) ([]byte, error) {
	ascii := true
	for i := 0; i < len(s); i++ {
		// Control characters, quotes, backslashes, invalid UTF-8 and
		// U+2028/U+2029 (0xE2 0x80 0xA8/0xA9) take encoding/json's way.
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c == 0xE2 {
			ascii = false
			break
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	if !ascii && (!utf8.ValidString(s) || strings.ContainsAny(s, "\x00\x01\x02\x03\x04\x05\x06\x07\x08\t\n\x0b\x0c\r\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\"\\\u2028\u2029")) {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			return nil, fallback("string: %v", err)
		}
		return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...), nil
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), nil
}
