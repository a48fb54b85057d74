package cue

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"regexp"
	"strconv"
	"strings"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/literal"
	"cuelang.org/go/cue/token"
)

// The fast path's compiler, continued: strings and interpolations,
// operators, comprehension clauses, list and struct literals, builtin
// calls. Each returns the closure that evaluates the expression.

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
