package cue

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/literal"
	"cuelang.org/go/cue/token"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/proto/rawjson"
)

// Incremental composition in CUE (docs/ARCHITECTURE.md, "Incremental
// composition"): a compose expression in the parts shape composes each
// element of one list of the spec (its parts) independently of the
// others, so a compose task that carries a base spec of the same
// revision is answered with only what the changed elements make, as the
// SDK's Parts and ComposePart do for a worker.
//
// The parts shape, read from the expression's syntax at load:
//
//	children: [for x in spec.P {...}, for y in spec.P if ... {...}]
//	edges:    [for x in spec.P {...}]   (or no edges)
//
// children and edges are list literals whose every element is a
// comprehension whose first clause is a for over the same path spec.P
// (for x or for i, x); spec appears nowhere else in the expression (so
// no other field, hidden field, let or definition depends on it, and a
// comprehension's body sees the spec only through its loop variables);
// nothing refers to children or edges; the expression declares no
// field or let named spec (which spec.P would then read). Then the
// composition is the concatenation, element by element of spec.P, of
// what each element makes, and an element makes the same children and
// edges whenever its JSON (and, with for i, x, its index) is the same.
//
// A delta is answered only on the fast path, and only when nothing is
// unusual; anything else (a spec.P that is not a list, a fast path that
// falls back, an edge whose consumer is not a child of the same element)
// answers in full, which is always correct.

// partsShape is an expression's parts list.
type partsShape struct {
	path  []string                // P in spec.P
	index bool                    // some comprehension binds the element's index
	fors  map[*ast.ForClause]bool // the for clauses over spec.P
}

// partsShapeOf returns the parts shape of the expression st, or nil.
func partsShapeOf(st *ast.StructLit) *partsShape {
	shape := &partsShape{fors: map[*ast.ForClause]bool{}}
	var lists []*ast.ListLit
	for _, d := range st.Elts {
		if l, ok := d.(*ast.LetClause); ok && l.Ident.Name == "spec" {
			return nil // spec would be the let
		}
		f, ok := d.(*ast.Field)
		if !ok {
			continue
		}
		name, _, err := ast.LabelName(f.Label)
		if err != nil || name == "spec" {
			return nil // spec would be the field
		}
		if name != "children" && name != "edges" {
			continue
		}
		l, ok := unparen(f.Value).(*ast.ListLit)
		if !ok {
			return nil
		}
		lists = append(lists, l)
	}
	if len(lists) == 0 {
		return nil
	}
	for _, l := range lists {
		for _, el := range l.Elts {
			c, ok := el.(*ast.Comprehension)
			if !ok || c.Fallback != nil || len(c.Clauses) == 0 {
				return nil
			}
			fc, ok := c.Clauses[0].(*ast.ForClause)
			if !ok {
				return nil
			}
			p := specPathOf(fc.Source)
			if p == nil || shape.path != nil && !slices.Equal(p, shape.path) {
				return nil
			}
			shape.path = p
			shape.fors[fc] = true
			if fc.Key != nil {
				shape.index = true
			}
		}
	}
	if len(shape.fors) == 0 {
		return nil
	}
	// spec only as the parts' sources: one reference per for clause.
	if specRefs(st) != len(shape.fors) {
		return nil
	}
	return shape
}

// specPathOf returns P of x when x is spec.P (selectors of static
// labels), or nil.
func specPathOf(x ast.Expr) []string {
	var rev []string
	for {
		switch y := unparen(x).(type) {
		case *ast.SelectorExpr:
			name, ok := selName(y.Sel)
			if !ok {
				return nil
			}
			rev = append(rev, name)
			x = y.X
			continue
		case *ast.Ident:
			if y.Name != "spec" || len(rev) == 0 {
				return nil
			}
			slices.Reverse(rev)
			return rev
		}
		return nil
	}
}

func selName(l ast.Label) (string, bool) {
	switch l := l.(type) {
	case *ast.Ident:
		return l.Name, true
	case *ast.BasicLit:
		if l.Kind != token.STRING {
			return "", false
		}
		s, err := literal.Unquote(l.Value)
		return s, err == nil
	}
	return "", false
}

// specRefs counts the identifiers spec in x that are not a field's
// label or a selector's name (a loop variable or let named spec counts:
// the count only has to be conservative).
func specRefs(x ast.Node) int {
	n := 0
	var walk func(ast.Node)
	walk = func(x ast.Node) {
		ast.Walk(x, func(x ast.Node) bool {
			switch y := x.(type) {
			case *ast.Field:
				if _, ok := y.Label.(*ast.Ident); !ok {
					walk(y.Label) // a dynamic label: (x) or "\(x)"
				}
				walk(y.Value)
				return false
			case *ast.SelectorExpr:
				walk(y.X)
				return false
			case *ast.Ident:
				if y.Name == "spec" {
					n++
				}
			}
			return true
		}, nil)
	}
	walk(x)
	return n
}

// composeRevision identifies a compose expression: the same spec
// composed by the same revision yields the same composition. It covers
// the expression, its imports and the kind version, and
// composeCodeVersion, to be raised when a change of this package changes
// what an expression composes.
func composeRevision(k *converge.Kind) string {
	h := sha256.New()
	h.Write([]byte(composeCodeVersion + "\x00" + strconv.Itoa(k.Version) + "\x00"))
	for _, imp := range k.ComposeImports {
		h.Write([]byte(imp + "\x00"))
	}
	h.Write([]byte(k.Compose))
	return "cue-" + hex.EncodeToString(h.Sum(nil)[:12])
}

// 2: a full composition carries the revision only once every element's
// edges are checked (composeAll). 3: flows sorted by target then source;
// the fast subset narrowed where it differed from CUE (issue 23).
const composeCodeVersion = "3"

// rawParts returns the JSON of each element of the list at path in
// spec, as written (equal bytes are equal elements; equal elements
// written differently are merely composed again), or false. spec is cut
// without decoding, by converge's JSON layer (proto/rawjson), which scans
// what it cuts strictly: a BOM of a million children is a spec of
// megabytes, read twice per delta.
func rawParts(spec []byte, path []string) ([]json.RawMessage, bool) {
	v := spec
	for _, p := range path {
		var ok bool
		var err error
		if v, ok, err = rawjson.Field(v, p); err != nil || !ok {
			return nil, false
		}
	}
	out := []json.RawMessage{}
	if rawjson.Elements(v, func(el []byte) error {
		out = append(out, el[:len(el):len(el)])
		return nil
	}) != nil {
		return nil, false
	}
	return out, true
}

// partsSpec is a decoded spec for composing the selected elements of
// raw only: the list at path holds them decoded, nil elsewhere (the
// parts shape reads the spec only through that list, and runSel skips
// the elements not selected).
func partsSpec(raw []json.RawMessage, sel []bool, path []string) (any, bool) {
	l := make([]any, len(raw))
	for i, b := range raw {
		if !sel[i] {
			continue
		}
		x, err := decodeJSON(b)
		if err != nil {
			return nil, false
		}
		l[i] = x
	}
	var x any = l
	for i := len(path) - 1; i >= 0; i-- {
		x = map[string]any{path[i]: x}
	}
	return x, true
}

// partsDelta is a delta answer: the added and changed children with the
// edges they consume, and the removed children.
type partsDelta struct {
	children []converge.Child
	edges    []converge.Edge
	removed  []converge.ID
}

// delta composes the elements of the parts list that differ between the
// base spec and spec and returns what differs, or false when it cannot
// (the caller then answers in full).
func (c *fastComposer) delta(base, spec []byte) (*partsDelta, bool) {
	sh := c.parts
	if sh == nil {
		return nil, false
	}
	oldRaw, ok1 := rawParts(base, sh.path)
	newRaw, ok2 := rawParts(spec, sh.path)
	if !ok1 || !ok2 {
		return nil, false
	}
	// Which elements changed: with an index, the same JSON at the same
	// index is unchanged; without, an element is matched with an equal
	// one of the base anywhere (each at most once).
	oldSel := make([]bool, len(oldRaw))
	newSel := make([]bool, len(newRaw))
	if sh.index {
		for i := range newRaw {
			newSel[i] = i >= len(oldRaw) || !bytes.Equal(oldRaw[i], newRaw[i])
		}
		for i := range oldRaw {
			oldSel[i] = i >= len(newRaw) || !bytes.Equal(oldRaw[i], newRaw[i])
		}
	} else {
		free := make(map[string][]int, len(oldRaw))
		for i, b := range oldRaw {
			free[string(b)] = append(free[string(b)], i)
			oldSel[i] = true
		}
		for i, b := range newRaw {
			if js := free[string(b)]; len(js) > 0 {
				oldSel[js[0]] = false
				free[string(b)] = js[1:]
				continue
			}
			newSel[i] = true
		}
	}
	d := &partsDelta{}
	if !slices.Contains(oldSel, true) && !slices.Contains(newSel, true) {
		return d, true
	}
	oldX, ok1 := partsSpec(oldRaw, oldSel, sh.path)
	newX, ok2 := partsSpec(newRaw, newSel, sh.path)
	if !ok1 || !ok2 {
		return nil, false
	}
	before, beforeEdges, ok := c.composeParts(oldX, oldSel)
	if !ok {
		return nil, false
	}
	after, afterEdges, ok := c.composeParts(newX, newSel)
	if !ok {
		return nil, false
	}
	oldChild := make(map[converge.ID]*converge.Child, len(before))
	for i := range before {
		ch := &before[i]
		oldChild[converge.NewID(ch.Kind, ch.Name)] = ch
	}
	oldEdges, newEdges := converge.EdgesByConsumer(beforeEdges), converge.EdgesByConsumer(afterEdges)
	sent := make(map[converge.ID]bool, len(after))
	for _, ch := range after {
		id := converge.NewID(ch.Kind, ch.Name)
		sent[id] = true
		o := oldChild[id]
		if o != nil && o.KindVersion == ch.KindVersion && bytes.Equal(o.Spec, ch.Spec) &&
			o.ProviderConfigRef == ch.ProviderConfigRef && converge.SameEdges(oldEdges[id], newEdges[id]) {
			continue
		}
		ch.Added = o == nil
		d.children = append(d.children, ch)
		d.edges = append(d.edges, newEdges[id]...)
	}
	for _, ch := range before {
		if id := converge.NewID(ch.Kind, ch.Name); !sent[id] {
			d.removed = append(d.removed, id)
		}
	}
	return d, true
}

// composeAll composes the decoded spec x whole, like run, and checks that
// every edge's consumer is a child of the element that made the edge (as
// composeParts does); false when it cannot or the check fails.
func (c *fastComposer) composeAll(x any) ([]converge.Child, []converge.Edge, bool) {
	l, ok := x, true
	for _, k := range c.parts.path {
		var m map[string]any
		if m, ok = l.(map[string]any); !ok {
			return nil, nil, false
		}
		l = m[k]
	}
	list, ok := l.([]any)
	if !ok {
		return nil, nil, false
	}
	sel := make([]bool, len(list))
	for i := range sel {
		sel[i] = true
	}
	if len(sel) == 0 {
		// composeParts composes nothing for no element: run decides.
		ch, ed, err := c.run(x)
		return ch, ed, err == nil && len(ch) == 0 && len(ed) == 0
	}
	return c.composeParts(x, sel)
}

// composeParts composes the selected elements of the parts list of the
// decoded spec x and checks that every edge's consumer is a child of
// the element that made the edge.
func (c *fastComposer) composeParts(x any, sel []bool) ([]converge.Child, []converge.Edge, bool) {
	if !slices.Contains(sel, true) {
		return nil, nil, true
	}
	ch, ed, chPart, edPart, err := c.runSel(x, sel)
	if err != nil || len(chPart) != len(ch) || len(edPart) != len(ed) {
		return nil, nil, false
	}
	of := make(map[converge.ID]int, len(ch))
	for i := range ch {
		if chPart[i] < 0 {
			return nil, nil, false
		}
		id := converge.NewID(ch[i].Kind, ch[i].Name)
		if _, dup := of[id]; dup {
			return nil, nil, false // a full compose words the error
		}
		of[id] = chPart[i]
	}
	for i, e := range ed {
		if p, ok := of[e.Consumer]; !ok || p != edPart[i] || edPart[i] < 0 {
			return nil, nil, false
		}
	}
	return ch, ed, true
}
