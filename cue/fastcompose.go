package cue

import (
	"fmt"
	"strings"
	"sync/atomic"

	cuelang "cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/literal"
	"cuelang.org/go/cue/parser"

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
//
// The files, by concern: this one holds the data model (fastComposer,
// fenv, sink, the values fobj and finst) and compileCompose; the compiler
// is fastcompile.go (scopes, top level, definitions, names, instances)
// and fastcompile_expr.go (operators, comprehensions, literals, calls);
// the evaluation is fasteval.go (run, runSel, reading values, clauses,
// builtins); the output is fastoutput.go (streaming children and edges
// into a sink, their specs as JSON bytes).
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
