package cue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/convergehq/converge"
)

// composeKind compiles a kind "t" composing with expr (and imports).
func composeKind(tb testing.TB, expr string, imports ...string) *Schemas {
	tb.Helper()
	var quoted []string
	for _, imp := range imports {
		quoted = append(quoted, `"`+imp+`"`)
	}
	k := &converge.Kind{Name: "t", Version: 1, Reactions: []string{converge.ReactionCompose},
		Compose: expr, ComposeImports: quoted, ComposeAt: "kinds/t.cue:3:10"}
	s, err := Compile([]*converge.Kind{k})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

var tRef = converge.KindRef{Kind: "t", Version: 1}

// composition renders children and edges for comparison: each child's
// spec as its JSON decoded with numbers kept as written (1 and 1.0
// differ), edges with their flows.
func composition(tb testing.TB, ch []converge.Child, ed []converge.Edge) string {
	tb.Helper()
	var b strings.Builder
	for _, c := range ch {
		var spec any
		if c.Spec != nil {
			d := json.NewDecoder(bytes.NewReader(c.Spec))
			d.UseNumber()
			if err := d.Decode(&spec); err != nil {
				tb.Fatalf("child %s/%s: spec %s: %v", c.Kind, c.Name, c.Spec, err)
			}
		}
		norm, _ := json.Marshal(spec) // map keys sorted
		fmt.Fprintf(&b, "child %q v%d %q pcr=%q spec=%s (nil=%v) bytes=%s\n", c.Kind, c.KindVersion, c.Name, c.ProviderConfigRef, norm, c.Spec == nil, c.Spec)
	}
	for _, e := range ed {
		fmt.Fprintf(&b, "edge %q <- %q %v\n", e.Consumer, e.Producer, e.Flows)
	}
	return b.String()
}

// bothWays composes spec with s's kind t through CUE and on the fast
// path. It fails the test if the fast path succeeds where CUE fails or
// differs from it, and if Schemas.compose's answer is not CUE's. It
// returns whether the fast path composed (rather than fell back).
func bothWays(tb testing.TB, s *Schemas, spec string) (fast bool, cueOut string, cueErr error) {
	tb.Helper()
	if _, err := decodeJSON([]byte(spec)); err != nil {
		tb.Fatalf("spec %s: %v", spec, err)
	}
	k := s.kinds[tRef]
	cch, ced, cerr := s.composeCUE(k, []byte(spec))
	if cerr == nil {
		cueOut = composition(tb, cch, ced)
	}
	if fc := s.composers[tRef].fc; fc != nil {
		x, _ := decodeJSON([]byte(spec))
		fch, fed, ferr := fc.run(x)
		if ferr == nil {
			fast = true
			if cerr != nil {
				tb.Fatalf("spec %s: the fast path composed where CUE fails: %v", spec, cerr)
			}
			if got := composition(tb, fch, fed); got != cueOut {
				tb.Fatalf("spec %s: fast path:\n%s\nCUE:\n%s", spec, got, cueOut)
			}
		} else if _, ok := ferr.(errFallback); !ok {
			tb.Fatalf("spec %s: fast path error %T %v", spec, ferr, ferr)
		}
	}
	// The public path gives CUE's answer either way.
	ch, ed, err := s.compose(tRef, json.RawMessage(spec))
	switch {
	case (err == nil) != (cerr == nil):
		tb.Fatalf("spec %s: compose error %v, CUE's %v", spec, err, cerr)
	case err != nil && err.Error() != cerr.Error():
		tb.Fatalf("spec %s: compose error\n%v\nCUE's\n%v", spec, err, cerr)
	case err == nil && composition(tb, ch, ed) != cueOut:
		tb.Fatalf("spec %s: compose\n%s\nCUE:\n%s", spec, composition(tb, ch, ed), cueOut)
	}
	return fast, cueOut, cerr
}

// fastCase is a spec and whether the fast path composes it (false: CUE
// does, the fast path having fallen back).
type fastCase struct {
	spec string
	fast bool
}

// fastExprs are compose expressions in the fast subset, each construct
// of it at least once, with specs it composes and specs it leaves to CUE.
var fastExprs = []struct {
	name    string
	imports []string
	expr    string
	specs   []fastCase
}{
	{
		name:    "classic style: definitions, hashes, nested lists",
		imports: []string{"crypto/sha256", "encoding/hex", "strconv", "strings"},
		expr: `{
	#cidr: {
		name: string
		_h:   hex.Encode(sha256.Sum256(name))
		out:  "10.\(strconv.ParseInt(strings.SliceRunes(_h, 0, 2), 16, 64)).\(strconv.ParseInt(strings.SliceRunes(_h, 2, 4), 16, 64)).0/24"
	}
	children: [for fd in spec.functional_domains {[
		if fd.networking {kind: "tgw", name: "\(fd.name)-tgw", spec: name: "\(fd.name)-tgw"},
		for t in fd.service_teams {kind: "vpc", name: "\(fd.name)-\(t.name)", spec: cidr: (#cidr & {name: "\(fd.name)-\(t.name)"}).out},
		if fd.networking for t in fd.service_teams {kind: "route", name: "\(fd.name)-\(t.name)", spec: {}},
	]}]
	edges: [for fd in spec.functional_domains {[
		if fd.networking for t in fd.service_teams {
			consumer: "route/\(fd.name)-\(t.name)", producer: "vpc/\(fd.name)-\(t.name)"
			flows: {"status.vpc_id": "spec.vpc_id", "status.x": "spec.a"}
		},
	]}]
}`,
		specs: []fastCase{
			{`{"functional_domains":[{"name":"a","networking":true,"service_teams":[{"name":"x"},{"name":"y"}]},{"name":"b","networking":false,"service_teams":[{"name":"z"}]}]}`, true},
			{`{"functional_domains":[]}`, true},
			{`{"functional_domains":[{"name":"é","networking":true,"service_teams":[{"name":"ü"}]}]}`, true},
			{`{"functional_domains":[{"name":"a","networking":"yes","service_teams":[]}]}`, false},         // if on a string
			{`{"functional_domains":[{"name":"a","service_teams":[]}]}`, false},                            // no networking
			{`{"functional_domains":[{"name":1,"networking":true,"service_teams":[{"name":"x"}]}]}`, true}, // "\(1)" is "1"
			{`{"functional_domains":[{"name":1.5,"networking":false,"service_teams":[{"name":"x"}]}]}`, false},
			{`{}`, false},
		},
	},
	{
		name:    "lets, hidden fields, comprehension clauses, indexes",
		imports: []string{"strings"},
		expr: `{
	let p = spec.prefix
	let tags = spec.tags
	_sep: "-"
	_first: spec.teams[0].name
	count: len(spec.teams) + len(children) // children referred to: not streamed
	children: [for i, t in spec.teams let n = "\(p)\(_sep)\(t.name)" if t.enabled {
		kind: "account", name: n
		spec: {team_name: n, index: i, let u = strings.ToUpper(n), upper: u, lower: strings.ToLower(u), first: _first, tag: tags["env"], neg: -i}
	}]
}`,
		specs: []fastCase{
			{`{"prefix":"p","teams":[{"name":"a","enabled":true},{"name":"b","enabled":false},{"name":"c","enabled":true}],"tags":{"env":"prod"}}`, true},
			{`{"prefix":"p","teams":[],"tags":{"env":"prod"}}`, false}, // teams[0] out of range
			{`{"prefix":"p","teams":[{"name":"a","enabled":true}],"tags":{}}`, false},
			{`{"prefix":7,"teams":[{"name":"a","enabled":true}],"tags":{"env":true}}`, true},
		},
	},
	{
		name: "for over a struct, dynamic labels, comprehensions in structs",
		expr: `{
	_tags: spec.tags
	children: [for k, v in spec.tags {
		kind: "tag", name: k
		spec: {"\(k)": v, base: 1, if v == "x" {isx: true}, for k2, v2 in _tags if k2 != k {"other-\(k2)": v2}}
	}]
	edges: [for k, v in spec.tags {consumer: "tag/\(k)", producer: "src/\(v)", flows: {"status.\(k)": "spec.\(v)"}}]
}`,
		specs: []fastCase{
			// The specs have dynamic labels: CUE composes them (see the
			// next expression); the fast path composes the edges.
			{`{"tags":{"b":"x","a":"y","c":"z"}}`, false},
			{`{"tags":{}}`, true},
			{`{"tags":{"a":"base"}}`, false},
			{`{"tags":{"base":"1"}}`, false}, // a "base" label twice
			{`{"tags":{"a":1}}`, false},
			{`{"tags":{"a":[1]}}`, false}, // "spec.\(v)" of a list
			{`{"tags":[1,2]}`, false},     // "\(k)" of an index: a label of an int
		},
	},
	{
		name: "for over a struct, flows with dynamic labels",
		expr: `{
	children: [for k, v in spec.tags {kind: "tag", name: k, spec: {key: k, val: v}}]
	edges: [for k, v in spec.tags {consumer: "tag/\(k)", producer: "src/\(v)", flows: {"status.\(k)": "spec.\(v)", if v == "x" {"status.isx": "spec.isx"}}}]
}`,
		specs: []fastCase{
			{`{"tags":{"b":"x","a":"y","c":"z"}}`, true},
			{`{"tags":{"a":1,"b":{"z":[1,{"y":null}]}}}`, false}, // "spec.\(v)" of a struct
			{`{"tags":{"a":1,"b":true}}`, true},
			{`{"tags":{"isx":"x"}}`, false}, // a flow twice
		},
	},
	{
		name: "field order of structs built by comprehensions",
		expr: `{
	children: [for t in spec.teams {
		kind: "o", name: t.name
		spec: {s: {b: 1, a: 2}, "z": 3, y: 4, if t.on {c: 1}, m: 2, "\(t.name)": t.on, for k, v in t.extra {"x-\(k)": v}, last: 0}
	}]
}`,
		specs: []fastCase{
			// CUE's order is its own: the fast path leaves such a spec to it.
			{`{"teams":[{"name":"a","on":true,"extra":{"q":1,"b":2}},{"name":"b","on":false,"extra":{}}]}`, false},
		},
	},
	{
		name:    "operators and numbers",
		imports: []string{"strconv"},
		expr: `{
	children: [for t in spec.teams if t.size > 2 && !(t.name == "x") || t.size*2-1 >= 9 {
		kind: "t", kind_version: t.size - 2, name: t.name + "-" + strconv.FormatInt(t.size, 16)
		spec: {big: t.size > 3, lt: t.name < "m", le: t.size <= 4, ge: t.name >= "b", ne: t.name != "b", re: t.name =~ "^[a-c]", nre: t.name !~ "z$", sum: t.size + 10, isnull: t.opt == null, eqk: t.size == "3"}
	}]
}`,
		specs: []fastCase{
			{`{"teams":[{"name":"a","size":3,"opt":null},{"name":"x","size":5,"opt":1},{"name":"n","size":1,"opt":"s"},{"name":"z","size":2,"opt":false}]}`, true},
			{`{"teams":[{"name":"a","size":9223372036854775807,"opt":null}]}`, false}, // overflow
			{`{"teams":[{"name":"a","size":2.5,"opt":null}]}`, false},
			{`{"teams":[{"name":"a","size":"3","opt":null}]}`, false},
		},
	},
	{
		name:    "string builtins",
		imports: []string{"strings", "strconv"},
		expr: `{
	children: [for t in spec.teams {
		kind: "s", name: strings.ToLower(strings.Replace(t.name, "_", "-", -1))
		spec: {
			join: strings.Join(strings.Split(t.name, "_"), "+"), pre: strings.HasPrefix(t.name, "A"), suf: strings.HasSuffix(t.name, "z")
			tp: strings.TrimPrefix(t.name, "A"), ts: strings.TrimSuffix(t.name, "z"), has: strings.Contains(t.name, "_")
			sr: strings.SliceRunes(t.name, 1, 3), up: strings.ToUpper(t.name), sp: strings.TrimSpace(" \(t.name) ")
			q: strconv.Quote(t.name), n: strconv.Atoi(t.num), p: strconv.ParseInt(t.num, 0, 16), l: len(t.name)
		}
	}]
}`,
		specs: []fastCase{
			{`{"teams":[{"name":"A_bc_z","num":"12"},{"name":"Äöü_x","num":"-7"},{"name":"q\"\n<&>","num":"0x1f"}]}`, false}, // Atoi("0x1f") fails
			{`{"teams":[{"name":"A_bc_z","num":"12"},{"name":"Äöü_x","num":"-7"},{"name":"q\"\n<&>","num":"31"}]}`, true},
			{`{"teams":[{"name":"abc","num":"1"}]}`, true},
			{`{"teams":[{"name":"a","num":"1"}]}`, false},       // SliceRunes out of range
			{`{"teams":[{"name":"abc","num":"40000"}]}`, false}, // ParseInt 16 bits
			{`{"teams":[{"name":"abc","num":"1_000"}]}`, false}, // Atoi of an underscore
		},
	},
	{
		name: "definitions as values, null, copied subtrees, provider config",
		expr: `{
	#acct: {
		name: string
		tier: int
		_hidden: "h"
		label: "\(name):\(tier):\(_hidden)"
	}
	children: [for t in spec.teams {
		kind: "a", name: t.name, provider_config_ref: "cfg-\(t.name)"
		spec: #acct & {name: t.name, tier: t.tier}
	}, [for t in spec.teams {kind: "copy", kind_version: 0, name: t.name, spec: {raw: t, nothing: null, lst: [1, "two", [true]]}}]]
	edges: [[], [for t in spec.teams {consumer: "a/\(t.name)", producer: "copy/\(t.name)"}]]
}`,
		specs: []fastCase{
			{`{"teams":[{"name":"a","tier":1,"extra":{"z":1,"a":[null,"s"]}},{"name":"b","tier":2}]}`, true},
			{`{"teams":[{"name":"a","tier":"1"}]}`, false}, // tier: int
			{`{"teams":[{"name":"a","tier":1,"f":0.5}]}`, false},
		},
	},
}

// TestFastComposeMatchesCUE: each expression of the fast subset composes
// each of its specs exactly as CUE does (the same children in the same
// order, the same specs, edges and flows), or falls back to CUE where
// the table says (and then Compose gives CUE's result or error).
func TestFastComposeMatchesCUE(t *testing.T) {
	for _, tt := range fastExprs {
		t.Run(tt.name, func(t *testing.T) {
			s := composeKind(t, tt.expr, tt.imports...)
			if fast, why, _ := s.ComposePath(tRef); !fast {
				t.Fatalf("not on the fast path: %s", why)
			}
			for _, c := range tt.specs {
				fast, out, err := bothWays(t, s, c.spec)
				if fast != c.fast {
					t.Errorf("spec %s: fast %v, want %v (CUE: %v)", c.spec, fast, c.fast, err)
				}
				if c.fast && out == "" && !strings.Contains(c.spec, `[]`) && !strings.Contains(c.spec, `{}`) {
					t.Errorf("spec %s: empty composition", c.spec)
				}
			}
		})
	}
}

// TestFastComposeUnsupported: an expression outside the fast subset says
// why (ComposePath) and composes through CUE as before.
func TestFastComposeUnsupported(t *testing.T) {
	tests := []struct {
		name, expr, why, want string
		imports               []string
	}{
		{"a disjunction default", `{children: [for t in spec.teams {kind: *"a" | "b", name: t}]}`, "", `child "a" v1 "x"`, nil},
		{"an import outside the table", `{children: [for t in list.Sort(spec.teams, list.Ascending) {kind: "a", name: t}]}`, `import "list"`, `child "a" v1 "x"`, []string{"list"}},
		{"a builtin outside the table", `{children: [for t in spec.teams {kind: strings.Repeat("a", 2), name: t}]}`, "strings.Repeat", `child "aa" v1 "x"`, []string{"strings"}},
		{"a float", `{children: [for t in spec.teams {kind: "a", name: t, spec: f: 1.5}]}`, "literal 1.5", `spec={"f":1.5}`, nil},
		{"division", `{children: [for t in spec.teams {kind: "a", name: t, spec: f: 4 / 2}]}`, "operator /", `spec={"f":2.0}`, nil},
		{"a sibling reference", `{children: [for t in spec.teams {kind: "a", name: kind + t}]}`, "reference kind", `child "a" v1 "ax"`, nil},
		{"a top-level comprehension", `{if true {children: [for t in spec.teams {kind: "a", name: t}]}}`, "Comprehension", `child "a" v1 "x"`, nil},
		{"a sibling in a dynamic label", `{children: [for a in spec.teams {kind: "a", name: a, spec: {a: "y", "\(a)": 1}}]}`, "reference a", `spec={"a":"y","y":1}`, nil},
		{"a let before the let it uses", `{children: [for t in spec.teams {kind: "a", name: t, spec: {let a = b, let b = t, x: a}}]}`, "reference b", `spec={"x":"x"}`, nil},
		{"an optional field", `{children: [for t in spec.teams {kind: "a", name: t, spec: {o?: int}}]}`, "optional", `spec={}`, nil},
		{"a definition with a constraint", `{#d: {n: =~"^x"}, children: [for t in spec.teams {kind: "a", name: (#d & {n: t}).n}]}`, "", `child "a" v1 "x"`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := composeKind(t, tt.expr, tt.imports...)
			fast, why, ok := s.ComposePath(tRef)
			if !ok || fast || why == "" {
				t.Fatalf("ComposePath: fast %v, why %q, ok %v; want not fast, and why", fast, why, ok)
			}
			if !strings.Contains(why, tt.why) {
				t.Errorf("why %q, want it to mention %q", why, tt.why)
			}
			r := s.Compose(&converge.Task{ID: "t1", Kind: "t", KindVersion: 1, Reaction: converge.ReactionCompose, Spec: []byte(`{"teams":["x"]}`)})
			if r.Outcome != converge.OutcomeOK {
				t.Fatalf("compose: %s", r.Message)
			}
			if got := composition(t, r.Children, r.Edges); !strings.Contains(got, tt.want) {
				t.Errorf("composition %s, want %s", got, tt.want)
			}
		})
	}
}

// TestFastComposeErrorsAreCUEs: a spec the fast path cannot compose
// gets CUE's error, with the kind file:line:col.
func TestFastComposeErrorsAreCUEs(t *testing.T) {
	s := composeKind(t, `{children: [for t in spec.teams {kind: "a", name: t.name}]}`)
	if fast, why, _ := s.ComposePath(tRef); !fast {
		t.Fatal(why)
	}
	r := s.Compose(&converge.Task{ID: "t1", Kind: "t", KindVersion: 1, Reaction: converge.ReactionCompose, Spec: []byte(`{"teams":[{"nam":"x"}]}`)})
	if r.Outcome != converge.OutcomePermanent || !strings.HasPrefix(r.Message, "kinds/t.cue:3:") || !strings.Contains(r.Message, "name") {
		t.Errorf("compose: %v %q, want a permanent error at kinds/t.cue:3", r.Outcome, r.Message)
	}
}

// TestFastComposeClassicBOM: examples/datadriven's classicbom is on the
// fast path and composes the BOM at several sizes exactly as CUE does,
// the specs' bytes included.
func TestFastComposeClassicBOM(t *testing.T) {
	s := datadrivenSchemas(t)
	fast, why, _ := s.ComposePath(classicBOMRef)
	if !fast {
		t.Fatalf("classicbom is not on the fast path: %s", why)
	}
	k := s.kinds[classicBOMRef]
	for _, teams := range []int{58, 1176, 3000} {
		spec := bomSpecJSON(teams)
		if teams == 58 {
			// Half the domains without networking.
			spec = bytes.Replace(spec, []byte(`"networking":true,"service_teams":[{"name":"team-000"}]}`), []byte(`"networking":false,"service_teams":[{"name":"team-000"}]}`), 29)
		}
		cch, ced, err := s.composeCUE(k, spec)
		if err != nil {
			t.Fatal(err)
		}
		x, _ := decodeJSON(spec)
		fch, fed, err := s.composers[classicBOMRef].fc.run(x)
		if err != nil {
			t.Fatalf("%d teams: fell back: %v", teams, err)
		}
		if !reflect.DeepEqual(cch, fch) || !reflect.DeepEqual(ced, fed) {
			t.Errorf("%d teams: the fast composition differs from CUE's:\n%.2000s\nCUE:\n%.2000s", teams, composition(t, fch, fed), composition(t, cch, ced))
		}
		if n, _ := goCompose(spec); n != len(fch) {
			t.Errorf("%d teams: %d children, the Go composer %d", teams, len(fch), n)
		}
	}
}

// FuzzFastCompose composes arbitrary specs with each expression of
// fastExprs, both ways: the fast path either falls back or gives CUE's
// exact composition.
func FuzzFastCompose(f *testing.F) {
	schemas := make([]*Schemas, len(fastExprs))
	for i, e := range fastExprs {
		for _, c := range e.specs {
			f.Add(uint8(i), c.spec)
		}
		schemas[i] = composeKind(f, e.expr, e.imports...)
	}
	f.Fuzz(func(t *testing.T, which uint8, spec string) {
		if _, err := decodeJSON([]byte(spec)); err != nil {
			// Not JSON: a spec of the expressions' shape built from
			// the bytes, its values of any type.
			spec = specFromBytes([]byte(spec))
		}
		bothWays(t, schemas[int(which)%len(schemas)], spec)
	})
}

// specFromBytes builds a spec with the fields fastExprs read (domains and
// teams, tags, prefix), each value chosen by the bytes: mostly what the
// expressions expect, sometimes a value of another type.
func specFromBytes(b []byte) string {
	next := func() byte {
		if len(b) == 0 {
			return 0
		}
		c := b[0]
		b = b[1:]
		return c
	}
	names := []string{"a", "b", "x", "z", "base", "A_bc_z", "é", "q\"\n<&>", "", "team-1", "1", "isx", "\u2028"}
	var value func(depth int, want string) any
	value = func(depth int, want string) any {
		c := next()
		if c%8 != 0 || depth > 2 { // usually the expected type
			switch want {
			case "string":
				return names[int(next())%len(names)]
			case "bool":
				return c%2 == 0
			case "int":
				return int64(next()) - 100
			case "num":
				return fmt.Sprint(int64(next()) - 100)
			}
		}
		switch next() % 7 {
		case 0:
			return nil
		case 1:
			return 1.5
		case 2:
			return []any{value(depth+1, "string")}
		case 3:
			return map[string]any{names[int(next())%len(names)]: value(depth+1, "string")}
		case 4:
			return int64(1) << 62
		case 5:
			return true
		}
		return names[int(next())%len(names)]
	}
	obj := func(fields map[string]string) map[string]any {
		m := map[string]any{}
		for k, want := range fields {
			if next()%16 != 0 { // sometimes missing
				m[k] = value(0, want)
			}
		}
		return m
	}
	domains, teams := []any{}, []any{}
	for range int(next() % 4) {
		d := obj(map[string]string{"name": "string", "networking": "bool"})
		st := []any{}
		for range int(next() % 4) {
			st = append(st, obj(map[string]string{"name": "string"}))
		}
		d["service_teams"] = st
		domains = append(domains, d)
	}
	for range int(next() % 5) {
		t := obj(map[string]string{"name": "string", "enabled": "bool", "size": "int", "opt": "string",
			"num": "num", "tier": "int", "on": "bool"})
		t["extra"] = obj(map[string]string{"q": "int", "b": "string"})
		teams = append(teams, t)
	}
	tags := map[string]any{}
	for range int(next() % 4) {
		tags[names[int(next())%len(names)]] = value(0, "string")
	}
	spec := map[string]any{"functional_domains": domains, "teams": teams, "tags": tags, "prefix": value(0, "string")}
	out, _ := json.Marshal(spec)
	return string(out)
}

// TestFastComposeConcurrent: composes of one kind run at once (as the
// control plane runs them, one goroutine each) share the compiled
// composer and its constants and give the same result (go test -race
// checks they share nothing they write).
func TestFastComposeConcurrent(t *testing.T) {
	s := datadrivenSchemas(t)
	spec := bomSpecJSON(200)
	want := s.Compose(&converge.Task{Kind: "classicbom", KindVersion: 1, Reaction: converge.ReactionCompose, Spec: spec})
	if want.Outcome != converge.OutcomeOK {
		t.Fatal(want.Message)
	}
	before := s.ComposeStats()
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			r := s.Compose(&converge.Task{Kind: "classicbom", KindVersion: 1, Reaction: converge.ReactionCompose, Spec: spec})
			if !reflect.DeepEqual(r.Children, want.Children) || !reflect.DeepEqual(r.Edges, want.Edges) {
				errs <- fmt.Errorf("a concurrent compose differs: %d children, %d edges", len(r.Children), len(r.Edges))
				return
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if st := s.ComposeStats(); st.Fast-before.Fast != 8 || st.CUE != before.CUE {
		t.Errorf("compose stats %+v (before %+v): want 8 more on the fast path, none through CUE", st, before)
	}
}
