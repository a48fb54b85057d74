package cue

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	cuelang "cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/literal"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"

	"github.com/convergehq/converge"
)

// A fast compose evaluates a kind's compose expression without CUE.
//
// CUE's evaluator costs ~65 µs of CPU and ~15 KB of garbage per composed
// child (docs/BENCHMARKS.md): the classic BOM at 99,116 children took
// 6.4 s where the Go composer takes 0.2 s. compileCompose compiles an
// expression written in a plain subset of CUE into a tree of Go closures
// over the decoded spec that yields the children and edges directly, with
// no CUE value built. Like the fast check (fastcheck.go) it is never
// trusted beyond what it surely knows:
//
//   - An expression outside the subset does not compile (compileCompose
//     returns why): the kind composes through CUE, as before.
//   - Anything unusual while composing (a missing field, a value of the
//     wrong type, an integer overflow, a builtin's error, a cycle; any
//     case where CUE would fail or where the subset is unsure of CUE's
//     answer) abandons the fast composition of that spec, and CUE
//     composes it: its result or its error (with its file:line:col) is
//     the answer. A fast composition is therefore either CUE's result or
//     none.
//   - The fast path is eager where CUE might fail: every top-level field,
//     let and hidden field is evaluated, every field of a definition
//     instance, both operands of && and ||; an error anywhere falls back.
//
// The subset, read from the expression's syntax (docs/ARCHITECTURE.md,
// "Composition in CUE", states it in full):
//
//	the expression       a struct literal: regular fields (children,
//	                     edges, others evaluated and dropped), hidden
//	                     fields (_x), lets, and definitions (#d)
//	a definition #d      a struct of parameters (field: string, int,
//	                     bool, number or _, a predeclared type nothing
//	                     declared shadows) and fields computed from them
//	an instance          #d, #d & {p: x, ...} or {p: x, ...} & #d: one
//	                     definition, one literal of parameters; selected
//	                     from ((#d & {...}).f) or, its literal in the
//	                     definition's order, a value. No chain of
//	                     unifications (CUE unifies every conjunct)
//	struct literals      static labels, "\(x)" or (x) labels, lets,
//	                     comprehensions yielding fields, or one
//	                     embedded value ({[...]} is the list)
//	list literals        values and comprehensions
//	comprehensions       for x in L, for k, v in L, if C, let x = E (_
//	                     is never bound, as in CUE)
//	literals             strings (and interpolations of strings, ints,
//	                     bools), decimal ints, true, false, null
//	operators            + - * on ints, + on strings, == != < <= > >=
//	                     on ints and strings, == != on bools and null,
//	                     && || ! on bools, =~ !~ (Go regexps, as CUE)
//	references           spec, comprehension variables, lets, top-level
//	                     fields, a definition's own fields; x.f, x[i],
//	                     x["f"]; x._h only of an instance
//	builtins             len, and the imports in fastBuiltins:
//	                     crypto/sha256.Sum256, encoding/hex.Encode,
//	                     strconv.ParseInt, Atoi, FormatInt, Quote,
//	                     strings.ToLower, ToUpper, Join, Replace, Split,
//	                     HasPrefix, HasSuffix, TrimPrefix, TrimSuffix,
//	                     TrimSpace, Contains, SliceRunes
//
// Not in the subset: floats, bytes other than a hash's, /, disjunctions
// and defaults, constraints (=~ in a field, optional or required
// fields), unification other than an instance's, sibling references
// inside nested structs, aliases, ellipses, attributes declarations, a
// label declared twice, a reference to _, and any other builtin or
// import. A struct built by comprehensions or with dynamic labels may be
// read, iterated not, and in a child's spec it falls back: CUE orders its
// fields its own way (an if's before the others, a for's after), and the
// scheduler compares a recomposed child's spec bytes. So does a product
// that is negative zero (CUE's numbers are decimals: -1 * 0 is -0).
//
// What keeps it fast: children and edges written as list literals that
// nothing refers to are streamed, each item converted as it is made (no
// list of a million values held); a child or an edge written as a struct
// literal of static labels is converted as its fields are evaluated, its
// spec marshalled straight into a chunk of bytes; constants are folded
// at compile time, a literal's keys shared, constant flows computed once
// per composition.
type fastComposer struct {
	top      []topField
	byName   map[string]int // regular field name -> index in top
	children int            // index of "children" in top, or -1
	edges    int            // index of "edges" in top, or -1
	slots    int            // comprehension variables and nested lets
	// parts, when the expression has the parts shape (composeparts.go):
	// a compose may be answered as a delta.
	parts *partsShape
	// sizes of the last composition: the next one's first capacity
	lastChildren, lastEdges atomic.Int64
}

// topField is a field, hidden field or let of the expression's struct.
type topField struct {
	name    string
	regular bool // a regular field: its value must be concrete data
	eval    evalFn
	// stream, for children and edges when they are list literals that
	// nothing refers to, emits each element as it is made.
	stream streamFn
}

// streamFn evaluates a list literal element by element into a sink.
type streamFn func(e *fenv, s *sink) error

// sink takes a streamed list's elements: value gets each element that
// is a value, inner telling whether it is an item of an inner list
// literal (streamed too) rather than an element of the list; child and
// edge get the items converted directly from struct literals (see
// directChild, directEdge).
type sink struct {
	value func(v any, inner bool) error
	child func(converge.Child)
	edge  func(converge.Edge)
}

// evalFn evaluates one compiled expression.
type evalFn func(e *fenv) (any, error)

// fenv is the state of one fast composition.
type fenv struct {
	c     *fastComposer
	spec  any
	slots []any
	top   []any
	state []uint8 // per top field: 0 not yet, 1 evaluating, 2 done
	cur   *finst  // the definition instance being evaluated
	buf   []byte  // the JSON of the children's specs, sliced
	flows map[*fobj][]converge.ValueFlow
	// sel, in a composition of some parts only (runParts), selects the
	// elements of the parts list that are composed; part is the index of
	// the one being composed.
	sel  []bool
	part int
}

// errFallback abandons a fast composition: CUE composes instead.
type errFallback string

func (e errFallback) Error() string { return "fast compose: " + string(e) }

func fallback(format string, args ...any) error { return errFallback(fmt.Sprintf(format, args...)) }

// fobj is a struct value built by the expression: fields in order, or
// in an order CUE may not share (unordered: built by comprehensions or
// dynamic labels), which then cannot be iterated.
type fobj struct {
	keys      []string // shared by every value of a literal with static labels
	vals      []any
	unordered bool
	constant  bool // folded at compile time: one value, shared
	inline    [4]any
}

func (o *fobj) get(k string) (any, bool) {
	for i, key := range o.keys {
		if key == k {
			return o.vals[i], true
		}
	}
	return nil, false
}

// fdef is a compiled definition: parameters and computed fields.
type fdef struct {
	name   string
	fields []defField
	index  map[string]int
}

type defField struct {
	name   string
	hidden bool
	param  string // a parameter's type (string, int, bool, number, _); "" when computed
	eval   evalFn
}

// finst is a definition unified with a struct of parameter values.
type finst struct {
	def   *fdef
	vals  []any
	state []uint8 // 0 unset, 1 evaluating, 2 done
	vbuf  [4]any
	stbuf [4]uint8
}

// field returns field i of x, evaluating it on first use.
func (x *finst) field(e *fenv, i int) (any, error) {
	switch x.state[i] {
	case 2:
		return x.vals[i], nil
	case 1:
		return nil, fallback("cycle through %s.%s", x.def.name, x.def.fields[i].name)
	}
	f := x.def.fields[i]
	if f.param != "" {
		return nil, fallback("%s.%s is not set", x.def.name, f.name)
	}
	x.state[i] = 1
	saved := e.cur
	e.cur = x
	v, err := f.eval(e)
	e.cur = saved
	if err != nil {
		return nil, err
	}
	x.vals[i], x.state[i] = v, 2
	return v, nil
}

// composeUnsupported is why an expression is outside the subset.
type composeUnsupported struct{ why string }

func (u *composeUnsupported) Error() string { return u.why }

func unsupported(format string, args ...any) *composeUnsupported {
	return &composeUnsupported{why: fmt.Sprintf(format, args...)}
}

// compileCompose compiles k's compose expression into a fast composer,
// or returns why it is outside the subset.
func compileCompose(k composeText) (c *fastComposer, err error) {
	defer func() {
		if r := recover(); r != nil {
			u, ok := r.(*composeUnsupported)
			if !ok {
				panic(r)
			}
			c, err = nil, u
		}
	}()
	src := composeFileOf(k.imports, k.expr, false)
	// What CUE rejects without a spec (an unknown reference, an unused
	// import, an error in a definition) is CUE's to report.
	if v := cuecontext.New().CompileString(src, cuelang.Filename("compose")); v.Err() != nil {
		return nil, unsupported("CUE reports an error: %v", v.Err())
	}
	f, err := parser.ParseFile("compose", src)
	if err != nil {
		return nil, unsupported("parse: %v", err)
	}
	cc := &composeCompiler{imports: map[string]string{}}
	for spec := range f.ImportSpecs() {
		path, err := literal.Unquote(spec.Path.Value)
		if err != nil {
			return nil, unsupported("import %s", spec.Path.Value)
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if spec.Name != nil {
			name = spec.Name.Name
		}
		if _, ok := fastPackages[path]; !ok {
			return nil, unsupported("import %q is not in the fast subset", path)
		}
		cc.imports[name] = path
	}
	var expr ast.Expr
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.Field); ok {
			if name, _, _ := ast.LabelName(fd.Label); name == "out" {
				expr = fd.Value
			}
		}
	}
	for {
		p, ok := expr.(*ast.ParenExpr)
		if !ok {
			break
		}
		expr = p.X
	}
	st, ok := expr.(*ast.StructLit)
	if !ok {
		return nil, unsupported("the expression is not a struct literal")
	}
	return cc.compileTop(st), nil
}

// composeText is what compileCompose needs of a kind.
type composeText struct {
	imports []string
	expr    string
}

// composeFileOf is composeFile of imports and an expression.
func composeFileOf(imports []string, expr string, shape bool) string {
	return composeFile(&converge.Kind{ComposeImports: imports, Compose: expr}, shape)
}

// composeCompiler compiles one expression.
type composeCompiler struct {
	imports map[string]string // local name -> import path
	slots   int
	top     *fscope
	defs    map[string]*fdef
	inDef   *fdef
	topRefs map[int]bool // top-level fields something refers to
	// partFor marks the for clauses over the parts list (composeparts.go).
	partFor map[*ast.ForClause]bool
}

// A binding is what an identifier refers to.
type bindKind uint8

const (
	bindNone    bindKind = iota
	bindSlot             // a comprehension variable or a nested let
	bindTop              // a top-level field, hidden field or let
	bindDef              // a definition
	bindDefield          // a field of the definition being evaluated
	bindOpaque           // something the subset does not resolve
)

type binding struct {
	kind bindKind
	idx  int
	why  string // of bindOpaque, when the subset says why
}

type fscope struct {
	parent *fscope
	names  map[string]binding
}

func (s *fscope) lookup(name string) (binding, bool) {
	for ; s != nil; s = s.parent {
		if b, ok := s.names[name]; ok {
			return b, true
		}
	}
	return binding{}, false
}

func labelOf(l ast.Label) (name string, ident bool) {
	switch x := l.(type) {
	case *ast.Ident:
		return x.Name, true
	case *ast.BasicLit:
		if x.Kind != token.STRING {
			panic(unsupported("label %s", x.Value))
		}
		s, err := literal.Unquote(x.Value)
		if err != nil {
			panic(unsupported("label %s", x.Value))
		}
		return s, false
	}
	return "", false
}

func isHidden(name string) bool { return strings.HasPrefix(name, "_") }
func isDef(name string) bool    { return strings.HasPrefix(name, "#") || strings.HasPrefix(name, "_#") }

func (cc *composeCompiler) compileTop(st *ast.StructLit) *fastComposer {
	c := &fastComposer{byName: map[string]int{}, children: -1, edges: -1}
	cc.top = &fscope{names: map[string]binding{}}
	cc.defs = map[string]*fdef{}
	type pending struct {
		name string
		expr ast.Expr
		reg  bool
	}
	var todo []pending
	var defs []*ast.Field
	for _, d := range st.Elts {
		switch x := d.(type) {
		case *ast.Field:
			if x.Alias != nil || x.Constraint != token.ILLEGAL {
				panic(unsupported("an aliased, optional or required field"))
			}
			name, ident := labelOf(x.Label)
			if name == "" {
				panic(unsupported("a dynamic top-level label"))
			}
			if _, dup := cc.top.names[name]; dup {
				panic(unsupported("field %s declared twice", name))
			}
			if !ident {
				cc.top.names[name] = binding{kind: bindOpaque}
			}
			switch {
			case ident && isDef(name):
				cc.top.names[name] = binding{kind: bindDef}
				defs = append(defs, x)
				continue
			case ident && isHidden(name):
				cc.top.names[name] = binding{kind: bindTop, idx: len(todo)}
				todo = append(todo, pending{name: name, expr: x.Value})
			default:
				if strings.EqualFold(name, "children") && name != "children" || strings.EqualFold(name, "edges") && name != "edges" {
					panic(unsupported("field %s", name))
				}
				if ident {
					cc.top.names[name] = binding{kind: bindTop, idx: len(todo)}
				}
				c.byName[name] = len(todo)
				todo = append(todo, pending{name: name, expr: x.Value, reg: true})
			}
		case *ast.LetClause:
			if _, dup := cc.top.names[x.Ident.Name]; dup {
				panic(unsupported("%s declared twice", x.Ident.Name))
			}
			cc.top.names[x.Ident.Name] = binding{kind: bindTop, idx: len(todo)}
			todo = append(todo, pending{name: x.Ident.Name, expr: x.Expr})
		case *ast.CommentGroup:
		default:
			panic(unsupported("%T at the top of the expression", d))
		}
	}
	for _, d := range defs {
		name, _ := labelOf(d.Label)
		cc.defs[name] = cc.compileDef(name, d.Value)
	}
	cc.topRefs = map[int]bool{}
	shape := partsShapeOf(st)
	if shape != nil {
		cc.partFor = shape.fors
	}
	for _, p := range todo {
		c.top = append(c.top, topField{name: p.name, regular: p.reg, eval: cc.expr(p.expr, cc.top)})
	}
	if i, ok := c.byName["children"]; ok {
		c.children = i
	}
	if i, ok := c.byName["edges"]; ok {
		c.edges = i
	}
	for _, i := range []int{c.children, c.edges} {
		if i < 0 || cc.topRefs[i] {
			continue
		}
		if l, ok := unparen(todo[i].expr).(*ast.ListLit); ok {
			c.top[i].stream = cc.listStream(l, cc.top, false, i == c.edges)
		}
	}
	c.slots = cc.slots
	if shape != nil && c.children >= 0 && c.top[c.children].stream != nil && (c.edges < 0 || c.top[c.edges].stream != nil) {
		c.parts = shape
	}
	return c
}

// compileDef compiles a definition: a struct of parameters and computed
// fields (which may use the parameters, other definitions, literals and
// builtins, never spec or the expression's fields).
func (cc *composeCompiler) compileDef(name string, x ast.Expr) *fdef {
	st, ok := x.(*ast.StructLit)
	if !ok {
		panic(unsupported("definition %s is not a struct literal", name))
	}
	d := &fdef{name: name, index: map[string]int{}}
	sc := &fscope{parent: nil, names: map[string]binding{}}
	var exprs []ast.Expr
	for _, e := range st.Elts {
		f, ok := e.(*ast.Field)
		if !ok {
			if _, ok := e.(*ast.CommentGroup); ok {
				continue
			}
			panic(unsupported("%T in definition %s", e, name))
		}
		if f.Alias != nil || f.Constraint != token.ILLEGAL {
			panic(unsupported("an aliased, optional or required field in %s", name))
		}
		fn, ident := labelOf(f.Label)
		if fn == "" || !ident || isDef(fn) {
			panic(unsupported("field %s of definition %s", fn, name))
		}
		if _, dup := d.index[fn]; dup {
			panic(unsupported("%s.%s declared twice", name, fn))
		}
		d.index[fn] = len(d.fields)
		sc.names[fn] = binding{kind: bindDefield, idx: len(d.fields)}
		d.fields = append(d.fields, defField{name: fn, hidden: isHidden(fn)})
		exprs = append(exprs, f.Value)
	}
	// A parameter's type is a predeclared identifier that nothing
	// declared shadows: in {number: int, weight: number} weight is the
	// field number, in CUE as here (a field, let or import of the
	// expression shadows it too, wherever it is declared).
	for i, x := range exprs {
		id, ok := x.(*ast.Ident)
		if !ok {
			continue
		}
		_, field := d.index[id.Name]
		_, top := cc.top.names[id.Name]
		_, imp := cc.imports[id.Name]
		if field || top || imp {
			continue
		}
		switch id.Name {
		case "string", "int", "bool", "number", "_":
			d.fields[i].param = id.Name
		}
	}
	// The definition's scope: its fields, then the other definitions and
	// the imports (no top-level field, no spec).
	defScope := &fscope{names: map[string]binding{}}
	for n, b := range cc.top.names {
		if b.kind == bindDef {
			defScope.names[n] = b
		} else {
			defScope.names[n] = binding{kind: bindOpaque, why: "a definition reads no field or let of the expression"}
		}
	}
	defScope.names["spec"] = binding{kind: bindOpaque, why: "a definition reads no spec"}
	sc.parent = defScope
	saved := cc.inDef
	cc.inDef = d
	for i := range d.fields {
		if d.fields[i].param == "" {
			d.fields[i].eval = cc.expr(exprs[i], sc)
		}
	}
	cc.inDef = saved
	return d
}

func (cc *composeCompiler) newSlot() int {
	cc.slots++
	return cc.slots - 1
}

// expr compiles x in scope sc. A constant (literals, and struct and list
// literals of constants) is evaluated once, here.
func (cc *composeCompiler) expr(x ast.Expr, sc *fscope) evalFn {
	f := cc.expr0(x, sc)
	if !isConst(x) {
		return f
	}
	v, err := f(&fenv{})
	if err != nil {
		return f
	}
	if o, ok := v.(*fobj); ok {
		o.constant = true
	}
	return func(*fenv) (any, error) { return v, nil }
}

// isConst reports whether x is a literal, or a struct or list literal of
// constants with static labels.
func isConst(x ast.Expr) bool {
	switch x := x.(type) {
	case *ast.ParenExpr:
		return isConst(x.X)
	case *ast.BasicLit:
		return true
	case *ast.UnaryExpr:
		return isConst(x.X)
	case *ast.ListLit:
		for _, e := range x.Elts {
			if !isConst(e) {
				return false
			}
		}
		return true
	case *ast.StructLit:
		for _, d := range x.Elts {
			f, ok := d.(*ast.Field)
			if !ok {
				if _, ok := d.(*ast.CommentGroup); ok {
					continue
				}
				return false
			}
			switch l := f.Label.(type) {
			case *ast.Ident:
				if isHidden(l.Name) || isDef(l.Name) {
					return false
				}
			case *ast.BasicLit:
			default:
				return false
			}
			if f.Alias != nil || f.Constraint != token.ILLEGAL || !isConst(f.Value) {
				return false
			}
		}
		return true
	}
	return false
}

func (cc *composeCompiler) expr0(x ast.Expr, sc *fscope) evalFn {
	switch x := x.(type) {
	case *ast.ParenExpr:
		return cc.expr(x.X, sc)
	case *ast.BasicLit:
		v := literalOf(x)
		return func(*fenv) (any, error) { return v, nil }
	case *ast.Ident:
		return cc.ident(x, sc)
	case *ast.Interpolation:
		return cc.interpolation(x, sc)
	case *ast.SelectorExpr:
		name, ident := labelOf(x.Sel)
		if name == "" {
			panic(unsupported("selector"))
		}
		// x._h and x.#d select a hidden field or a definition, which
		// only a definition instance has (not JSON, nor a struct literal's
		// quoted label "_h"); x.f and x["_h"] a regular field.
		hidden := ident && (isHidden(name) || isDef(name))
		if id, ok := x.X.(*ast.Ident); ok {
			if _, isImport := cc.imports[id.Name]; isImport {
				if _, shadowed := sc.lookup(id.Name); !shadowed {
					panic(unsupported("%s.%s outside a call", id.Name, name))
				}
			}
		}
		// (#d & {...}).f and #d.f select a definition's field by index.
		if d, ok := cc.defOf(x.X, sc); ok {
			i, ok := d.index[name]
			if !ok || d.fields[i].hidden != hidden {
				panic(unsupported("%s has no field %s", d.name, name))
			}
			inst := cc.instance(x.X, sc, true)
			return func(e *fenv) (any, error) {
				v, err := inst(e)
				if err != nil {
					return nil, err
				}
				return v.(*finst).field(e, i)
			}
		}
		base := cc.expr(x.X, sc)
		return func(e *fenv) (any, error) {
			v, err := base(e)
			if err != nil {
				return nil, err
			}
			return selectField(e, v, name, hidden)
		}
	case *ast.IndexExpr:
		base, idx := cc.expr(x.X, sc), cc.expr(x.Index, sc)
		return func(e *fenv) (any, error) {
			v, err := base(e)
			if err != nil {
				return nil, err
			}
			i, err := idx(e)
			if err != nil {
				return nil, err
			}
			switch i := i.(type) {
			case int64:
				l, ok := v.([]any)
				if !ok || i < 0 || i >= int64(len(l)) {
					return nil, fallback("index %d", i)
				}
				return l[i], nil
			case string:
				return selectField(e, v, i, false)
			}
			return nil, fallback("index of type %T", i)
		}
	case *ast.CallExpr:
		return cc.call(x, sc)
	case *ast.UnaryExpr:
		arg := cc.expr(x.X, sc)
		switch x.Op {
		case token.NOT:
			return func(e *fenv) (any, error) {
				v, err := arg(e)
				if err != nil {
					return nil, err
				}
				b, ok := v.(bool)
				if !ok {
					return nil, fallback("! of %T", v)
				}
				return !b, nil
			}
		case token.SUB, token.ADD:
			neg := x.Op == token.SUB
			return func(e *fenv) (any, error) {
				v, err := arg(e)
				if err != nil {
					return nil, err
				}
				n, ok := v.(int64)
				if !ok || (neg && n == -1<<63) {
					return nil, fallback("sign of %T", v)
				}
				if neg {
					return -n, nil
				}
				return n, nil
			}
		}
		panic(unsupported("operator %s", x.Op))
	case *ast.BinaryExpr:
		return cc.binary(x, sc)
	case *ast.StructLit:
		return cc.structLit(x, sc)
	case *ast.ListLit:
		return cc.listLit(x, sc)
	}
	panic(unsupported("%T", x))
}

// literalOf is a basic literal's value.
func literalOf(x *ast.BasicLit) any {
	switch x.Kind {
	case token.TRUE:
		return true
	case token.FALSE:
		return false
	case token.NULL:
		return nil
	case token.STRING:
		s, err := literal.Unquote(x.Value)
		if err != nil || strings.HasPrefix(strings.TrimLeft(x.Value, "#"), "'") {
			panic(unsupported("literal %s", x.Value))
		}
		return s
	case token.INT:
		v := x.Value
		for _, c := range v {
			if c < '0' || c > '9' {
				panic(unsupported("literal %s", v))
			}
		}
		if len(v) > 1 && v[0] == '0' {
			panic(unsupported("literal %s", v))
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			panic(unsupported("literal %s", v))
		}
		return n
	}
	panic(unsupported("literal %s", x.Value))
}

func (cc *composeCompiler) ident(x *ast.Ident, sc *fscope) evalFn {
	switch x.Name {
	case "true":
		return func(*fenv) (any, error) { return true, nil }
	case "false":
		return func(*fenv) (any, error) { return false, nil }
	case "null":
		return func(*fenv) (any, error) { return nil, nil }
	case "_":
		// CUE never binds _ (for _, v in ..., let _ = ...): it is top.
		panic(unsupported("a reference to _ (top, which CUE never binds)"))
	}
	b, ok := sc.lookup(x.Name)
	if !ok {
		if x.Name == "spec" && cc.inDef == nil {
			return func(e *fenv) (any, error) { return e.spec, nil }
		}
		panic(unsupported("reference %s", x.Name))
	}
	switch b.kind {
	case bindSlot:
		i := b.idx
		return func(e *fenv) (any, error) { return e.slots[i], nil }
	case bindTop:
		i := b.idx
		cc.topRefs[i] = true
		return func(e *fenv) (any, error) { return e.topField(i) }
	case bindDefield:
		i := b.idx
		return func(e *fenv) (any, error) { return e.cur.field(e, i) }
	case bindDef:
		// A definition alone: its instance with no parameters set.
		return cc.instance(x, sc, false)
	}
	if b.why != "" {
		panic(unsupported("reference %s: %s", x.Name, b.why))
	}
	panic(unsupported("reference %s", x.Name))
}

// topField evaluates top-level field i once.
func (e *fenv) topField(i int) (any, error) {
	if e.state[i] == 2 {
		return e.top[i], nil
	}
	return e.c.eval(e, i)
}

// defOf returns the definition x instantiates: #d, or #d unified with
// one struct literal (#d & {...} or {...} & #d). A longer chain of
// unifications with a definition in it (#d & {...} & {...}, {...} & #d &
// {...}, #d & #e) is outside the subset: CUE unifies every conjunct (a
// conflict, a field not allowed), where an instance sets the parameters
// of one literal.
func (cc *composeCompiler) defOf(x ast.Expr, sc *fscope) (*fdef, bool) {
	switch x := unparen(x).(type) {
	case *ast.Ident:
		return cc.defNamed(x, sc)
	case *ast.BinaryExpr:
		if x.Op != token.AND {
			return nil, false
		}
		if d, ok := cc.defNamed(x.X, sc); ok && isStructLit(x.Y) {
			return d, true
		}
		if d, ok := cc.defNamed(x.Y, sc); ok && isStructLit(x.X) {
			return d, true
		}
		if cc.unifiesDef(x, sc) {
			panic(unsupported("a chain of unifications with a definition: only #d & {...} is on the fast path (CUE unifies every conjunct)"))
		}
	}
	return nil, false
}

// defNamed returns the definition x names (#d, parenthesised or not).
func (cc *composeCompiler) defNamed(x ast.Expr, sc *fscope) (*fdef, bool) {
	id, ok := unparen(x).(*ast.Ident)
	if !ok {
		return nil, false
	}
	if b, ok := sc.lookup(id.Name); ok && b.kind == bindDef {
		if d := cc.defs[id.Name]; d != nil {
			return d, true
		}
		panic(unsupported("definition %s used by a definition", id.Name))
	}
	return nil, false
}

// unifiesDef reports whether a conjunct of the unification x is a
// definition.
func (cc *composeCompiler) unifiesDef(x ast.Expr, sc *fscope) bool {
	if b, ok := unparen(x).(*ast.BinaryExpr); ok && b.Op == token.AND {
		return cc.unifiesDef(b.X, sc) || cc.unifiesDef(b.Y, sc)
	}
	_, ok := cc.defNamed(x, sc)
	return ok
}

func isStructLit(x ast.Expr) bool {
	_, ok := unparen(x).(*ast.StructLit)
	return ok
}

// instance compiles #d or #d & {p: x, ...} (or {...} & #d): a definition
// with parameters set. Unless only a field of it is selected, the
// literal must set its parameters in the definition's order: an
// instance's fields are then in the definition's order, in CUE as here,
// where CUE merges two different orders its own way.
func (cc *composeCompiler) instance(x ast.Expr, sc *fscope, selected bool) evalFn {
	d, ok := cc.defOf(x, sc)
	if !ok {
		panic(unsupported("not a definition instance"))
	}
	var lit *ast.StructLit
	if b, ok := unparen(x).(*ast.BinaryExpr); ok {
		if lit, ok = unparen(b.X).(*ast.StructLit); !ok {
			lit = unparen(b.Y).(*ast.StructLit)
		}
	}
	type arg struct {
		idx  int
		typ  string
		eval evalFn
	}
	var args []arg
	if lit != nil {
		// The literal's labels are its own scope.
		inner := &fscope{parent: sc, names: map[string]binding{}}
		for _, e := range lit.Elts {
			if f, ok := e.(*ast.Field); ok {
				if name, _ := labelOf(f.Label); name != "" {
					inner.names[name] = binding{kind: bindOpaque}
				}
			}
		}
		seen := map[string]bool{}
		for _, e := range lit.Elts {
			f, ok := e.(*ast.Field)
			if !ok {
				if _, ok := e.(*ast.CommentGroup); ok {
					continue
				}
				panic(unsupported("%T unified with %s", e, d.name))
			}
			name, ident := labelOf(f.Label)
			if name == "" || !ident || f.Alias != nil || f.Constraint != token.ILLEGAL || seen[name] {
				panic(unsupported("a field unified with %s", d.name))
			}
			seen[name] = true
			i, ok := d.index[name]
			if !ok || d.fields[i].param == "" {
				panic(unsupported("%s.%s is not a parameter", d.name, name))
			}
			if n := len(args); n > 0 && !selected && args[n-1].idx > i {
				panic(unsupported("%s & {...} sets %s before %s, in another order than %s declares them (CUE merges the two orders its own way)",
					d.name, d.fields[args[n-1].idx].name, name, d.name))
			}
			args = append(args, arg{idx: i, typ: d.fields[i].param, eval: cc.expr(f.Value, inner)})
		}
	}
	return func(e *fenv) (any, error) {
		inst := &finst{def: d}
		if n := len(d.fields); n <= len(inst.vbuf) {
			inst.vals, inst.state = inst.vbuf[:n], inst.stbuf[:n]
		} else {
			inst.vals, inst.state = make([]any, n), make([]uint8, n)
		}
		for _, a := range args {
			v, err := a.eval(e)
			if err != nil {
				return nil, err
			}
			if !ofType(v, a.typ) {
				return nil, fallback("%s.%s: %T is not %s", d.name, d.fields[a.idx].name, v, a.typ)
			}
			inst.vals[a.idx], inst.state[a.idx] = v, 2
		}
		// Every computed field, as CUE evaluates them all.
		for i, f := range d.fields {
			if f.param == "" {
				if _, err := inst.field(e, i); err != nil {
					return nil, err
				}
			}
		}
		return inst, nil
	}
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

func (cc *composeCompiler) interpolation(x *ast.Interpolation, sc *fscope) evalFn {
	if len(x.Elts) == 1 {
		return cc.expr(x.Elts[0], sc)
	}
	str := cc.interpString(x, sc)
	return func(e *fenv) (any, error) {
		s, err := str(e)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// strFn evaluates an expression that yields a string.
type strFn func(e *fenv) (string, error)

// stringOf compiles x to a strFn when it is an interpolation (which
// yields a string or fails), else returns nil.
func (cc *composeCompiler) stringOf(x ast.Expr, sc *fscope) strFn {
	if in, ok := unparen(x).(*ast.Interpolation); ok && len(in.Elts) > 1 {
		return cc.interpString(in, sc)
	}
	return nil
}

// interpString compiles an interpolation of several parts.
func (cc *composeCompiler) interpString(x *ast.Interpolation, sc *fscope) strFn {
	first, last := x.Quotes()
	info, prefixLen, _, err := literal.ParseQuotes(first.Value, last.Value)
	if err != nil || !info.IsDouble() {
		panic(unsupported("interpolation"))
	}
	var parts []string
	var exprs []evalFn
	prefix := ""
	for i := 0; i < len(x.Elts); i += 2 {
		l, ok := x.Elts[i].(*ast.BasicLit)
		if !ok || !strings.HasPrefix(l.Value, prefix) {
			panic(unsupported("interpolation"))
		}
		s, err := info.Unquote(l.Value[prefixLen:])
		if err != nil {
			panic(unsupported("interpolation"))
		}
		parts = append(parts, s)
		if i+1 < len(x.Elts) {
			exprs = append(exprs, cc.expr(x.Elts[i+1], sc))
		}
		prefix, prefixLen = ")", 1
	}
	return func(e *fenv) (string, error) {
		var vals [8]string
		strs := vals[:0]
		n := 0
		for _, p := range parts {
			n += len(p)
		}
		for _, x := range exprs {
			v, err := x(e)
			if err != nil {
				return "", err
			}
			var s string
			switch v := v.(type) {
			case string:
				s = v
			case int64:
				s = strconv.FormatInt(v, 10)
			case bool:
				s = strconv.FormatBool(v)
			default:
				return "", fallback("interpolation of %T", v)
			}
			strs = append(strs, s)
			n += len(s)
		}
		var b strings.Builder
		b.Grow(n)
		for i, p := range parts {
			b.WriteString(p)
			if i < len(strs) {
				b.WriteString(strs[i])
			}
		}
		return b.String(), nil
	}
}

func (cc *composeCompiler) binary(x *ast.BinaryExpr, sc *fscope) evalFn {
	if x.Op == token.AND {
		return cc.instance(x, sc, false)
	}
	l, r := cc.expr(x.X, sc), cc.expr(x.Y, sc)
	var op func(a, b any) (any, error)
	switch x.Op {
	case token.ADD:
		op = func(a, b any) (any, error) {
			switch a := a.(type) {
			case int64:
				if b, ok := b.(int64); ok {
					s := a + b
					if (s > a) == (b > 0) {
						return s, nil
					}
				}
			case string:
				if b, ok := b.(string); ok {
					return a + b, nil
				}
			}
			return nil, fallback("%T + %T", a, b)
		}
	case token.SUB:
		op = func(a, b any) (any, error) {
			x, ok1 := a.(int64)
			y, ok2 := b.(int64)
			if ok1 && ok2 {
				s := x - y
				if (s < x) == (y > 0) {
					return s, nil
				}
			}
			return nil, fallback("%T - %T", a, b)
		}
	case token.MUL:
		op = func(a, b any) (any, error) {
			x, ok1 := a.(int64)
			y, ok2 := b.(int64)
			if ok1 && ok2 {
				p := x * y
				if p == 0 && (x < 0 || y < 0) {
					// CUE's numbers are decimals: a negative times
					// zero is -0 ("\(-7 * 0)" is "-0"), which no
					// int64 is.
					return nil, fallback("negative zero")
				}
				if x == 0 || (p/x == y && !(x == -1 && y == math.MinInt64) && !(y == -1 && x == math.MinInt64)) {
					return p, nil
				}
			}
			return nil, fallback("%T * %T", a, b)
		}
	case token.EQL, token.NEQ:
		neq := x.Op == token.NEQ
		op = func(a, b any) (any, error) {
			eq, ok := scalarEqual(a, b)
			if !ok {
				return nil, fallback("%T == %T", a, b)
			}
			return eq != neq, nil
		}
	case token.LSS, token.LEQ, token.GTR, token.GEQ:
		o := x.Op
		op = func(a, b any) (any, error) {
			c, ok := compare(a, b)
			if !ok {
				return nil, fallback("%T %s %T", a, o, b)
			}
			switch o {
			case token.LSS:
				return c < 0, nil
			case token.LEQ:
				return c <= 0, nil
			case token.GTR:
				return c > 0, nil
			}
			return c >= 0, nil
		}
	case token.LAND, token.LOR:
		and := x.Op == token.LAND
		op = func(a, b any) (any, error) {
			x, ok1 := a.(bool)
			y, ok2 := b.(bool)
			if !ok1 || !ok2 {
				return nil, fallback("%T && %T", a, b)
			}
			if and {
				return x && y, nil
			}
			return x || y, nil
		}
	case token.MAT, token.NMAT:
		not := x.Op == token.NMAT
		var fixed *regexp.Regexp
		if lit, ok := x.Y.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			s, _ := literal.Unquote(lit.Value)
			re, err := regexp.Compile(s)
			if err != nil {
				panic(unsupported("regexp %s", lit.Value))
			}
			fixed = re
		}
		op = func(a, b any) (any, error) {
			s, ok1 := a.(string)
			p, ok2 := b.(string)
			if !ok1 || !ok2 {
				return nil, fallback("%T =~ %T", a, b)
			}
			re := fixed
			if re == nil {
				var err error
				if re, err = regexp.Compile(p); err != nil {
					return nil, fallback("regexp: %v", err)
				}
			}
			return re.MatchString(s) != not, nil
		}
	default:
		panic(unsupported("operator %s", x.Op))
	}
	return func(e *fenv) (any, error) {
		a, err := l(e)
		if err != nil {
			return nil, err
		}
		b, err := r(e)
		if err != nil {
			return nil, err
		}
		return op(a, b)
	}
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

// clause is one compiled comprehension clause.
type clause struct {
	kind     token.Token // FOR, IF, LET
	key, val int         // slots; key -1 when absent
	src      evalFn
	part     bool // a for over the parts list (see fenv.sel)
}

// clauses compiles cls, each in the scope of those before; it returns
// the scope of the body.
func (cc *composeCompiler) clauses(cls []ast.Clause, sc *fscope) ([]clause, *fscope) {
	var out []clause
	for _, c := range cls {
		switch c := c.(type) {
		case *ast.ForClause:
			src := cc.expr(c.Source, sc)
			inner := &fscope{parent: sc, names: map[string]binding{}}
			cl := clause{kind: token.FOR, key: -1, src: src, part: cc.partFor[c]}
			if c.Key != nil {
				cl.key = cc.newSlot()
				bind(inner, c.Key.Name, binding{kind: bindSlot, idx: cl.key})
			}
			cl.val = cc.newSlot()
			bind(inner, c.Value.Name, binding{kind: bindSlot, idx: cl.val})
			out = append(out, cl)
			sc = inner
		case *ast.IfClause:
			out = append(out, clause{kind: token.IF, src: cc.expr(c.Condition, sc)})
		case *ast.LetClause:
			cl := clause{kind: token.LET, val: cc.newSlot(), src: cc.expr(c.Expr, sc)}
			sc = &fscope{parent: sc, names: map[string]binding{c.Ident.Name: {kind: bindSlot, idx: cl.val}}}
			out = append(out, cl)
		default:
			panic(unsupported("clause %T", c))
		}
	}
	return out, sc
}

// bind declares name in sc, unless it is _ (which CUE never binds).
func bind(sc *fscope, name string, b binding) {
	if name != "_" {
		sc.names[name] = b
	}
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

// comprehension compiles a comprehension's clauses in scope sc: the
// clauses, the scope of its value, and the value, a struct literal (a
// fallback clause or any other value is outside the subset).
func (cc *composeCompiler) comprehension(x *ast.Comprehension, sc *fscope) ([]clause, *fscope, *ast.StructLit) {
	if x.Fallback != nil {
		panic(unsupported("a comprehension's fallback"))
	}
	cls, inner := cc.clauses(x.Clauses, sc)
	st, ok := x.Value.(*ast.StructLit)
	if !ok {
		panic(unsupported("comprehension value %T", x.Value))
	}
	return cls, inner, st
}

// listLit compiles a list literal.
func (cc *composeCompiler) listLit(x *ast.ListLit, sc *fscope) evalFn {
	type elem struct {
		val evalFn
		cls []clause
	}
	var elems []elem
	for _, el := range x.Elts {
		switch el := el.(type) {
		case *ast.Comprehension:
			cls, inner, st := cc.comprehension(el, sc)
			elems = append(elems, elem{val: cc.structLit(st, inner), cls: cls})
		case *ast.Ellipsis:
			panic(unsupported("an open list"))
		default:
			elems = append(elems, elem{val: cc.expr(el, sc)})
		}
	}
	return func(e *fenv) (any, error) {
		out := make([]any, 0, len(elems))
		for _, el := range elems {
			if el.cls == nil {
				v, err := el.val(e)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
				continue
			}
			err := runClauses(e, el.cls, 0, func() error {
				v, err := el.val(e)
				if err != nil {
					return err
				}
				out = append(out, v)
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
		return out, nil
	}
}

func unparen(x ast.Expr) ast.Expr {
	for {
		p, ok := x.(*ast.ParenExpr)
		if !ok {
			return x
		}
		x = p.X
	}
}

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

// structLit compiles a nested struct literal: one embedded value, or
// fields (static or dynamic labels), lets and comprehensions yielding
// fields. Its own labels are not referable (a sibling reference is
// outside the subset).
func (cc *composeCompiler) structLit(x *ast.StructLit, sc *fscope) evalFn {
	var embeds []ast.Expr
	n := 0
	for _, d := range x.Elts {
		switch d := d.(type) {
		case *ast.EmbedDecl:
			embeds = append(embeds, d.Expr)
		case *ast.CommentGroup:
		default:
			n++
		}
	}
	if len(embeds) > 0 {
		if len(embeds) > 1 || n > 0 {
			panic(unsupported("an embedding beside fields"))
		}
		return cc.expr(embeds[0], sc)
	}
	inner := &fscope{parent: sc, names: map[string]binding{}}
	lets := map[string]int{}
	for _, d := range x.Elts {
		switch d := d.(type) {
		case *ast.Field:
			if name, _ := labelOf(d.Label); name != "" {
				inner.names[name] = binding{kind: bindOpaque}
			}
		case *ast.LetClause:
			if _, dup := inner.names[d.Ident.Name]; dup {
				panic(unsupported("%s declared twice", d.Ident.Name))
			}
			lets[d.Ident.Name] = cc.newSlot()
			inner.names[d.Ident.Name] = binding{kind: bindSlot, idx: lets[d.Ident.Name]}
		}
	}
	type part struct {
		name  string // a static label
		label evalFn // a dynamic label
		val   evalFn
		let   int // a let's slot, or -1
		cls   []clause
	}
	var parts, letParts []part
	static := map[string]bool{}
	unordered := false
	for _, d := range x.Elts {
		switch d := d.(type) {
		case *ast.Field:
			if d.Alias != nil || d.Constraint != token.ILLEGAL {
				panic(unsupported("an aliased, optional or required field"))
			}
			name, ident := labelOf(d.Label)
			p := part{let: -1}
			switch {
			case name != "":
				if ident && (isHidden(name) || isDef(name)) {
					panic(unsupported("hidden field or definition %s in a nested struct", name))
				}
				if static[name] {
					panic(unsupported("field %s declared twice", name))
				}
				static[name] = true
				p.name = name
			default:
				// A label is in the struct's scope, as CUE resolves it.
				switch l := d.Label.(type) {
				case *ast.Interpolation:
					p.label = cc.interpolation(l, inner)
				case *ast.ParenExpr:
					p.label = cc.expr(l.X, inner)
				default:
					panic(unsupported("label %T", d.Label))
				}
				unordered = true
			}
			p.val = cc.expr(d.Value, inner)
			parts = append(parts, p)
		case *ast.LetClause:
			// Compiled in a scope where this let and those after it are
			// opaque: lets are evaluated first, in order.
			slot := lets[d.Ident.Name]
			later := &fscope{parent: inner, names: map[string]binding{}}
			for n, b := range inner.names {
				if b.kind == bindSlot && b.idx >= slot && lets[n] == b.idx {
					later.names[n] = binding{kind: bindOpaque}
				}
			}
			letParts = append(letParts, part{let: slot, val: cc.expr(d.Expr, later)})
		case *ast.Comprehension:
			cls, body, st := cc.comprehension(d, inner)
			parts = append(parts, part{let: -1, cls: cls, val: cc.structLit(st, body)})
			unordered = true
		case *ast.CommentGroup:
		default:
			panic(unsupported("%T in a struct", d))
		}
	}
	parts = append(letParts, parts...)
	if !unordered && len(letParts) == 0 {
		// Static labels only: the keys are the literal's, shared.
		keys := make([]string, len(parts))
		vals := make([]evalFn, len(parts))
		for i, p := range parts {
			keys[i], vals[i] = p.name, p.val
		}
		return func(e *fenv) (any, error) {
			o := &fobj{keys: keys}
			if len(vals) <= len(o.inline) {
				o.vals = o.inline[:len(vals)]
			} else {
				o.vals = make([]any, len(vals))
			}
			for i, f := range vals {
				v, err := f(e)
				if err != nil {
					return nil, err
				}
				o.vals[i] = v
			}
			return o, nil
		}
	}
	nfields := len(static)
	return func(e *fenv) (any, error) {
		o := &fobj{keys: make([]string, 0, nfields), vals: make([]any, 0, nfields), unordered: unordered}
		add := func(k string, v any) error {
			if unordered {
				if _, dup := o.get(k); dup {
					return fallback("field %s twice", k)
				}
			}
			o.keys, o.vals = append(o.keys, k), append(o.vals, v)
			return nil
		}
		for _, p := range parts {
			switch {
			case p.let >= 0:
				v, err := p.val(e)
				if err != nil {
					return nil, err
				}
				e.slots[p.let] = v
			case p.cls != nil:
				err := runClauses(e, p.cls, 0, func() error {
					v, err := p.val(e)
					if err != nil {
						return err
					}
					src, ok := v.(*fobj)
					if !ok {
						return fallback("a comprehension yields %T into a struct", v)
					}
					for i, k := range src.keys {
						if err := add(k, src.vals[i]); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					return nil, err
				}
			default:
				k := p.name
				if p.label != nil {
					l, err := p.label(e)
					if err != nil {
						return nil, err
					}
					s, ok := l.(string)
					if !ok {
						return nil, fallback("label of %T", l)
					}
					k = s
				}
				v, err := p.val(e)
				if err != nil {
					return nil, err
				}
				if err := add(k, v); err != nil {
					return nil, err
				}
			}
		}
		return o, nil
	}
}

// call compiles a builtin call: len(x) or pkg.Name(args) of fastBuiltins.
func (cc *composeCompiler) call(x *ast.CallExpr, sc *fscope) evalFn {
	var name string
	switch f := x.Fun.(type) {
	case *ast.Ident:
		if _, shadowed := sc.lookup(f.Name); shadowed || f.Name != "len" {
			panic(unsupported("call of %s", f.Name))
		}
		name = "len"
	case *ast.SelectorExpr:
		id, ok := f.X.(*ast.Ident)
		sel, _ := labelOf(f.Sel)
		if !ok || sel == "" {
			panic(unsupported("call"))
		}
		path, ok := cc.imports[id.Name]
		if _, shadowed := sc.lookup(id.Name); !ok || shadowed {
			panic(unsupported("call of %s.%s", id.Name, sel))
		}
		name = path + "." + sel
	default:
		panic(unsupported("call of %T", x.Fun))
	}
	b, ok := fastBuiltins[name]
	if !ok || b.args != len(x.Args) {
		panic(unsupported("builtin %s/%d", name, len(x.Args)))
	}
	args := make([]evalFn, len(x.Args))
	for i, a := range x.Args {
		args[i] = cc.expr(a, sc)
	}
	fn := b.fn
	if name == "encoding/hex.Encode" {
		// hex.Encode(sha256.Sum256(x)): one string, no bytes value.
		if inner, ok := x.Args[0].(*ast.CallExpr); ok && len(inner.Args) == 1 {
			if sel, ok := inner.Fun.(*ast.SelectorExpr); ok {
				id, _ := sel.X.(*ast.Ident)
				n, _ := labelOf(sel.Sel)
				if id != nil && !shadows(sc, id.Name) && cc.imports[id.Name] == "crypto/sha256" && n == "Sum256" {
					arg := cc.expr(inner.Args[0], sc)
					return func(e *fenv) (any, error) {
						v, err := arg(e)
						if err != nil {
							return nil, err
						}
						s, ok := v.(string)
						if !ok {
							return nil, fallback("sha256.Sum256 of %T", v)
						}
						h := sha256.Sum256([]byte(s))
						var out [64]byte
						hex.Encode(out[:], h[:])
						return string(out[:]), nil
					}
				}
			}
		}
	}
	return func(e *fenv) (any, error) {
		var vals [4]any
		for i, a := range args {
			v, err := a(e)
			if err != nil {
				return nil, err
			}
			vals[i] = v
		}
		v, err := fn(vals)
		if err != nil {
			return nil, fallback("%s: %v", name, err)
		}
		return v, nil
	}
}

func shadows(sc *fscope, name string) bool {
	_, ok := sc.lookup(name)
	return ok
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
