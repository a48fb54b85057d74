package cue

import (
	"fmt"
	"sort"
	"strings"

	cuelang "cuelang.org/go/cue"

	"github.com/convergehq/converge"
)

// gitDep is one depends_on entry of a resource document, read but not
// yet checked against the other resources (checkDepends).
type gitDep struct {
	edge converge.Edge
	at   place  // the entry's resource field
	path string // "depends_on[i].resource"
}

// dependsOn reads a resource document's depends_on: a list of
// {resource: "KIND/NAME", flows?: {"status.FROM": "spec.TO"}}. The
// status. and spec. prefixes may be left out. It returns the flowed
// spec paths (the fields the document may leave out: known after apply)
// and records the edges for checkDepends; false if the list is invalid
// (findings recorded).
func (l *loader) dependsOn(d *document, r *reader, consumer converge.ID) ([]string, bool) {
	v, ok := r.lookup("depends_on")
	if !ok {
		return nil, true
	}
	it, err := v.List()
	if err != nil {
		r.fail("depends_on", "DEPENDS_ON_INVALID", `want a list of {resource: "KIND/NAME", flows: {"status.FROM": "spec.TO"}}`)
		return nil, false
	}
	var pending []string
	var deps []gitDep
	seen := map[converge.ID]bool{}
	valid := true
	for i := 0; it.Next(); i++ {
		e := it.Value()
		path := fmt.Sprintf("depends_on[%d]", i)
		bad := func(at cuelang.Value, field, format string, args ...any) {
			valid = false
			l.addf(d.file, posOf(at, posOf(e, d.pos)), path+field, "DEPENDS_ON_INVALID", format, args...)
		}
		fields, err := e.Fields()
		if err != nil {
			bad(e, "", `want {resource: "KIND/NAME", flows: {"status.FROM": "spec.TO"}}`)
			continue
		}
		var prod converge.ID
		var flows []converge.ValueFlow
		resV := e.LookupPath(cuelang.MakePath(cuelang.Str("resource")))
		for fields.Next() {
			switch sel := fields.Selector().String(); sel {
			case "resource":
				s, err := fields.Value().String()
				if err != nil {
					bad(fields.Value(), ".resource", "want a string KIND/NAME")
					continue
				}
				id, err := converge.ParseID(s)
				if err != nil {
					bad(fields.Value(), ".resource", "%q: want KIND/NAME", s)
					continue
				}
				prod = id
			case "flows":
				fl, err := fields.Value().Fields()
				if err != nil {
					bad(fields.Value(), ".flows", `want {"status.FROM": "spec.TO"}`)
					continue
				}
				for fl.Next() {
					from := strings.TrimPrefix(fl.Selector().Unquoted(), "status.")
					to, err := fl.Value().String()
					if err != nil {
						bad(fl.Value(), ".flows", "want a string spec path, have %v", fl.Value())
						continue
					}
					to = strings.TrimPrefix(to, "spec.")
					if !flowPath(from) || !flowPath(to) {
						bad(fl.Value(), ".flows", "%q: %q: want dotted field paths (status.a.b: spec.c)", fl.Selector().Unquoted(), to)
						continue
					}
					flows = append(flows, converge.ValueFlow{From: from, To: to})
				}
			default:
				bad(fields.Value(), "."+sel, "field not allowed in a depends_on entry (want resource, flows)")
			}
		}
		if prod == "" {
			if !resV.Exists() {
				bad(e, ".resource", "field is required but not present")
			}
			continue
		}
		if prod == consumer {
			bad(resV, ".resource", "a resource cannot depend on itself")
			continue
		}
		if seen[prod] {
			bad(resV, ".resource", "%s is listed twice", prod)
			continue
		}
		seen[prod] = true
		sort.Slice(flows, func(i, j int) bool { return flows[i].To < flows[j].To })
		for _, f := range flows {
			pending = append(pending, f.To)
		}
		deps = append(deps, gitDep{edge: converge.Edge{Consumer: consumer, Producer: prod, Flows: flows},
			at: l.at(d.file, posOf(resV, d.pos)), path: path + ".resource"})
	}
	if !valid {
		r.ok = false
		return nil, false
	}
	l.deps = append(l.deps, deps...)
	return pending, true
}

// flowPath reports whether p is a dotted path of non-empty field names.
func flowPath(p string) bool {
	if p == "" {
		return false
	}
	for _, s := range strings.Split(p, ".") {
		if s == "" {
			return false
		}
	}
	return true
}

// checkDepends checks the depends_on edges of the valid resources once
// all are read: a producer that no resource document declares is
// DEPENDS_ON_UNKNOWN, edges that form a cycle are DEPENDS_ON_CYCLE (at
// each edge of the cycle). The consumers of bad edges are left out of
// Desired; the edges of the others go to Desired.Edges.
func (l *loader) checkDepends() {
	if len(l.deps) == 0 {
		return
	}
	ds := &l.res.Desired
	declared := make(map[converge.ID]bool, len(ds.Resources))
	for _, r := range ds.Resources {
		declared[r.ID()] = true
	}
	bad := map[converge.ID]bool{}
	var edges []converge.Edge
	var places []gitDep
	for _, d := range l.deps {
		if !declared[d.edge.Consumer] {
			continue // its document had findings
		}
		if !declared[d.edge.Producer] {
			l.addf(d.at.file, d.at.pos, d.path, "DEPENDS_ON_UNKNOWN", "%s depends on %s, which no resource document declares", d.edge.Consumer, d.edge.Producer)
			bad[d.edge.Consumer] = true
			continue
		}
		edges = append(edges, d.edge)
		places = append(places, d)
	}
	for _, i := range cycleEdges(edges) {
		e := edges[i]
		l.addf(places[i].at.file, places[i].at.pos, places[i].path, "DEPENDS_ON_CYCLE", "%s depends on %s, which depends on it (a cycle)", e.Consumer, e.Producer)
		bad[e.Consumer] = true
	}
	if len(bad) > 0 {
		kept := ds.Resources[:0]
		for _, r := range ds.Resources {
			if !bad[r.ID()] {
				kept = append(kept, r)
			}
		}
		ds.Resources = kept
	}
	for _, e := range edges {
		if !bad[e.Consumer] && !bad[e.Producer] {
			ds.Edges = append(ds.Edges, e)
		}
	}
	sort.SliceStable(ds.Edges, func(i, j int) bool {
		a, b := ds.Edges[i], ds.Edges[j]
		if a.Consumer != b.Consumer {
			return a.Consumer < b.Consumer
		}
		return a.Producer < b.Producer
	})
}

// cycleEdges returns the indexes of the edges that lie on a cycle (both
// ends in one strongly connected component), in order.
func cycleEdges(edges []converge.Edge) []int {
	adj := map[converge.ID][]converge.ID{}
	for _, e := range edges {
		adj[e.Producer] = append(adj[e.Producer], e.Consumer)
	}
	// Tarjan's strongly connected components.
	index := map[converge.ID]int{}
	low := map[converge.ID]int{}
	on := map[converge.ID]bool{}
	comp := map[converge.ID]int{}
	var stack []converge.ID
	next, ncomp := 0, 0
	var visit func(v converge.ID)
	visit = func(v converge.ID) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		on[v] = true
		for _, w := range adj[v] {
			if _, ok := index[w]; !ok {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if on[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				on[w] = false
				comp[w] = ncomp
				if w == v {
					break
				}
			}
			ncomp++
		}
	}
	var nodes []converge.ID
	for _, e := range edges {
		nodes = append(nodes, e.Producer, e.Consumer)
	}
	for _, v := range nodes {
		if _, ok := index[v]; !ok {
			visit(v)
		}
	}
	var out []int
	for i, e := range edges {
		if comp[e.Producer] == comp[e.Consumer] {
			out = append(out, i)
		}
	}
	return out
}

// validatePending is validate where the fields in pending (flowed by
// depends_on) may be absent: they are known after apply.
func (l *loader) validatePending(d *document, data cuelang.Value, key schemaKey, pending []string) ([]byte, bool) {
	if len(pending) == 0 {
		return l.validate(d, data, key, "spec", "SPEC_INVALID")
	}
	if b := l.fastValid(d, data, key, pending); b != nil {
		return b, true
	}
	sch, err := l.schemas.schema(l.ev, key)
	if err != nil {
		l.addf(d.file, d.pos, "spec", "SCHEMA_INVALID", "%v", err)
		return nil, false
	}
	errs := dropPending(check(sch, data), pending)
	for _, e := range errs {
		l.addf(d.file, l.errPos(d, data, e), joinPath("spec", e.path), "SPEC_INVALID", "%s", e.msg)
	}
	if len(errs) > 0 {
		return nil, false
	}
	b, err := data.MarshalJSON()
	if err != nil {
		l.addf(d.file, posOf(data, d.pos), "spec", "SPEC_INVALID", "%v", err)
		return nil, false
	}
	return b, true
}
