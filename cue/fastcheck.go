package cue

import (
	"bytes"
	"regexp"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/literal"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"

	"github.com/convergehq/converge/proto/rawjson"
)

// A fast check accepts data that a schema surely accepts, without CUE.
//
// Validating a worker's status or a composed child's spec through CUE
// costs ~50 µs and ~20 KB of garbage; a million-resource converge does it
// two million times. Most kind schemas are plain: closed structs of typed
// fields. compileFast turns a schema written in that plain subset into a
// small checker that walks the JSON bytes once. It only ever accepts:
// data it does not accept (invalid, or merely outside what it can
// decide) goes to CUE, which gives the verdict and the message. So a fast
// check may be incomplete but never more permissive than CUE.
//
// The subset, read from the schema's syntax (nothing else compiles):
//
//	field: T         required field      field?: T     optional field
//	T = string | int | number | bool | _
//	  | =~"re"                           (a string matching re)
//	  | T & T                            (of one kind)
//	  | { fields }                       (closed, as in a definition)
//	  | { fields, ... }                  (open)
//	  | { [string]: T }                  (any field, each a T)
//	  | [...T]                           (a list of T)
//
// Field attributes (@converge(secret)) and comments are allowed. A label
// declared twice, a pattern beside declared fields, defaults, literals,
// references, imports, comprehensions and builtins make the schema
// unsupported (no fast check).
type fastNode struct {
	kind    fastKind
	regexps []*regexp.Regexp // for fastString
	// a struct:
	fields   map[string]*fastField
	required uint64    // the seen-mask bits of the required fields
	open     bool      // "...": other fields allowed, any value
	pattern  *fastNode // "[string]: T"
	elem     *fastNode // a list's element
}

type fastField struct {
	node     *fastNode
	optional bool
	index    int // the field's bit in the seen mask
}

type fastKind uint8

const (
	fastAny fastKind = iota
	fastString
	fastInt
	fastNumber
	fastBool
	fastStruct
	fastList
)

// compileFast compiles the schema source src (a body of fields, or one
// struct literal) into a fast check, or returns nil when the schema is
// outside the subset. open is wrapSchema's: an empty src allows anything.
func compileFast(src string, open bool) *fastNode {
	if len(bytes.TrimSpace([]byte(src))) == 0 {
		if open {
			return &fastNode{kind: fastStruct, open: true}
		}
		return &fastNode{kind: fastStruct}
	}
	f, err := parser.ParseFile("schema", src)
	if err != nil {
		return nil
	}
	decls := f.Decls
	if len(decls) == 1 {
		if e, ok := decls[0].(*ast.EmbedDecl); ok {
			s, ok := e.Expr.(*ast.StructLit)
			if !ok {
				return nil
			}
			decls = s.Elts
		}
	}
	return fastStructOf(decls)
}

func fastStructOf(decls []ast.Decl) *fastNode {
	n := &fastNode{kind: fastStruct, fields: map[string]*fastField{}}
	for _, d := range decls {
		switch d := d.(type) {
		case *ast.Ellipsis:
			if d.Type != nil {
				return nil
			}
			n.open = true
		case *ast.Field:
			if d.Constraint != token.ILLEGAL && d.Constraint != token.OPTION {
				return nil // "!" required markers and the like
			}
			if l, ok := d.Label.(*ast.ListLit); ok {
				// [string]: T
				if n.pattern != nil || len(l.Elts) != 1 {
					return nil
				}
				if id, ok := l.Elts[0].(*ast.Ident); !ok || id.Name != "string" {
					return nil
				}
				if n.pattern = fastExpr(d.Value); n.pattern == nil {
					return nil
				}
				continue
			}
			name, ok := fastLabel(d.Label)
			if !ok {
				return nil
			}
			if _, dup := n.fields[name]; dup {
				return nil
			}
			v := fastExpr(d.Value)
			if v == nil {
				return nil
			}
			ff := &fastField{node: v, optional: d.Constraint == token.OPTION, index: len(n.fields)}
			if ff.index >= 64 {
				return nil // beyond the seen mask
			}
			if !ff.optional {
				n.required |= 1 << ff.index
			}
			n.fields[name] = ff
		case *ast.CommentGroup, *ast.Attribute:
		default:
			return nil
		}
	}
	if n.pattern != nil && len(n.fields) > 0 {
		return nil
	}
	return n
}

// fastLabel returns a field label's name: an identifier that is not a
// definition, hidden field or reference, or a plain string literal.
func fastLabel(l ast.Label) (string, bool) {
	switch l := l.(type) {
	case *ast.Ident:
		if l.Name == "" || l.Name[0] == '#' || l.Name[0] == '_' {
			return "", false
		}
		return l.Name, true
	case *ast.BasicLit:
		if l.Kind != token.STRING {
			return "", false
		}
		s, err := literal.Unquote(l.Value)
		if err != nil {
			return "", false
		}
		return s, true
	}
	return "", false
}

// fastExpr compiles a field's value, or returns nil.
func fastExpr(x ast.Expr) *fastNode {
	switch x := x.(type) {
	case *ast.Ident:
		switch x.Name {
		case "string":
			return &fastNode{kind: fastString}
		case "int":
			return &fastNode{kind: fastInt}
		case "number":
			return &fastNode{kind: fastNumber}
		case "bool":
			return &fastNode{kind: fastBool}
		case "_":
			return &fastNode{kind: fastAny}
		}
	case *ast.UnaryExpr:
		lit, ok := x.X.(*ast.BasicLit)
		if x.Op != token.MAT || !ok || lit.Kind != token.STRING {
			return nil
		}
		s, err := literal.Unquote(lit.Value)
		if err != nil {
			return nil
		}
		re, err := regexp.Compile(s)
		if err != nil {
			return nil
		}
		return &fastNode{kind: fastString, regexps: []*regexp.Regexp{re}}
	case *ast.BinaryExpr:
		if x.Op != token.AND {
			return nil
		}
		a, b := fastExpr(x.X), fastExpr(x.Y)
		if a == nil || b == nil {
			return nil
		}
		switch {
		case a.kind == fastString && b.kind == fastString:
			return &fastNode{kind: fastString, regexps: append(append([]*regexp.Regexp(nil), a.regexps...), b.regexps...)}
		case a.kind == b.kind && (a.kind == fastInt || a.kind == fastBool || a.kind == fastNumber):
			return a
		}
		return nil
	case *ast.StructLit:
		return fastStructOf(x.Elts)
	case *ast.ListLit:
		// [...T]
		if len(x.Elts) != 1 {
			return nil
		}
		e, ok := x.Elts[0].(*ast.Ellipsis)
		if !ok || e.Type == nil {
			return nil
		}
		el := fastExpr(e.Type)
		if el == nil {
			return nil
		}
		return &fastNode{kind: fastList, elem: el}
	case *ast.ParenExpr:
		return fastExpr(x.X)
	}
	return nil
}

// accepts reports whether data, one JSON value, surely satisfies n: true
// only when CUE would accept it too.
func (n *fastNode) accepts(data []byte) bool {
	p := fastParser{b: data}
	p.space()
	if !p.value(n) {
		return false
	}
	p.space()
	return p.i == len(p.b)
}

// fastParser walks JSON bytes, checking them against fast nodes. Any
// doubt (an escape in a key or a matched string, a duplicate key) is a
// "no": CUE decides.
type fastParser struct {
	b []byte
	i int
	// depth is how many lists and objects enclose the value being read;
	// past maxFastDepth the answer is "no" (CUE decides, and refuses):
	// the walk recurses, and a 20 MB nested status used to overflow the
	// control plane's stack.
	depth int
	// allow is the required fields of the outermost struct that may be
	// absent (acceptsPending); the first object read takes it.
	allow uint64
}

func (p *fastParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fastParser) value(n *fastNode) bool {
	if p.i >= len(p.b) {
		return false
	}
	c := p.b[p.i]
	switch n.kind {
	case fastAny:
		return p.skip()
	case fastString:
		if c != '"' {
			return false
		}
		s, plain, ok := p.str()
		if !ok {
			return false
		}
		if len(n.regexps) == 0 {
			return true
		}
		if !plain {
			return false
		}
		for _, re := range n.regexps {
			if !re.Match(s) {
				return false
			}
		}
		return true
	case fastInt, fastNumber:
		isInt, ok := p.number()
		return ok && (isInt || n.kind == fastNumber)
	case fastBool:
		return p.word("true") || p.word("false")
	case fastList:
		if c != '[' || !p.enter() {
			return false
		}
		defer p.leave()
		p.i++
		p.space()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return true
		}
		for {
			p.space()
			if !p.value(n.elem) {
				return false
			}
			p.space()
			if p.i >= len(p.b) {
				return false
			}
			switch p.b[p.i] {
			case ',':
				p.i++
			case ']':
				p.i++
				return true
			default:
				return false
			}
		}
	case fastStruct:
		return c == '{' && p.object(n)
	}
	return false
}

// maxFastDepth bounds the nesting the fast check reads: converge's one
// limit (rawjson.MaxDepth, encoding/json's, which CUE's path decodes
// with), so the fast check accepts no nesting CUE's path refuses.
const maxFastDepth = rawjson.MaxDepth

// enter counts one more enclosing list or object, or says no past
// maxFastDepth; leave undoes it.
func (p *fastParser) enter() bool {
	p.depth++
	return p.depth <= maxFastDepth
}

func (p *fastParser) leave() { p.depth-- }

func (p *fastParser) object(n *fastNode) bool {
	if !p.enter() {
		return false
	}
	defer p.leave()
	p.i++ // {
	allow := p.allow
	p.allow = 0
	var seen uint64
	var keys map[string]bool // the other fields of a struct with a pattern or "..."
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return n.required&^allow == 0
	}
	for {
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return false
		}
		k, plain, ok := p.str()
		if !ok || !plain {
			return false
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return false
		}
		p.i++
		p.space()
		if f := n.fields[string(k)]; f != nil {
			if seen&(1<<f.index) != 0 {
				return false // duplicate key
			}
			seen |= 1 << f.index
			if !p.value(f.node) {
				return false
			}
		} else {
			if n.pattern == nil && !n.open {
				return false // field not allowed
			}
			if keys == nil {
				keys = map[string]bool{}
			}
			if keys[string(k)] {
				return false
			}
			keys[string(k)] = true
			el := n.pattern
			if el == nil {
				el = fastAnyValue
			}
			if !p.value(el) {
				return false
			}
		}
		p.space()
		if p.i >= len(p.b) {
			return false
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return (seen|allow)&n.required == n.required
		default:
			return false
		}
	}
}

// str reads a JSON string at p.i (rawjson.String); plain is false when
// its bytes are not its value (an escape, invalid UTF-8). Control
// characters are refused.
func (p *fastParser) str() (s []byte, plain, ok bool) {
	end, plain, err := rawjson.String(p.b, p.i)
	if err != nil {
		return nil, false, false
	}
	s = p.b[p.i+1 : end-1]
	p.i = end
	return s, plain, true
}

// number reads a JSON number (rawjson.Number); isInt is true when it has
// neither fraction nor exponent (CUE then sees an int).
func (p *fastParser) number() (isInt, ok bool) {
	end, isInt, err := rawjson.Number(p.b, p.i)
	if err != nil {
		return false, false
	}
	p.i = end
	return isInt, true
}

func (p *fastParser) word(w string) bool {
	if bytes.HasPrefix(p.b[p.i:], []byte(w)) {
		p.i += len(w)
		return true
	}
	return false
}

// The nodes any JSON value is checked against (never changed).
var (
	fastAnyValue  = &fastNode{kind: fastAny}
	fastAnyObject = &fastNode{kind: fastStruct, open: true}
	fastAnyList   = &fastNode{kind: fastList, elem: fastAnyValue}
)

// skip reads any JSON value.
func (p *fastParser) skip() bool {
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, _, ok := p.str()
		return ok
	case c == '{':
		return p.object(fastAnyObject)
	case c == '[':
		return p.value(fastAnyList)
	case c == 't':
		return p.word("true")
	case c == 'f':
		return p.word("false")
	case c == 'n':
		return p.word("null")
	default:
		_, ok := p.number()
		return ok
	}
}
