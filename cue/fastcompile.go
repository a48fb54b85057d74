package cue

import (
	"strconv"
	"strings"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/literal"
	"cuelang.org/go/cue/token"
)

// The fast path's compiler (fastcompose.go has the overview): a
// composeCompiler turns the expression's syntax into closures over a
// fenv, resolving each name to a slot, a top-level field or a definition
// once, and refusing (unsupported) whatever is outside the subset.

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
