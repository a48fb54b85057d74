package cue

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/convergehq/converge"
)

// bomTeam, bomDomain and bomSpec are examples/datadriven's classicbom
// spec, for edits.
type bomTeam struct {
	Name string `json:"name"`
}

type bomDomain struct {
	Name         string    `json:"name"`
	Networking   bool      `json:"networking"`
	ServiceTeams []bomTeam `json:"service_teams"`
}

type bomSpec struct {
	FunctionalDomains []bomDomain `json:"functional_domains"`
}

func (b bomSpec) clone() bomSpec {
	out := bomSpec{FunctionalDomains: make([]bomDomain, len(b.FunctionalDomains))}
	for i, d := range b.FunctionalDomains {
		d.ServiceTeams = slices.Clone(d.ServiceTeams)
		out.FunctionalDomains[i] = d
	}
	return out
}

func (b bomSpec) json(tb testing.TB) json.RawMessage {
	out, err := json.Marshal(b)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// applied is a composition as the scheduler keeps it: children by ID,
// edges by consumer.
type applied struct {
	children map[converge.ID]converge.Child
	edges    map[converge.ID][]converge.Edge
}

func appliedOf(res *converge.Result) *applied {
	a := &applied{children: map[converge.ID]converge.Child{}, edges: converge.EdgesByConsumer(res.Edges)}
	for _, c := range res.Children {
		c.Added = false
		a.children[converge.NewID(c.Kind, c.Name)] = c
	}
	return a
}

// apply applies a delta as the scheduler does (checkDelta's Added rule
// included) and returns what is wrong with it.
func (a *applied) apply(res *converge.Result) error {
	for _, id := range res.Removed {
		if _, ok := a.children[id]; !ok {
			return fmt.Errorf("removed %s, which the base does not have", id)
		}
		delete(a.children, id)
		delete(a.edges, id)
	}
	sent := converge.EdgesByConsumer(res.Edges)
	for e := range sent {
		if !slices.ContainsFunc(res.Children, func(c converge.Child) bool { return converge.NewID(c.Kind, c.Name) == e }) {
			return fmt.Errorf("edges of %s, which is not sent", e)
		}
	}
	for _, c := range res.Children {
		id := converge.NewID(c.Kind, c.Name)
		_, there := a.children[id]
		if c.Added && there {
			return fmt.Errorf("%s: added, and the base has it", id)
		}
		if !c.Added && !there {
			return fmt.Errorf("%s: changed, and the base lacks it", id)
		}
		c.Added = false
		a.children[id] = c
		a.edges[id] = sent[id]
	}
	return nil
}

// diff says how a and b differ, or "".
func (a *applied) diff(b *applied) string {
	var out []string
	for id, c := range a.children {
		d, ok := b.children[id]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s only in the delta's", id))
		case c.KindVersion != d.KindVersion || string(c.Spec) != string(d.Spec) || c.ProviderConfigRef != d.ProviderConfigRef:
			out = append(out, fmt.Sprintf("%s: %s v%d, full %s v%d", id, c.Spec, c.KindVersion, d.Spec, d.KindVersion))
		case !converge.SameEdges(a.edges[id], b.edges[id]):
			out = append(out, fmt.Sprintf("%s: edges %v, full %v", id, a.edges[id], b.edges[id]))
		}
	}
	for id := range b.children {
		if _, ok := a.children[id]; !ok {
			out = append(out, fmt.Sprintf("%s only in the full one", id))
		}
	}
	for id := range a.edges {
		if _, ok := a.children[id]; !ok && len(a.edges[id]) > 0 {
			out = append(out, fmt.Sprintf("edges of %s, which is no child", id))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

func composeTask(ref converge.KindRef, spec, base json.RawMessage, rev string) *converge.Task {
	return &converge.Task{Kind: ref.Kind, KindVersion: ref.Version, Reaction: converge.ReactionCompose, Spec: spec,
		BaseSpec: base, BaseRevision: rev}
}

// editBOM makes one random edit of b.
func editBOM(r *rand.Rand, b bomSpec, seq *int) (bomSpec, string) {
	b = b.clone()
	*seq++
	fresh := fmt.Sprintf("n%d", *seq)
	fds := b.FunctionalDomains
	if len(fds) == 0 {
		b.FunctionalDomains = append(fds, bomDomain{Name: "d" + fresh, Networking: true, ServiceTeams: []bomTeam{}})
		return b, "add a domain"
	}
	d := &fds[r.IntN(len(fds))]
	switch r.IntN(8) {
	case 0:
		d.ServiceTeams = append(d.ServiceTeams, bomTeam{Name: "t" + fresh})
		return b, "add a team"
	case 1:
		if len(d.ServiceTeams) > 0 {
			i := r.IntN(len(d.ServiceTeams))
			d.ServiceTeams = slices.Delete(d.ServiceTeams, i, i+1)
		}
		return b, "remove a team"
	case 2:
		if len(d.ServiceTeams) > 0 {
			d.ServiceTeams[r.IntN(len(d.ServiceTeams))].Name = "t" + fresh
		}
		return b, "rename a team"
	case 3:
		i := r.IntN(len(fds) + 1)
		b.FunctionalDomains = slices.Insert(fds, i, bomDomain{Name: "d" + fresh, Networking: r.IntN(2) == 0,
			ServiceTeams: []bomTeam{{Name: "t" + fresh}}})
		return b, "add a domain"
	case 4:
		i := r.IntN(len(fds))
		b.FunctionalDomains = slices.Delete(fds, i, i+1)
		return b, "remove a domain"
	case 5:
		d.Networking = !d.Networking
		return b, "toggle networking"
	case 6:
		r.Shuffle(len(fds), func(i, j int) { fds[i], fds[j] = fds[j], fds[i] })
		return b, "reorder the domains"
	default:
		d.Name = "d" + fresh
		return b, "rename a domain"
	}
}

// TestComposeDeltaMatchesFull: for random edits of examples/datadriven's
// BOM (one to three at a time), the base's full composition with the
// delta applied is the new spec's full composition: the same children,
// specs and edges.
func TestComposeDeltaMatchesFull(t *testing.T) {
	s := datadrivenSchemas(t)
	rev := s.composers[classicBOMRef].rev
	if rev == "" {
		t.Fatal("classicbom has no parts shape")
	}
	r := rand.New(rand.NewPCG(13, 1))
	seq := 0
	var base bomSpec
	for i := range 4 {
		base.FunctionalDomains = append(base.FunctionalDomains, bomDomain{Name: fmt.Sprintf("fd-%d", i), Networking: i%2 == 0,
			ServiceTeams: []bomTeam{{Name: "a"}, {Name: "b"}}})
	}
	before := s.ComposeStats()
	deltas := 0
	for i := range 300 {
		next, what := base, ""
		for range 1 + r.IntN(3) {
			var w string
			next, w = editBOM(r, next, &seq)
			what += w + ", "
		}
		bj, nj := base.json(t), next.json(t)
		full := s.Compose(composeTask(classicBOMRef, bj, nil, ""))
		want := s.Compose(composeTask(classicBOMRef, nj, nil, ""))
		if full.Outcome != converge.OutcomeOK || want.Outcome != converge.OutcomeOK {
			t.Fatalf("edit %d: full compose: %s %s", i, full.Message, want.Message)
		}
		if full.Revision != rev || full.Delta {
			t.Fatalf("edit %d: a full compose has revision %q (delta %v), want %q", i, full.Revision, full.Delta, rev)
		}
		got := s.Compose(composeTask(classicBOMRef, nj, bj, rev))
		if got.Outcome != converge.OutcomeOK || !got.Delta || got.Revision != rev {
			t.Fatalf("edit %d (%s): %s delta=%v revision %q: %s", i, what, got.Outcome, got.Delta, got.Revision, got.Message)
		}
		deltas++
		a := appliedOf(full)
		if err := a.apply(got); err != nil {
			t.Fatalf("edit %d (%s): %v", i, what, err)
		}
		if d := a.diff(appliedOf(want)); d != "" {
			t.Fatalf("edit %d (%s): the base with the delta applied differs from the full composition: %s", i, what, d)
		}
		if strings.Contains(what, "reorder") && !strings.Contains(strings.ReplaceAll(what, "reorder the domains, ", ""), ",") &&
			(len(got.Children) > 0 || len(got.Removed) > 0) {
			t.Fatalf("edit %d: reordering the domains sends %d children, removes %d", i, len(got.Children), len(got.Removed))
		}
		base = next
	}
	if st := s.ComposeStats(); st.Delta-before.Delta != uint64(deltas) {
		t.Errorf("compose stats %+v: want %d deltas more than %+v", st, deltas, before)
	}
}

// TestComposeDeltaOneTeam: adding one team to a BOM of 33,000 sends
// that team's account, VPC and route (added) with their edges, and
// nothing else.
func TestComposeDeltaOneTeam(t *testing.T) {
	s := datadrivenSchemas(t)
	rev := s.composers[classicBOMRef].rev
	base := bomSpecJSON(3300)
	var b bomSpec
	if err := json.Unmarshal(base, &b); err != nil {
		t.Fatal(err)
	}
	b.FunctionalDomains[7].ServiceTeams = append(b.FunctionalDomains[7].ServiceTeams, bomTeam{Name: "new"})
	got := s.Compose(composeTask(classicBOMRef, b.json(t), base, rev))
	if !got.Delta || got.Outcome != converge.OutcomeOK {
		t.Fatalf("not a delta: %s %s", got.Outcome, got.Message)
	}
	var ids []string
	for _, c := range got.Children {
		if !c.Added {
			t.Errorf("%s/%s is not marked added", c.Kind, c.Name)
		}
		ids = append(ids, c.Kind+"/"+c.Name)
	}
	slices.Sort(ids)
	if want := []string{"account/fd-07-new", "route/fd-07-new", "vpc/fd-07-new"}; !slices.Equal(ids, want) {
		t.Errorf("sent %v, want %v", ids, want)
	}
	if len(got.Edges) != 3 || len(got.Removed) != 0 {
		t.Errorf("%d edges (want 3: the VPC's and the route's two), %d removed (want 0)", len(got.Edges), len(got.Removed))
	}
}

// TestComposeDeltaRevision: a base of another revision (another compose
// expression, or the same one of another kind version) is answered in
// full; so is a compose with no base.
func TestComposeDeltaRevision(t *testing.T) {
	const expr = `{children: [for x in spec.l {kind: "a", name: x, spec: {}}]}`
	s1 := composeKind(t, expr)
	s2 := composeKind(t, `{children: [for x in spec.l {kind: "a", name: x, spec: {v: 2}}]}`)
	r1, r2 := s1.composers[tRef].rev, s2.composers[tRef].rev
	if r1 == "" || r2 == "" || r1 == r2 {
		t.Fatalf("revisions %q and %q: want two, different", r1, r2)
	}
	base, spec := json.RawMessage(`{"l": ["x", "y"]}`), json.RawMessage(`{"l": ["x", "y", "z"]}`)
	if res := s2.Compose(composeTask(tRef, spec, base, r1)); res.Delta || len(res.Children) != 3 || res.Revision != r2 {
		t.Errorf("a base of the old expression: delta %v, %d children, revision %q: want a full answer of revision %q", res.Delta, len(res.Children), res.Revision, r2)
	}
	if res := s1.Compose(composeTask(tRef, spec, nil, "")); res.Delta || len(res.Children) != 3 {
		t.Errorf("no base: delta %v, %d children: want a full answer", res.Delta, len(res.Children))
	}
	if res := s1.Compose(composeTask(tRef, spec, base, r1)); !res.Delta || len(res.Children) != 1 || !res.Children[0].Added {
		t.Errorf("a base of this expression: delta %v, children %+v: want z, added", res.Delta, res.Children)
	}
	// The same expression under another kind version is another revision.
	k := &converge.Kind{Name: "t", Version: 2, Reactions: []string{converge.ReactionCompose}, Compose: expr, ComposeAt: "kinds/t.cue:3:10"}
	if composeRevision(k) == r1 {
		t.Error("kind version 2 has version 1's revision")
	}
}

// TestComposeDeltaShape: only the parts shape answers deltas; any other
// expression, and a parts expression whose edges cross parts at run
// time, answers in full.
func TestComposeDeltaShape(t *testing.T) {
	child := `{kind: "a", name: x, spec: {}}`
	for _, c := range []struct {
		expr  string
		parts bool
	}{
		{`{children: [for x in spec.l ` + child + `]}`, true},
		{`{children: [for x in spec.l if x != "q" ` + child + `], edges: [for x in spec.l {consumer: "a/\(x)", producer: "b/c"}]}`, true},
		{`{children: [for i, x in spec.l {kind: "a", name: x, spec: {n: i}}]}`, true},
		{`{#d: {n: string, o: "<\(n)>"}, _k: "a", let p = "b", children: [for x in spec.l let y = x {kind: _k, name: y, spec: {o: (#d & {n: x}).o, q: p}}]}`, true},
		{`{children: [for x in spec.l {[{kind: "a", name: x, spec: {}}, {kind: "b", name: x, spec: {}}]}]}`, true},
		{`{n: len(spec.l), children: [for x in spec.l ` + child + `]}`, false},
		{`{_p: spec.p, children: [for x in spec.l {kind: "a", name: x, spec: {p: _p}}]}`, false},
		{`{children: [for x in spec.l let k = len(spec.l) {kind: "a", name: x, spec: {n: k}}]}`, false},
		{`{children: [{kind: "a", name: "z", spec: {}}, for x in spec.l ` + child + `]}`, false},
		{`{children: [for x in spec.l ` + child + `], edges: [for x in spec.m {consumer: "a/\(x)", producer: "b/c"}]}`, false},
		{`{children: [if true for x in spec.l ` + child + `]}`, false},
		{`{children: [for x in spec.l ` + child + `], n: len(children)}`, false},
		{`{children: [for x in [1, 2] {kind: "a", name: "\(x)", spec: {}}]}`, false},
		{`{spec: l: ["c"], children: [for x in spec.l ` + child + `]}`, false},
	} {
		s := composeKind(t, c.expr)
		fc := s.composers[tRef].fc
		if fc == nil {
			t.Fatalf("%s: not on the fast path: %v", c.expr, s.composers[tRef].err)
		}
		if got := fc.parts != nil; got != c.parts {
			t.Errorf("%s: parts shape %v, want %v", c.expr, got, c.parts)
		}
		res := s.Compose(composeTask(tRef, json.RawMessage(`{"l": ["x"], "m": ["x"], "p": "p"}`), json.RawMessage(`{"l": [], "m": [], "p": "p"}`), s.composers[tRef].rev))
		if res.Outcome != converge.OutcomeOK || res.Delta != c.parts {
			t.Errorf("%s: %s %s, delta %v; want delta %v", c.expr, res.Outcome, res.Message, res.Delta, c.parts)
		}
	}
	// Edges whose consumer is another part's child: full.
	s := composeKind(t, `{children: [for x in spec.l `+child+`], edges: [for x in spec.l if x != "first" {consumer: "a/first", producer: "a/\(x)"}]}`)
	rev := s.composers[tRef].rev
	if rev == "" {
		t.Fatal("no parts shape")
	}
	res := s.Compose(composeTask(tRef, json.RawMessage(`{"l": ["first", "b", "c"]}`), json.RawMessage(`{"l": ["first", "b"]}`), rev))
	if res.Outcome != converge.OutcomeOK || res.Delta || len(res.Children) != 3 || len(res.Edges) != 2 {
		t.Errorf("edges across parts: %s %s delta %v, %d children %d edges: want a full answer", res.Outcome, res.Message, res.Delta, len(res.Children), len(res.Edges))
	}
	// An element that makes an edge into another element's child: a
	// delta changing only that child would lose the edge, so a full
	// composition of it carries no revision, and the next compose is full.
	s = composeKind(t, `{children: [for x in spec.l {kind: "a", name: x.n, spec: {v: x.v}}], edges: [for x in spec.l if x.n != "first" {consumer: "a/first", producer: "a/\(x.n)"}]}`)
	if s.composers[tRef].rev == "" {
		t.Fatal("no parts shape")
	}
	res = s.Compose(composeTask(tRef, json.RawMessage(`{"l": [{"n": "first", "v": 1}, {"n": "b", "v": 1}]}`), nil, ""))
	if res.Outcome != converge.OutcomeOK || len(res.Children) != 2 || len(res.Edges) != 1 || res.Revision != "" {
		t.Errorf("edges across parts, in full: %s %s, %d children, %d edges, revision %q: want both, the edge, no revision",
			res.Outcome, res.Message, len(res.Children), len(res.Edges), res.Revision)
	}
	// The same expression on a spec whose elements make no such edge
	// carries the revision.
	res = s.Compose(composeTask(tRef, json.RawMessage(`{"l": [{"n": "first", "v": 1}]}`), nil, ""))
	if res.Outcome != converge.OutcomeOK || len(res.Children) != 1 || res.Revision != s.composers[tRef].rev {
		t.Errorf("no edge across parts: %s %s, %d children, revision %q: want the revision", res.Outcome, res.Message, len(res.Children), res.Revision)
	}
	// With an index, a moved element is a changed one.
	s = composeKind(t, `{children: [for i, x in spec.l {kind: "a", name: x, spec: {n: i}}]}`)
	res = s.Compose(composeTask(tRef, json.RawMessage(`{"l": ["y", "x"]}`), json.RawMessage(`{"l": ["x", "y"]}`), s.composers[tRef].rev))
	if !res.Delta || len(res.Children) != 2 || len(res.Removed) != 0 {
		t.Errorf("swapped with an index: delta %v, %d children, %d removed: want both children changed", res.Delta, len(res.Children), len(res.Removed))
	}
	// A base whose parts list is not a list: full.
	s = composeKind(t, `{children: [for x in spec.l `+child+`]}`)
	res = s.Compose(composeTask(tRef, json.RawMessage(`{"l": ["x"]}`), json.RawMessage(`{"l": {"a": "x"}}`), s.composers[tRef].rev))
	if res.Outcome != converge.OutcomeOK || res.Delta || len(res.Children) != 1 {
		t.Errorf("a base without a list: delta %v, %d children: want a full answer", res.Delta, len(res.Children))
	}
}

// rawPartsRef is rawParts by encoding/json.
func rawPartsRef(spec []byte, path []string) ([]json.RawMessage, bool) {
	raw := json.RawMessage(spec)
	for _, p := range path {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil || m == nil {
			return nil, false
		}
		var ok bool
		if raw, ok = m[p]; !ok {
			return nil, false
		}
	}
	var l []json.RawMessage
	if json.Unmarshal(raw, &l) != nil || l == nil {
		return nil, false
	}
	return l, true
}

// FuzzRawParts: rawParts cuts the list at a path as encoding/json
// decodes it (strings with brackets and escapes, duplicate keys, white
// space, other values, invalid JSON).
func FuzzRawParts(f *testing.F) {
	for _, s := range []string{
		`{"l": [1, "a", {"x": [1, 2]}, [], {}, null, true, -1.5e3]}`,
		`{"a": {"l": ["]", "[", "\"]", "\\", "\u005d"]}, "l": 1}`,
		` { "l" : [ { "k" : "}" } , [ "," ] ] , "m" : 2 } `,
		`{"l": [1], "l": [2, 3]}`,
		`{"\u006c": [4]}`,
		`{"l": []}`, `{"l": {}}`, `{"l": null}`, `{}`, `[]`, `{"l": [1,]}`, `{"l": [1] x`, `{"l": "[1]"}`,
		`{"a": {"l": [{"name": "fd", "service_teams": [{"name": "t"}]}]}}`,
	} {
		f.Add(s, "l", "")
		f.Add(s, "a", "l")
	}
	f.Fuzz(func(t *testing.T, spec, p1, p2 string) {
		path := []string{p1}
		if p2 != "" {
			path = append(path, p2)
		}
		got, ok := rawParts([]byte(spec), path)
		want, wok := rawPartsRef([]byte(spec), path)
		if ok != wok || len(got) != len(want) {
			t.Fatalf("%s at %v: %q %v, encoding/json %q %v", spec, path, got, ok, want, wok)
		}
		for i := range got {
			if string(got[i]) != string(want[i]) {
				t.Fatalf("%s at %v: element %d %s, encoding/json %s", spec, path, i, got[i], want[i])
			}
		}
	})
}
