package cue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"sort"
	"strconv"
	"strings"

	cuelang "cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/format"
	"cuelang.org/go/cue/parser"

	"github.com/convergehq/converge"
)

// ErrUnknownKind is returned (wrapped) by the Validate methods when the
// KindRef names no compiled kind.
var ErrUnknownKind = errors.New("unknown kind")

// recycleAfter is how many validations one evaluator serves before it is
// dropped with its cue.Context. With cuelang.org/go v0.17.1 the values
// ValidateSpec builds (ctx.Encode) were not retained by the context (live
// heap flat across 200k validations), but other ways of building values
// (ctx.CompileBytes) slow down on a long-lived context, and other CUE
// versions have kept more. Recycling bounds whatever a context accumulates
// at the price of recompiling the schemas (well under a millisecond) every
// recycleAfter validations. See docs/BENCHMARKS.md.
var recycleAfter = 20000

// Schemas holds the compiled schemas of a set of kinds. It implements
// scheduler.Validator. It is safe for concurrent use: each goroutine
// validates through its own evaluator (a cue.Context with the schemas
// compiled into it) taken from a pool.
type Schemas struct {
	kinds map[converge.KindRef]*converge.Kind
	// files holds each schema's wrapped source (see wrapSchema), parsed
	// afresh for each evaluator: compiling resolves identifiers in the
	// AST, so one AST is never shared between contexts.
	files map[schemaKey][]byte
	// fast holds the fast check of each schema written in the plain
	// subset compileFast understands (fastcheck.go); data it accepts is
	// valid without CUE.
	fast map[schemaKey]*fastNode
	// secret holds the secret field paths below each schema's root
	// (secret.go), whose values no validation error shows.
	secret map[schemaKey][][]string
	// composers holds the fast composer of each kind whose compose
	// expression is in the subset compileCompose understands
	// (fastcompose.go), and why not for the others.
	composers    map[converge.KindRef]fastComposeOf
	composeStats composeCounters

	pool chan *evaluator // idle evaluators; never blocks
}

// schemaKey names one schema of one kind version.
type schemaKey struct {
	ref  converge.KindRef
	part string // "spec", "status" or "config"
}

// evaluator is one cue.Context and the schemas compiled into it. It is
// used by one goroutine at a time.
type evaluator struct {
	ctx     *cuelang.Context
	schemas map[schemaKey]cuelang.Value
	uses    int
}

// Compile compiles the spec, status and config schemas of kinds (as stored:
// CUE source strings). It returns an error naming every schema that does not
// compile; the returned Schemas then holds the kinds that did (nil if none).
func Compile(kinds []*converge.Kind) (*Schemas, error) {
	s := newSchemas()
	ev := s.newEvaluator()
	var errs []error
	for _, k := range kinds {
		if err := s.add(ev, k); err != nil {
			errs = append(errs, err)
		}
	}
	if len(s.kinds) == 0 {
		return nil, errors.Join(errs...)
	}
	s.put(ev)
	return s, errors.Join(errs...)
}

func newSchemas() *Schemas {
	return &Schemas{
		kinds:     map[converge.KindRef]*converge.Kind{},
		files:     map[schemaKey][]byte{},
		fast:      map[schemaKey]*fastNode{},
		secret:    map[schemaKey][][]string{},
		composers: map[converge.KindRef]fastComposeOf{},
		pool:      make(chan *evaluator, 8),
	}
}

// add parses and compiles k's schemas into ev and registers k. It returns
// an error (and registers nothing) if one of them does not compile.
func (s *Schemas) add(ev *evaluator, k *converge.Kind) error {
	ref := k.Ref()
	parts := [...]struct{ name, src string }{{"spec", k.SpecSchema}, {"status", k.StatusSchema}, {"config", k.ConfigSchema}}
	files := map[schemaKey][]byte{}
	fast := map[schemaKey]*fastNode{}
	for _, p := range parts {
		key := schemaKey{ref, p.name}
		src, err := wrapSchema(key.name(), p.src, p.name == "status")
		if err != nil {
			return &schemaError{ref: ref, part: p.name, err: err}
		}
		v, err := build(ev.ctx, key.name(), src)
		if err != nil {
			return &schemaError{ref: ref, part: p.name, err: err}
		}
		files[key] = src
		ev.schemas[key] = v
		if f := compileFast(p.src, p.name == "status"); f != nil {
			fast[key] = f
		}
	}
	for key, f := range files {
		s.files[key] = f
		delete(s.fast, key)
		if f := fast[key]; f != nil {
			s.fast[key] = f
		}
		delete(s.secret, key)
		if p := partPaths(k, key.part); len(p) > 0 {
			s.secret[key] = p
		}
	}
	delete(s.composers, ref)
	if k.Compose != "" {
		fc, err := compileCompose(composeText{imports: k.ComposeImports, expr: k.Compose})
		c := fastComposeOf{fc: fc, err: err}
		if fc != nil && fc.parts != nil {
			c.rev = composeRevision(k)
		}
		s.composers[ref] = c
	}
	s.kinds[ref] = k
	return nil
}

// schemaError is a kind schema that does not compile: which part (spec,
// status or config), and where inside it.
type schemaError struct {
	ref  converge.KindRef
	part string
	err  error
}

func (e *schemaError) Error() string {
	return fmt.Sprintf("compile %s %s schema: %v", e.ref, e.part, e.err)
}

func (e *schemaError) Unwrap() error { return e.err }

// path returns the field path inside the schema the error is about (the
// wrapping definition #S left out), or nil.
func (e *schemaError) path() []string {
	var ce *cueError
	if !errors.As(e.err, &ce) || len(ce.path) == 0 {
		return nil
	}
	p := ce.path
	if p[0] == "#S" {
		p = p[1:]
	}
	return p
}

// cueError is a CUE error flattened to its details, keeping the path of
// its first error.
type cueError struct {
	msg  string
	path []string
}

func (e *cueError) Error() string { return e.msg }

func newCUEError(err error) error {
	ce := &cueError{msg: strings.TrimSpace(cueerrors.Details(err, nil))}
	if es := cueerrors.Errors(err); len(es) > 0 {
		ce.path = es[0].Path()
	}
	return ce
}

// name names the schema in CUE positions: "vpc/v1 spec".
func (k schemaKey) name() string { return k.ref.String() + " " + k.part }

// wrapSchema parses src (a CUE file body or expression, possibly with
// imports) and returns the source of a file declaring it as the closed
// definition #S. An empty src means "{}" (nothing allowed), or "{...}"
// when open.
func wrapSchema(name, src string, open bool) ([]byte, error) {
	return wrapSchemaWith(name, src, open)
}

// wrapSchemaWith is wrapSchema with parser options (explain keeps the
// comments: parser.ParseComments).
func wrapSchemaWith(name, src string, open bool, opts ...parser.Option) ([]byte, error) {
	if strings.TrimSpace(src) == "" {
		src = "{}"
		if open {
			src = "{...}"
		}
	}
	f, err := parser.ParseFile(name, src, opts...)
	if err != nil {
		return nil, errors.New(cueerrors.Details(err, nil))
	}
	var imports, body []ast.Decl
	for _, d := range f.Decls {
		switch d.(type) {
		case *ast.ImportDecl:
			imports = append(imports, d)
		case *ast.Package:
			// A package clause carries no meaning in a schema.
		default:
			body = append(body, d)
		}
	}
	def := &ast.Field{Label: ast.NewIdent("#S"), Value: &ast.StructLit{Elts: body}}
	b, err := format.Node(&ast.File{Filename: name, Decls: append(imports, def)})
	if err != nil {
		return nil, fmt.Errorf("format schema: %w", err)
	}
	return b, nil
}

// build compiles a wrapped schema source in ctx and returns #S.
func build(ctx *cuelang.Context, name string, src []byte) (cuelang.Value, error) {
	v := ctx.CompileBytes(src, cuelang.Filename(name))
	if err := v.Err(); err != nil {
		return v, newCUEError(err)
	}
	v = v.LookupPath(cuelang.MakePath(cuelang.Def("#S")))
	if err := v.Validate(); err != nil {
		return v, newCUEError(err)
	}
	return v, nil
}

func (s *Schemas) newEvaluator() *evaluator {
	return &evaluator{ctx: cuecontext.New(), schemas: map[schemaKey]cuelang.Value{}}
}

// get returns an idle evaluator or a fresh one.
func (s *Schemas) get() *evaluator {
	select {
	case ev := <-s.pool:
		return ev
	default:
		return s.newEvaluator()
	}
}

// put returns ev to the pool unless it is worn out or the pool is full.
func (s *Schemas) put(ev *evaluator) {
	if ev.uses >= recycleAfter {
		return
	}
	select {
	case s.pool <- ev:
	default:
	}
}

// schema returns key's compiled schema in ev, compiling it on first use.
func (s *Schemas) schema(ev *evaluator, key schemaKey) (cuelang.Value, error) {
	if v, ok := ev.schemas[key]; ok {
		return v, nil
	}
	src, ok := s.files[key]
	if !ok {
		return cuelang.Value{}, fmt.Errorf("%w %s", ErrUnknownKind, key.ref)
	}
	v, err := build(ev.ctx, key.name(), src)
	if err != nil {
		return v, fmt.Errorf("compile %s %s schema: %w", key.ref, key.part, err)
	}
	ev.schemas[key] = v
	return v, nil
}

// Kind returns the kind ref names.
func (s *Schemas) Kind(ref converge.KindRef) (*converge.Kind, bool) {
	if s == nil {
		return nil, false
	}
	k, ok := s.kinds[ref]
	return k, ok
}

// Kinds returns every compiled kind, sorted by name and version.
func (s *Schemas) Kinds() []*converge.Kind {
	if s == nil {
		return nil
	}
	out := make([]*converge.Kind, 0, len(s.kinds))
	for _, k := range s.kinds {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return refLess(out[i].Ref(), out[j].Ref()) })
	return out
}

func refLess(a, b converge.KindRef) bool {
	if a.Kind != b.Kind {
		return a.Kind < b.Kind
	}
	return a.Version < b.Version
}

// ValidateSpec returns an error naming the field path (spec.cidr: …) if
// spec does not satisfy ref's spec schema, or wrapping ErrUnknownKind if
// ref is not compiled.
func (s *Schemas) ValidateSpec(ref converge.KindRef, spec json.RawMessage) error {
	return s.validate(schemaKey{ref, "spec"}, spec)
}

// ValidateStatus is ValidateSpec for a status (paths start with status.).
func (s *Schemas) ValidateStatus(ref converge.KindRef, status json.RawMessage) error {
	return s.validate(schemaKey{ref, "status"}, status)
}

// ValidateConfig is ValidateSpec for a provider config (paths start with
// config.).
func (s *Schemas) ValidateConfig(ref converge.KindRef, config json.RawMessage) error {
	return s.validate(schemaKey{ref, "config"}, config)
}

func (s *Schemas) validate(key schemaKey, data json.RawMessage) error {
	if s == nil {
		return fmt.Errorf("%w %s", ErrUnknownKind, key.ref)
	}
	if _, ok := s.kinds[key.ref]; !ok {
		return fmt.Errorf("%w %s", ErrUnknownKind, key.ref)
	}
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	if f := s.fast[key]; f != nil && f.accepts(data) {
		return nil
	}
	return s.validateCUE(key, data, nil)
}

// validateCUE is validate through CUE alone: the verdict and message for
// whatever the fast check did not accept. A required field missing at
// one of pending (or below it) is no error: a value flow fills it.
func (s *Schemas) validateCUE(key schemaKey, data json.RawMessage, pending []string) error {
	ev := s.get()
	defer s.put(ev)
	ev.uses++
	sch, err := s.schema(ev, key)
	if err != nil {
		return err
	}
	x, err := decodeJSON(data)
	if err != nil {
		return fmt.Errorf("%s: %w", key.part, err)
	}
	// Encoding a decoded Go value is about twice as fast as parsing the
	// JSON as CUE and five times faster than CompileBytes
	// (docs/BENCHMARKS.md); positions are not needed here.
	v := ev.ctx.Encode(x)
	paths := s.secret[key]
	if err := v.Err(); err != nil {
		msg := strings.TrimSpace(cueerrors.Details(err, nil))
		if len(paths) > 0 {
			msg = converge.Scrub(msg, converge.SecretValues(data, paths), converge.MinScrub)
		}
		return fmt.Errorf("%s: %s", key.part, msg)
	}
	errs := dropPending(check(sch, v), pending)
	if len(errs) == 0 {
		return nil
	}
	if len(paths) > 0 {
		redactErrs(errs, converge.SecretValues(data, paths), paths)
	}
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		msgs = append(msgs, joinPath(key.part, e.path)+": "+e.msg)
	}
	return errors.New(strings.Join(msgs, "; "))
}

// fieldError is one schema violation: the field path below the checked
// value, the message, and where in the data it is (if known).
type fieldError struct {
	path []string
	msg  string
	err  cueerrors.Error
}

// check unifies data with the schema sch and returns its violations,
// deduplicated and with the disjunction noise folded into one message per
// path, in CUE's order.
func check(sch, data cuelang.Value) []fieldError {
	err := sch.Unify(data).Validate(cuelang.Concrete(true), cuelang.Final())
	if err == nil {
		return nil
	}
	var out []fieldError
	seen := map[string]int{}
	for _, e := range cueerrors.Errors(err) {
		p := e.Path()
		if len(p) > 0 && p[0] == "#S" {
			p = p[1:]
		}
		format, args := e.Msg()
		msg := fmt.Sprintf(format, args...)
		key := strings.Join(p, "\x00")
		if i, ok := seen[key]; ok {
			// Fold the alternatives of an empty disjunction into one
			// message: `conflicting values "a" and "c"; "b" and "c"`.
			if strings.Contains(out[i].msg, "empty disjunction") {
				out[i].msg = strings.TrimSuffix(out[i].msg, ":")
				if !strings.Contains(out[i].msg, ": ") {
					out[i].msg += ": " + msg
				} else {
					out[i].msg += "; " + msg
				}
			}
			continue
		}
		if strings.HasPrefix(msg, "incomplete value") && !data.LookupPath(selectorPath(p)).Exists() {
			// A regular (not optional) schema field the data lacks.
			msg = "field is required but not present"
		}
		seen[key] = len(out)
		out = append(out, fieldError{path: p, msg: msg, err: e})
	}
	// CUE leaves out "field not allowed" for a struct that has other
	// errors. Check the data's shape alone (every scalar replaced by _) to
	// report unknown fields too.
	for _, e := range notAllowed(sch, data) {
		if _, ok := seen[strings.Join(e.path, "\x00")]; !ok {
			out = append(out, e)
		}
	}
	return out
}

// notAllowed returns the fields of data that sch's closed structs do not
// allow, judged on data's shape only.
func notAllowed(sch, data cuelang.Value) []fieldError {
	b, err := data.MarshalJSON()
	if err != nil {
		return nil
	}
	x, err := decodeJSON(b)
	if err != nil {
		return nil
	}
	// One-off context: combining values of different contexts is fine
	// (cue.Value.Context is deprecated).
	shape := cuecontext.New().BuildExpr(shapeOf(x))
	var out []fieldError
	for _, e := range cueerrors.Errors(sch.Unify(shape).Validate()) {
		format, args := e.Msg()
		if msg := fmt.Sprintf(format, args...); msg == "field not allowed" {
			p := e.Path()
			if len(p) > 0 && p[0] == "#S" {
				p = p[1:]
			}
			out = append(out, fieldError{path: p, msg: msg, err: e})
		}
	}
	return out
}

// shapeOf renders decoded JSON as a CUE expression with every scalar
// replaced by _ (top).
func shapeOf(x any) ast.Expr {
	switch t := x.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		st := &ast.StructLit{}
		for _, k := range keys {
			st.Elts = append(st.Elts, &ast.Field{Label: ast.NewString(k), Value: shapeOf(t[k])})
		}
		return st
	case []any:
		l := &ast.ListLit{}
		for _, v := range t {
			l.Elts = append(l.Elts, shapeOf(v))
		}
		return l
	}
	return ast.NewIdent("_")
}

// joinPath renders a CUE error path below root as a field path:
// spec.service_teams[3].name, spec.tags["a.b"].
func joinPath(root string, p []string) string {
	var b strings.Builder
	b.WriteString(root)
	for _, sel := range p {
		if _, err := strconv.Atoi(sel); err == nil {
			b.WriteString("[" + sel + "]")
			continue
		}
		if isIdent(sel) {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(sel)
			continue
		}
		if uq, err := strconv.Unquote(sel); err == nil {
			sel = uq
		}
		b.WriteString("[" + strconv.Quote(sel) + "]")
	}
	return b.String()
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_' || r == '#' || r == '$' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'):
		case i > 0 && r >= '0' && r <= '9':
		default:
			return false
		}
	}
	return true
}

// selectorPath turns a CUE error path into a cue.Path.
func selectorPath(p []string) cuelang.Path {
	sels := make([]cuelang.Selector, 0, len(p))
	for _, sel := range p {
		if n, err := strconv.Atoi(sel); err == nil {
			sels = append(sels, cuelang.Index(n))
			continue
		}
		if strings.HasPrefix(sel, "#") {
			sels = append(sels, cuelang.Def(sel))
			continue
		}
		if uq, err := strconv.Unquote(sel); err == nil {
			sel = uq
		}
		sels = append(sels, cuelang.Str(sel))
	}
	return cuelang.MakePath(sels...)
}

// decodeJSON decodes one JSON value for ctx.Encode, keeping integers
// integers (int64, or *big.Int beyond its range) so that CUE's int and
// float stay distinct exactly as when CUE parses the JSON itself.
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return nil, fmt.Errorf("decode json: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("decode json: data after the value")
	}
	return numbers(x), nil
}

// numbers replaces every json.Number in x by an int64, *big.Int or
// float64.
func numbers(x any) any {
	switch t := x.(type) {
	case map[string]any:
		for k, v := range t {
			t[k] = numbers(v)
		}
	case []any:
		for i, v := range t {
			t[i] = numbers(v)
		}
	case json.Number:
		s := string(t)
		if !strings.ContainsAny(s, ".eE") {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				return n
			}
			if n, ok := new(big.Int).SetString(s, 10); ok {
				return n
			}
		}
		f, _ := t.Float64()
		return f
	}
	return x
}
