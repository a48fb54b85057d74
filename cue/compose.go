package cue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	cuelang "cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"

	"github.com/convergehq/converge"
)

// composeShape is what a kind's compose expression must yield: children
// (kind_version defaults to 1) and edges between them or to other
// resources, each edge's flows written as depends_on's
// ({"status.FROM": "spec.TO"}); either list may hold lists of them
// (flattened one level, see composed). It is one line.
const composeShape = `{#C: {kind: string, kind_version: int | *1, name: string, spec: {...}, provider_config_ref?: string}, #E: {consumer: string, producer: string, flows?: [string]: string}, children: [...(#C | [...#C])], edges: [...(#E | [...#E])]}`

// composeFile is the CUE file k's compose expression is evaluated in:
// spec is filled with the composer's spec (or, at load, its schema). The
// expression starts on line len(k.ComposeImports)+3.
//
// With shape, out is also unified with composeShape: load checks the
// expression against it; a compose does not (a disjunction default on
// each of a million children costs more than the evaluation itself), and
// decodes the JSON into the same shape instead.
func composeFile(k *converge.Kind, shape bool) string {
	var b strings.Builder
	for _, imp := range k.ComposeImports {
		b.WriteString("import " + imp + "\n")
	}
	if shape {
		b.WriteString("spec: _\nout: " + composeShape + " & (\n" + k.Compose + ")\n")
	} else {
		b.WriteString("spec: _\nout: (\n" + k.Compose + ")\n")
	}
	return b.String()
}

// composeFileWith is composeFile (without the shape) with spec bound to
// text, one line of JSON: the expression's lines do not move.
func composeFileWith(k *converge.Kind, text string) string {
	var b strings.Builder
	for _, imp := range k.ComposeImports {
		b.WriteString("import " + imp + "\n")
	}
	b.WriteString("spec: " + text + "\nout: (\n" + k.Compose + ")\n")
	return b.String()
}

var (
	specPath = cuelang.MakePath(cuelang.Str("spec"))
	outPath  = cuelang.MakePath(cuelang.Str("out"))
)

// composeAt is where a compose expression starts in the repository.
type composeAt struct {
	file      string
	line, col int
	// first is the line of the compiled compose file where the
	// expression starts.
	first int
}

// atOf returns where k's compose expression is.
func atOf(k *converge.Kind) composeAt {
	at := parseComposeAt(k.ComposeAt)
	at.first = len(k.ComposeImports) + 3
	return at
}

func parseComposeAt(s string) composeAt {
	var at composeAt
	parts := strings.Split(s, ":")
	if len(parts) >= 3 {
		at.file = strings.Join(parts[:len(parts)-2], ":")
		at.line, _ = strconv.Atoi(parts[len(parts)-2])
		at.col, _ = strconv.Atoi(parts[len(parts)-1])
	}
	return at
}

func (a composeAt) String() string { return fmt.Sprintf("%s:%d:%d", a.file, a.line, a.col) }

// pos maps a position in the compiled compose file to the repository:
// file:line:col.
func (a composeAt) pos(p token.Pos) (line, col int) {
	if !p.IsValid() || p.Line() < a.first {
		return a.line, a.col
	}
	l := p.Line() - a.first
	if l == 0 {
		return a.line, a.col + p.Column() - 1
	}
	return a.line + l, p.Column()
}

// composeErr words a CUE error of a compose expression: each message
// with its position in the repository.
func (a composeAt) composeErr(err error) string {
	var msgs []string
	seen := map[string]bool{}
	for _, e := range cueerrors.Errors(err) {
		format, args := e.Msg()
		msg := fmt.Sprintf(format, args...)
		path := e.Path()
		if len(path) > 0 && path[0] == "out" {
			path = path[1:]
		}
		if len(path) > 0 {
			msg = joinPath("", path) + ": " + msg
		}
		where := a.String()
		for _, p := range cueerrors.Positions(e) {
			if p.Filename() == "compose" && p.Line() >= a.first {
				l, c := a.pos(p)
				where = fmt.Sprintf("%s:%d:%d", a.file, l, c)
				break
			}
		}
		m := where + ": " + msg
		if !seen[m] {
			seen[m] = true
			msgs = append(msgs, m)
		}
	}
	if len(msgs) == 0 {
		return a.String() + ": " + err.Error()
	}
	return strings.Join(msgs, "; ")
}

// Composes reports whether ref's kind composes in CUE (Kind.Compose): its
// compose and teardown reactions are Compose's, no worker's.
func (s *Schemas) Composes(ref converge.KindRef) bool {
	if s == nil {
		return false
	}
	k := s.kinds[ref]
	return k != nil && k.Compose != ""
}

// Compose runs t, a compose or teardown task of a kind that composes in
// CUE: a teardown has nothing to do; a compose evaluates the kind's
// expression with t's spec (an expression in the parts shape, given a
// base spec of its revision, answers a delta: composeparts.go). A
// failure is a permanent result naming the kind file:line:col. It is
// safe for concurrent use; each call evaluates in a context of its own,
// dropped after (a big composition's values are not kept).
func (s *Schemas) Compose(t *converge.Task) *converge.Result {
	res := &converge.Result{TaskID: t.ID, Outcome: converge.OutcomeOK}
	if t.Reaction == converge.ReactionTeardown {
		return res
	}
	c := s.composers[t.Ref()]
	if c.fc != nil && c.fc.parts != nil {
		// The parts shape: a base of this revision may be answered with
		// a delta, which checks the elements it composes.
		if t.BaseSpec != nil && t.BaseRevision == c.rev {
			if d, ok := c.fc.delta(t.BaseSpec, specOrEmpty(t.Spec)); ok {
				s.composeStats.delta.Add(1)
				res.Revision = c.rev
				res.Delta, res.Children, res.Edges, res.Removed = true, d.children, d.edges, d.removed
				return res
			}
		}
		// A full answer carries the revision (so the next compose may
		// be a delta against it) only once every element is checked:
		// a delta composes only the changed elements, so an edge that
		// an unchanged element makes into a changed one's child would
		// be lost.
		if x, err := decodeJSON(specOrEmpty(t.Spec)); err == nil {
			if ch, ed, ok := c.fc.composeAll(x); ok {
				s.composeStats.fast.Add(1)
				res.Revision, res.Children, res.Edges = c.rev, ch, ed
				return res
			}
		}
	}
	ch, ed, err := s.compose(t.Ref(), t.Spec)
	if err != nil {
		res.Outcome, res.Message = converge.OutcomePermanent, err.Error()
		return res
	}
	res.Children, res.Edges = ch, ed
	return res
}

// composed is the JSON of a compose expression's value. Children and
// edges may each be a list of items or of lists of items (flattened one
// level): CUE inserts a list's elements one by one, each after a scan of
// those before, so one list of a hundred thousand children costs
// quadratic time where lists of a few hundred (one per BOM domain) do not.
type composed struct {
	Children flat[converge.Child] `json:"children"`
	Edges    flat[composedEdge]   `json:"edges"`
}

type composedEdge struct {
	Consumer converge.ID       `json:"consumer"`
	Producer converge.ID       `json:"producer"`
	Flows    map[string]string `json:"flows"`
}

// flat is a JSON list of T or of lists of T, read as one list.
type flat[T any] []T

func (f *flat[T]) UnmarshalJSON(b []byte) error {
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		return err
	}
	out := make([]T, 0, len(items))
	for _, it := range items {
		if len(it) > 0 && it[0] == '[' {
			var inner []T
			if err := json.Unmarshal(it, &inner); err != nil {
				return err
			}
			out = append(out, inner...)
			continue
		}
		var x T
		if err := json.Unmarshal(it, &x); err != nil {
			return err
		}
		out = append(out, x)
	}
	*f = out
	return nil
}

func (s *Schemas) compose(ref converge.KindRef, spec json.RawMessage) ([]converge.Child, []converge.Edge, error) {
	k := s.kinds[ref]
	if k == nil || k.Compose == "" {
		return nil, nil, fmt.Errorf("%w %s with a compose expression", ErrUnknownKind, ref)
	}
	x, err := decodeJSON(specOrEmpty(spec))
	if err != nil {
		return nil, nil, fmt.Errorf("spec: %w", err)
	}
	if fc := s.composers[ref].fc; fc != nil {
		// The fast path: CUE's result, or none (then CUE composes).
		if ch, ed, err := fc.run(x); err == nil {
			s.composeStats.fast.Add(1)
			return ch, ed, nil
		}
		s.composeStats.fellBack.Add(1)
	}
	s.composeStats.cue.Add(1)
	return s.composeCUE(k, spec)
}

// specOrEmpty is spec, or {} when it is empty.
func specOrEmpty(spec json.RawMessage) json.RawMessage {
	if len(spec) == 0 {
		return json.RawMessage("{}")
	}
	return spec
}

// ComposeStats counts compositions by the path that made them.
type ComposeStats struct {
	// Fast compositions were made on the fast path (fastcompose.go).
	Fast uint64 `json:"fast"`
	// CUE compositions were made by CUE's evaluator; FellBack of them
	// had started on the fast path, which could not decide their spec.
	CUE      uint64 `json:"cue"`
	FellBack uint64 `json:"fell_back"`
	// Delta compositions were answered as a delta against the task's
	// base spec (composeparts.go), on the fast path; they are not
	// counted in Fast.
	Delta uint64 `json:"delta"`
}

// composeCounters are ComposeStats' counters.
type composeCounters struct{ fast, cue, fellBack, delta atomic.Uint64 }

// ComposeStats returns how many compositions (dry runs at load
// included) each path made so far.
func (s *Schemas) ComposeStats() ComposeStats {
	if s == nil {
		return ComposeStats{}
	}
	return ComposeStats{Fast: s.composeStats.fast.Load(), CUE: s.composeStats.cue.Load(), FellBack: s.composeStats.fellBack.Load(),
		Delta: s.composeStats.delta.Load()}
}

// fastComposeOf is a kind's fast composer, or why it has none.
type fastComposeOf struct {
	fc  *fastComposer
	err error
	rev string // composeRevision, when fc has the parts shape
}

// ComposePath tells how ref's compose expression is evaluated: fast is
// true when it is in the fast subset (fastcompose.go: compiled to Go,
// CUE only for a spec the fast path cannot decide); otherwise why names
// the first construct outside it. ok is false when ref does not compose
// in CUE.
func (s *Schemas) ComposePath(ref converge.KindRef) (fast bool, why string, ok bool) {
	if s == nil {
		return false, "", false
	}
	k := s.kinds[ref]
	if k == nil || k.Compose == "" {
		return false, "", false
	}
	c := s.composers[ref]
	if c.fc != nil {
		return true, "", true
	}
	if c.err != nil {
		why = c.err.Error()
	}
	return false, why, true
}

// ComposeDeltas reports whether ref's compose expression is in the parts
// shape (composeparts.go): a recompose then composes only the changed
// elements and answers a delta.
func (s *Schemas) ComposeDeltas(ref converge.KindRef) bool {
	if s == nil {
		return false
	}
	c := s.composers[ref]
	return c.fc != nil && c.fc.parts != nil
}

// composeCUE evaluates k's compose expression with spec, a JSON value,
// through CUE. The spec is compiled from its JSON text, as CUE reads a
// JSON file (a value filled in with Encode loses the fields of a struct
// embedded in a comprehension's body), canonicalised first as the fast
// path reads it: decoded by encoding/json (of duplicate keys the last
// wins), its objects' keys sorted, its numbers as written.
func (s *Schemas) composeCUE(k *converge.Kind, spec json.RawMessage) ([]converge.Child, []converge.Edge, error) {
	at := atOf(k)
	text, err := canonicalJSON(specOrEmpty(spec))
	if err != nil {
		return nil, nil, fmt.Errorf("spec: %w", err)
	}
	ctx := s.newEvaluator().ctx
	f := ctx.CompileString(composeFileWith(k, text), cuelang.Filename("compose"))
	if err := f.Err(); err != nil {
		return nil, nil, errors.New(at.composeErr(err))
	}
	out := f.LookupPath(outPath)
	b, err := out.MarshalJSON()
	if err != nil {
		return nil, nil, errors.New(at.composeErr(err))
	}
	var c composed
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, nil, fmt.Errorf("%s: decode composition: %w", at, err)
	}
	for i := range c.Children {
		if c.Children[i].KindVersion == 0 {
			c.Children[i].KindVersion = 1 // composeShape's default
		}
	}
	edges := make([]converge.Edge, len(c.Edges))
	for i, e := range c.Edges {
		edges[i] = converge.Edge{Consumer: e.Consumer, Producer: e.Producer, Flows: flowsOf(e.Flows)}
	}
	return c.Children, edges, nil
}

// flowsOf turns {"status.FROM": "spec.TO"} into value flows, sorted by
// To and then From (the prefixes may be left out): one order on both
// paths, whatever the map's (converge.SameEdges compares flows in order).
func flowsOf(m map[string]string) []converge.ValueFlow {
	if len(m) == 0 {
		return nil
	}
	out := make([]converge.ValueFlow, 0, len(m))
	for from, to := range m {
		out = append(out, converge.ValueFlow{From: strings.TrimPrefix(from, "status."), To: strings.TrimPrefix(to, "spec.")})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].To != out[j].To {
			return out[i].To < out[j].To
		}
		return out[i].From < out[j].From
	})
	return out
}

// canonicalJSON is spec's JSON value as one line of JSON text: decoded
// by encoding/json (the last of duplicate keys wins), each object's keys
// sorted, numbers as written. It is the spec both paths compose: the
// fast path decodes the same way (decodeJSON) and iterates an object's
// keys sorted.
func canonicalJSON(spec json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(spec))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return "", fmt.Errorf("decode json: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", errors.New("decode json: data after the value")
	}
	b, err := json.Marshal(x)
	if err != nil {
		return "", fmt.Errorf("encode json: %w", err)
	}
	return string(b), nil
}

// composeSrc is a kind's compose expression as the loader read it.
type composeSrc struct {
	ref  converge.KindRef
	expr ast.Expr
	at   composeAt
	doc  *document
}

// composeOf reads a kind document's compose: a CUE expression over spec
// (or, in any format, a string of CUE source). The kind then composes in
// the control plane: compose (and teardown, with a finalizer) need no
// worker; the compose reaction is implied.
func (l *loader) composeOf(d *document, r *reader, k *converge.Kind) {
	v, ok := r.lookup("compose")
	if !ok {
		return
	}
	var src string
	var pos token.Pos
	if v.Kind() == cuelang.StringKind {
		s, _ := v.String()
		src, pos = s, v.Pos()
		if lit, ok := v.Source().(*ast.BasicLit); ok && strings.HasPrefix(lit.Value, `"""`) {
			// The text starts on the line after the opening quotes.
			src = s
			line, _ := l.lineCol(d.file, pos)
			k.ComposeAt = fmt.Sprintf("%s:%d:%d", d.file, line+1, 1)
		}
	} else {
		n := v.Source()
		if f, ok := n.(*ast.Field); ok {
			n = f.Value
		}
		if n == nil || !n.Pos().IsValid() || !n.End().IsValid() {
			r.fail("compose", "COMPOSE_INVALID", "want a CUE expression over spec, or a string of CUE source")
			return
		}
		text := l.src[d.file]
		start, end := n.Pos().Offset(), n.End().Offset()
		if start < 0 || end > len(text) || start >= end {
			r.fail("compose", "COMPOSE_INVALID", "cannot read the compose expression's source")
			return
		}
		src, pos = string(text[start:end]), n.Pos()
		// The imports of the kind's file, for the expression to use.
		if f, err := parser.ParseFile(d.file, text, parser.ImportsOnly); err == nil {
			for imp := range f.ImportSpecs() {
				if b, end := imp.Pos().Offset(), imp.End().Offset(); b >= 0 && end <= len(text) && b < end {
					k.ComposeImports = append(k.ComposeImports, string(text[b:end]))
				}
			}
		}
	}
	if k.ComposeAt == "" {
		line, col := l.lineCol(d.file, pos)
		k.ComposeAt = fmt.Sprintf("%s:%d:%d", d.file, line, col)
	}
	at := atOf(k)
	at.first = 1
	expr, err := parser.ParseExpr("compose", src)
	if err != nil {
		r.ok = false
		l.composeFinding(at, err, "COMPOSE_INVALID")
		return
	}
	k.Compose = src
	if !k.Has(converge.ReactionCompose) {
		k.Reactions = append(k.Reactions, converge.ReactionCompose)
	}
	l.composers = append(l.composers, &composeSrc{ref: k.Ref(), expr: expr, at: at, doc: d})
}

// composeFinding records err (of a compose expression at at) as findings
// at their places in the repository.
func (l *loader) composeFinding(at composeAt, err error, rule string) {
	for _, m := range strings.Split(at.composeErr(err), "; ") {
		l.findingAt(at, m, rule)
	}
}

// findingAt records msg, "file:line:col: message", as a finding.
func (l *loader) findingAt(at composeAt, msg, rule string) {
	f := converge.Finding{File: at.file, Line: at.line, Column: at.col, Path: "compose", Rule: rule, Message: msg}
	if p := strings.SplitN(msg, ": ", 2); len(p) == 2 {
		where := parseComposeAt(p[0])
		if where.file == at.file && where.line > 0 {
			f.Line, f.Column, f.Message = where.line, where.col, p[1]
		}
	}
	l.res.Findings = append(l.res.Findings, f)
}

// checkComposers checks every compose expression once all kinds and
// resources are read, so a mistake fails validate (and lint), never only
// a sync: the expression against its kind's spec schema (a reference to
// a field the schema does not have), every literal child kind (one no
// kind document declares), and a dry run on every resource of the kind
// the revision declares (an unknown kind version, an invalid child, an
// edge that names no child).
func (l *loader) checkComposers() {
	bad := map[converge.KindRef]bool{}
	for _, c := range l.composers {
		k := l.schemas.kinds[c.ref]
		if k == nil {
			continue // the kind's schemas did not compile
		}
		// Literal child kinds.
		ast.Walk(c.expr, func(n ast.Node) bool {
			f, ok := n.(*ast.Field)
			if !ok {
				return true
			}
			if name, _, err := ast.LabelName(f.Label); err != nil || name != "kind" {
				return true
			}
			lit, ok := f.Value.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			kind, err := strconv.Unquote(lit.Value)
			if err != nil || l.kindExists(kind) {
				return true
			}
			line, col := c.at.line, c.at.col
			if p := lit.Pos(); p.IsValid() {
				if p.Line() == 1 {
					line, col = c.at.line, c.at.col+p.Column()-1
				} else {
					line, col = c.at.line+p.Line()-1, p.Column()
				}
			}
			l.res.Findings = append(l.res.Findings, converge.Finding{File: c.at.file, Line: line, Column: col, Path: "compose",
				Rule: "COMPOSE_KIND_UNKNOWN", Message: fmt.Sprintf("emits unknown kind %q", kind)})
			return true
		}, nil)
		// The expression against the spec schema.
		sch, err := l.schemas.schema(l.ev, schemaKey{c.ref, "spec"})
		if err != nil {
			continue
		}
		fa := atOf(k) // positions in the compiled compose file
		f := l.ev.ctx.CompileString(composeFile(k, true), cuelang.Filename("compose"))
		if err := f.Err(); err != nil {
			l.composeFinding(fa, err, "COMPOSE_INVALID")
			bad[c.ref] = true
			continue
		}
		out := f.FillPath(specPath, sch).LookupPath(outPath)
		if err := out.Validate(); err != nil {
			l.composeFinding(fa, err, "COMPOSE_INVALID")
			bad[c.ref] = true
		}
	}
	l.dryRunComposers(bad)
}

// dryRunComposers composes every declared resource of a kind that
// composes in CUE (but those in bad, already found wrong) and checks the
// children as the scheduler would.
func (l *loader) dryRunComposers(bad map[converge.KindRef]bool) {
	if len(l.composers) == 0 {
		return
	}
	at := map[converge.KindRef]composeAt{}
	for _, c := range l.composers {
		at[c.ref] = c.at
	}
	for _, r := range l.res.Desired.Resources {
		a, ok := at[r.Ref()]
		if !ok || bad[r.Ref()] || !l.schemas.Composes(r.Ref()) {
			continue
		}
		who := fmt.Sprintf("composing %s (%s)", r.ID(), r.Source)
		children, edges, err := l.schemas.compose(r.Ref(), r.Declared)
		if err != nil {
			for _, m := range strings.Split(err.Error(), "; ") {
				l.findingAt(a, m+" ("+who+")", "COMPOSE_FAILED")
			}
			continue
		}
		for _, m := range l.checkComposed(r.ID(), children, edges) {
			l.findingAt(a, fmt.Sprintf("%s: %s (%s)", a, m, who), "COMPOSE_CHILD_INVALID")
		}
		if l.opts.CompareCompose && l.compared < compareComposeTotal {
			diff, n := l.schemas.compareComposePaths(r.Ref(), r.Declared)
			l.compared += n
			if diff != "" {
				l.findingAt(a, fmt.Sprintf("%s: the fast path composes differently from CUE's evaluator: %s (%s); a bug of converge's fast path: please report it", a, diff, who), RuleComposeDiffers)
			}
		}
	}
}

// RuleComposeDiffers is the rule of a finding that says the fast path
// (fastcompose.go) composes a declared resource otherwise than CUE's
// evaluator does (Options.CompareCompose).
const RuleComposeDiffers = "COMPOSE_FAST_DIFFERS"

// compareComposeMax bounds the children of a composition that
// compareComposePaths composes through CUE's evaluator, and
// compareComposeTotal those of one load (~65 µs a child): the resources
// after are not compared.
const (
	compareComposeMax   = 2000
	compareComposeTotal = 20000
)

// compareComposePaths composes spec with ref's expression on the fast
// path and through CUE's evaluator and returns their first difference,
// or "" when they agree or the fast path leaves the spec to CUE, and the
// number of children CUE composed. A fast composition of more than
// compareComposeMax children is compared on a sample: in the parts shape
// (composeparts.go), the spec with its parts list cut to as many first
// elements as make about compareComposeMax children; otherwise it is not
// compared.
func (s *Schemas) compareComposePaths(ref converge.KindRef, spec json.RawMessage) (diff string, composed int) {
	k, fc := s.kinds[ref], s.composers[ref].fc
	if k == nil || fc == nil {
		return "", 0
	}
	spec = specOrEmpty(spec)
	x, err := decodeJSON(spec)
	if err != nil {
		return "", 0
	}
	fch, fed, err := fc.run(x)
	if err != nil {
		return "", 0 // CUE composes it: nothing to compare
	}
	if len(fch) > compareComposeMax {
		if fc.parts == nil {
			return "", 0
		}
		if spec = sampleParts(spec, fc.parts.path, float64(compareComposeMax)/float64(len(fch))); spec == nil {
			return "", 0
		}
		x, _ = decodeJSON(spec)
		if fch, fed, err = fc.run(x); err != nil {
			return "", 0
		}
	}
	cch, ced, err := s.composeCUE(k, spec)
	if err != nil {
		return fmt.Sprintf("%d children where CUE fails: %v", len(fch), err), len(fch)
	}
	return compositionDiff(fch, fed, cch, ced), len(fch)
}

// sampleParts returns spec with the list at path cut to its first
// elements, a share frac of them (one at least), or nil when there is no
// list there.
func sampleParts(spec json.RawMessage, path []string, frac float64) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(spec))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return nil
	}
	m, ok := root.(map[string]any)
	for i, p := range path {
		if !ok {
			return nil
		}
		if i == len(path)-1 {
			l, isList := m[p].([]any)
			if !isList {
				return nil
			}
			m[p] = l[:max(1, min(len(l), int(float64(len(l))*frac)))]
			break
		}
		m, ok = m[p].(map[string]any)
	}
	b, err := json.Marshal(root)
	if err != nil {
		return nil
	}
	return b
}

// specText is a child's spec as JSON, or "none".
func specText(spec json.RawMessage) string {
	if spec == nil {
		return "none"
	}
	return string(spec)
}

// compositionDiff describes the first difference between a fast
// composition and CUE's, or returns "" when they are the same.
func compositionDiff(fch []converge.Child, fed []converge.Edge, cch []converge.Child, ced []converge.Edge) string {
	for i := range max(len(fch), len(cch)) {
		switch {
		case i >= len(fch):
			return fmt.Sprintf("child %d (%s/%s) only through CUE", i, cch[i].Kind, cch[i].Name)
		case i >= len(cch):
			return fmt.Sprintf("child %d (%s/%s) only on the fast path", i, fch[i].Kind, fch[i].Name)
		}
		f, c := fch[i], cch[i]
		if f.Kind != c.Kind || f.Name != c.Name || f.KindVersion != c.KindVersion || f.ProviderConfigRef != c.ProviderConfigRef || !bytes.Equal(f.Spec, c.Spec) {
			return fmt.Sprintf("child %d: %s/%s v%d spec %s on the fast path, %s/%s v%d spec %s through CUE", i,
				f.Kind, f.Name, f.KindVersion, specText(f.Spec), c.Kind, c.Name, c.KindVersion, specText(c.Spec))
		}
	}
	for i := range max(len(fed), len(ced)) {
		switch {
		case i >= len(fed):
			return fmt.Sprintf("edge %d (%s -> %s) only through CUE", i, ced[i].Consumer, ced[i].Producer)
		case i >= len(ced):
			return fmt.Sprintf("edge %d (%s -> %s) only on the fast path", i, fed[i].Consumer, fed[i].Producer)
		}
		if f, c := fed[i], ced[i]; f.Consumer != c.Consumer || f.Producer != c.Producer || fmt.Sprint(f.Flows) != fmt.Sprint(c.Flows) {
			return fmt.Sprintf("edge %d: %s -> %s %v on the fast path, %s -> %s %v through CUE", i,
				f.Consumer, f.Producer, f.Flows, c.Consumer, c.Producer, c.Flows)
		}
	}
	return ""
}

// checkComposed checks a composition as the scheduler will; it returns at
// most 10 problems.
func (l *loader) checkComposed(owner converge.ID, children []converge.Child, edges []converge.Edge) []string {
	var out []string
	add := func(format string, args ...any) bool {
		out = append(out, fmt.Sprintf(format, args...))
		return len(out) < 10
	}
	pending := map[converge.ID][]string{}
	for _, e := range edges {
		for _, f := range e.Flows {
			pending[e.Consumer] = append(pending[e.Consumer], f.To)
		}
	}
	seen := make(map[converge.ID]bool, len(children))
	for _, c := range children {
		id := converge.NewID(c.Kind, c.Name)
		switch {
		case !ValidName(c.Name):
			if !add("child %s: name %q is not a DNS label", id, c.Name) {
				return out
			}
			continue
		case seen[id]:
			if !add("child %s: emitted twice", id) {
				return out
			}
			continue
		case id == owner:
			if !add("child %s: a composer cannot emit itself", id) {
				return out
			}
			continue
		}
		seen[id] = true
		ref := converge.KindRef{Kind: c.Kind, Version: c.KindVersion}
		if _, ok := l.schemas.kinds[ref]; !ok {
			if !add("child %s: unknown kind %s", id, ref) {
				return out
			}
			continue
		}
		if err := l.schemas.ValidateSpecPending(ref, c.Spec, pending[id]); err != nil {
			if !add("child %s: %v", id, err) {
				return out
			}
		}
	}
	for _, e := range edges {
		if !seen[e.Consumer] {
			if !add("edge %s -> %s: the consumer is not a child", e.Consumer, e.Producer) {
				return out
			}
		}
	}
	return out
}
