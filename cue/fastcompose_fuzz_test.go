package cue

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/convergehq/converge"
)

// FuzzFastComposeExprs generates compose expressions from the fast
// subset's grammar (definitions with parameters, instances, lets, hidden
// fields, comprehensions, interpolations, operators, builtins, selectors
// and indexes, with now and then a construct just outside the subset)
// and a spec, both from the fuzzer's bytes, and composes the spec both
// ways: an expression on the fast path either falls back or gives CUE's
// exact composition (bothWays). FuzzFastCompose varies the spec of fixed
// expressions; this varies the expression.
func FuzzFastComposeExprs(f *testing.F) {
	for _, seed := range []string{"", "\x01\x02\x03", "\x07\x06\x05\x04\x03\x02\x01", "\xff\x80\x40\x20\x10\x08\x04\x02\x01",
		"\x02\x05\x01\x03\x04\x09\x02\x06\x01\x01\x07\x03", "abcdefghijklmnopqrstuvwxyz", "\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		g := &exprGen{b: b}
		expr, imports, spec := g.compose()
		s, err := Compile([]*converge.Kind{{Name: "t", Version: 1, Reactions: []string{converge.ReactionCompose},
			Compose: expr, ComposeImports: imports, ComposeAt: "kinds/t.cue:3:10"}})
		if err != nil {
			return
		}
		if fast, _, _ := s.ComposePath(tRef); !fast {
			return
		}
		t.Logf("expression %s\nspec %s", expr, spec)
		bothWays(t, s, spec)
	})
}

// TestExprGenOnFastPath: the generator is worth fuzzing with: over a
// range of inputs, most expressions it makes are on the fast path and
// most of those compose fast, some fall back.
func TestExprGenOnFastPath(t *testing.T) {
	const n = 200
	var onFast, composedFast int
	for i := range n {
		b := make([]byte, 64)
		for j := range b {
			b[j] = byte((i*131 + j*(i%7+3)*29) % 251)
		}
		g := &exprGen{b: b}
		expr, imports, spec := g.compose()
		s, err := Compile([]*converge.Kind{{Name: "t", Version: 1, Reactions: []string{converge.ReactionCompose},
			Compose: expr, ComposeImports: imports, ComposeAt: "kinds/t.cue:3:10"}})
		if err != nil {
			continue
		}
		if fast, _, _ := s.ComposePath(tRef); !fast {
			continue
		}
		onFast++
		if fast, _, _ := bothWays(t, s, spec); fast {
			composedFast++
		}
	}
	if onFast < n/2 || composedFast < onFast/4 {
		t.Errorf("of %d expressions %d are on the fast path, %d composed fast: want half and a quarter of those", n, onFast, composedFast)
	}
}

// exprGen makes an expression and a spec from bytes; once the bytes run
// out every choice is the first (a literal), so it always ends.
type exprGen struct {
	b       []byte
	imports map[string]bool
	defs    []genDef
	vars    []genVar
	depth   int
	inDef   bool // a definition reads no S
}

type genVar struct{ name, typ string } // typ: string, int, bool, team, tags

type genDef struct {
	name   string
	params []genVar
	fields []genVar // computed fields, by type
	hidden []genVar
}

func (g *exprGen) pick(n int) int {
	if len(g.b) == 0 || n <= 1 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return int(c) % n
}

func (g *exprGen) use(pkg string) string {
	if g.imports == nil {
		g.imports = map[string]bool{}
	}
	g.imports[pkg] = true
	return pkg[strings.LastIndex(pkg, "/")+1:]
}

func (g *exprGen) varOf(typ string) (string, bool) {
	var names []string
	for _, v := range g.vars {
		if v.typ == typ {
			names = append(names, v.name)
		}
	}
	if len(names) == 0 {
		return "", false
	}
	return names[g.pick(len(names))], true
}

func (g *exprGen) with(vs []genVar, f func() string) string {
	n := len(g.vars)
	g.vars = append(g.vars, vs...)
	out := f()
	g.vars = g.vars[:n]
	return out
}

var genStrings = []string{`"a"`, `"x-1"`, `""`, `"é"`, `"Z"`, `"_x"`, `"1"`, `"-7"`, `"q\"z"`, `"ab_cd"`}

func (g *exprGen) str() string {
	g.depth++
	defer func() { g.depth-- }()
	if g.depth > 3 {
		return genStrings[g.pick(len(genStrings))]
	}
	switch g.pick(12) {
	case 1, 2:
		if v, ok := g.varOf("string"); ok {
			return v
		}
	case 3:
		return fmt.Sprintf(`"\(%s)-\(%s)"`, g.str(), g.scalar())
	case 4:
		return g.str() + " + " + g.str()
	case 5:
		fn := []string{"ToUpper", "ToLower", "TrimSpace"}[g.pick(3)]
		return fmt.Sprintf("%s.%s(%s)", g.use("strings"), fn, g.str())
	case 6:
		switch g.pick(4) {
		case 0:
			return fmt.Sprintf("%s.TrimPrefix(%s, %s)", g.use("strings"), g.str(), g.str())
		case 1:
			return fmt.Sprintf("%s.Replace(%s, %s, %s, %s)", g.use("strings"), g.str(), g.str(), g.str(), g.int())
		case 2:
			return fmt.Sprintf(`%s.Join([%s, %s], "+")`, g.use("strings"), g.str(), g.str())
		}
		return fmt.Sprintf("%s.SliceRunes(%s, %d, %d)", g.use("strings"), g.str(), g.pick(3), g.pick(4))
	case 7:
		base := []int{2, 10, 16, 36, 62, 1, 63}[g.pick(7)]
		return fmt.Sprintf("%s.FormatInt(%s, %d)", g.use("strconv"), g.int(), base)
	case 8:
		if t, ok := g.varOf("team"); ok {
			return t + []string{".name", ".name", `.tags.a`, `.tags["_x"]`, `.tags._x`, `["name"]`}[g.pick(6)]
		}
		if !g.inDef {
			return []string{"S.s", `S.m.a`, `S.m["#x"]`, `S.m.#x`}[g.pick(4)]
		}
	case 9:
		if s, ok := g.selectDef("string"); ok {
			return s
		}
	case 10:
		return fmt.Sprintf("%s.Quote(%s)", g.use("strconv"), g.str())
	case 11:
		switch g.pick(3) {
		case 0:
			return fmt.Sprintf(`%s.Encode(%s.Sum256(%s))`, g.use("encoding/hex"), g.use("crypto/sha256"), g.str())
		case 1:
			return fmt.Sprintf("[%s, %s][%s]", g.str(), g.str(), []string{"0", "1", "2", g.int()}[g.pick(4)])
		}
		return fmt.Sprintf(`{a: %s, "b": %s}[%s]`, g.str(), g.str(), []string{`"a"`, `"b"`, `"c"`}[g.pick(3)])
	}
	return genStrings[g.pick(len(genStrings))]
}

var genInts = []string{"0", "1", "2", "7", "100", "-1", "-3", "9223372036854775807"}

func (g *exprGen) int() string {
	g.depth++
	defer func() { g.depth-- }()
	if g.depth > 3 {
		return genInts[g.pick(len(genInts))]
	}
	switch g.pick(10) {
	case 1, 2:
		if v, ok := g.varOf("int"); ok {
			return v
		}
	case 3:
		return fmt.Sprintf("(%s %s %s)", g.int(), []string{"+", "-", "*", "*"}[g.pick(4)], g.int())
	case 4:
		return "-" + g.int()
	case 5:
		return fmt.Sprintf("len(%s)", g.str())
	case 6:
		if t, ok := g.varOf("team"); ok {
			return t + ".n"
		}
		if !g.inDef {
			return "S.k"
		}
	case 7:
		if g.pick(2) == 0 {
			return fmt.Sprintf("%s.Atoi(%s)", g.use("strconv"), g.str())
		}
		return fmt.Sprintf("%s.ParseInt(%s, %s, %d)", g.use("strconv"), g.str(), []string{"10", "16", "0", "S.k", "1"}[g.pick(5)], []int{64, 8, 0}[g.pick(3)])
	case 8:
		if s, ok := g.selectDef("int"); ok {
			return s
		}
	case 9:
		if t, ok := g.varOf("team"); ok {
			return fmt.Sprintf("len(%s.tags)", t)
		}
	}
	return genInts[g.pick(len(genInts))]
}

func (g *exprGen) bool() string {
	g.depth++
	defer func() { g.depth-- }()
	if g.depth > 3 {
		return []string{"true", "false"}[g.pick(2)]
	}
	switch g.pick(10) {
	case 1:
		if v, ok := g.varOf("bool"); ok {
			return v
		}
	case 2:
		return fmt.Sprintf("(%s %s %s)", g.scalar(), []string{"==", "!="}[g.pick(2)], g.scalar())
	case 3:
		return fmt.Sprintf("(%s %s %s)", g.int(), []string{"<", "<=", ">", ">="}[g.pick(4)], g.int())
	case 4:
		return fmt.Sprintf("(%s < %s)", g.str(), g.str())
	case 5:
		return "!" + g.bool()
	case 6:
		return fmt.Sprintf("(%s %s %s)", g.bool(), []string{"&&", "||"}[g.pick(2)], g.bool())
	case 7:
		if t, ok := g.varOf("team"); ok {
			return t + ".on"
		}
	case 8:
		return fmt.Sprintf("%s.%s(%s, %s)", g.use("strings"), []string{"HasPrefix", "HasSuffix", "Contains"}[g.pick(3)], g.str(), g.str())
	case 9:
		return fmt.Sprintf(`(%s %s "^[a-c]")`, g.str(), []string{"=~", "!~"}[g.pick(2)])
	}
	return []string{"true", "false"}[g.pick(2)]
}

func (g *exprGen) scalar() string {
	switch g.pick(4) {
	case 1:
		return g.int()
	case 2:
		return g.bool()
	case 3:
		return "null"
	}
	return g.str()
}

// value is a value of any type: what a child's spec is made of.
func (g *exprGen) value() string {
	g.depth++
	defer func() { g.depth-- }()
	if g.depth > 3 {
		return g.scalar()
	}
	switch g.pick(12) {
	case 1:
		return g.int()
	case 2:
		return g.bool()
	case 3, 4:
		return g.structLit()
	case 5:
		return fmt.Sprintf("[%s, %s]", g.value(), g.scalar())
	case 6, 7:
		if inst, ok := g.instance(); ok {
			return inst
		}
	case 8:
		if t, ok := g.varOf("team"); ok {
			return []string{t, t + ".tags", "{" + t + "}"}[g.pick(3)]
		}
		return "S.m"
	case 9:
		if t, ok := g.varOf("team"); ok {
			return fmt.Sprintf("[for k, v in %s.tags {%s}]", t, g.with([]genVar{{"k", "string"}, {"v", "string"}}, func() string {
				return "{" + g.fieldsOf(2) + "}"
			}))
		}
	case 10:
		src := fmt.Sprintf("{b: %s, a: %s}", g.str(), g.str())
		if t, ok := g.varOf("team"); ok && g.pick(2) == 0 {
			src = t + ".tags"
		}
		return fmt.Sprintf("[for k, v in %s let u = k + v if %s {key: k, val: u}]", src, g.with([]genVar{{"k", "string"}, {"v", "string"}}, g.bool))
	case 11:
		return fmt.Sprintf("[for x in [%s, %s] {[x, %s]}]", g.scalar(), g.scalar(), g.scalar())
	}
	return g.str()
}

// structLit is a struct literal of static labels, and now and then a
// dynamic one, an if, a for or a let.
func (g *exprGen) structLit() string {
	fields := g.fieldsOf(3)
	switch g.pick(8) {
	case 1:
		fields += fmt.Sprintf(`, "\(%s)": %s`, g.str(), g.scalar())
	case 2:
		fields += fmt.Sprintf(", if %s {c: %s}", g.bool(), g.scalar())
	case 3:
		if t, ok := g.varOf("team"); ok {
			fields += fmt.Sprintf(`, for k, v in %s.tags {"x-\(k)": v}`, t)
		}
	case 4:
		return fmt.Sprintf("{let z = %s, %s, w: z}", g.str(), fields)
	}
	return "{" + fields + "}"
}

func (g *exprGen) fieldsOf(max int) string {
	labels := []string{"a", `"b-c"`, "kind", "z2", `"_q"`, "n"}
	var out []string
	seen := map[string]bool{}
	for range g.pick(max) + 1 {
		l := labels[g.pick(len(labels))]
		if seen[l] {
			continue
		}
		seen[l] = true
		out = append(out, l+": "+g.value())
	}
	return strings.Join(out, ", ")
}

// instance is #d & {...} with the literal's fields in any order, and now
// and then a chain, a parameter missing or one of the wrong type.
func (g *exprGen) instance() (string, bool) {
	if len(g.defs) == 0 {
		return "", false
	}
	d := g.defs[g.pick(len(g.defs))]
	var sets []string
	for _, p := range d.params {
		if g.pick(8) == 0 {
			continue // not set
		}
		var v string
		switch p.typ {
		case "string":
			v = g.str()
		case "int", "number":
			v = g.int()
		case "bool":
			v = g.bool()
		default:
			v = g.value()
		}
		if g.pick(10) == 0 {
			v = g.scalar() // perhaps of the wrong type
		}
		sets = append(sets, p.name+": "+v)
	}
	if g.pick(3) == 0 {
		for i := range sets { // another order
			j := g.pick(len(sets))
			sets[i], sets[j] = sets[j], sets[i]
		}
	}
	lit := "{" + strings.Join(sets, ", ") + "}"
	switch g.pick(10) {
	case 0:
		return lit + " & " + d.name, true
	case 1:
		return fmt.Sprintf("%s & %s & {%s: %s}", d.name, lit, d.params[0].name, g.str()), true
	case 2:
		return d.name, true
	}
	return d.name + " & " + lit, true
}

// selectDef selects a computed field of type typ from an instance.
func (g *exprGen) selectDef(typ string) (string, bool) {
	if len(g.defs) == 0 {
		return "", false
	}
	inst, _ := g.instance()
	d := g.defs[0]
	for _, dd := range g.defs {
		if strings.HasPrefix(inst, dd.name) || strings.Contains(inst, "& "+dd.name) {
			d = dd
		}
	}
	for _, f := range append(append([]genVar{}, d.fields...), d.hidden...) {
		if f.typ == typ {
			return fmt.Sprintf("(%s).%s", inst, f.name), true
		}
	}
	return "", false
}

// def declares a definition: parameters (a field now and then named
// like a type) and computed fields over them, in an order of the bytes.
func (g *exprGen) def(i int) string {
	d := genDef{name: fmt.Sprintf("#d%d", i)}
	types := []string{"string", "int", "bool", "_", "number"}
	for j := range g.pick(3) + 1 {
		name := fmt.Sprintf("p%d", j)
		if g.pick(12) == 0 {
			name = []string{"number", "int", "string"}[g.pick(3)] // shadows a type
		}
		d.params = append(d.params, genVar{name, types[g.pick(len(types))]})
	}
	var decls []string
	for _, p := range d.params {
		decls = append(decls, p.name+": "+p.typ)
	}
	saved := g.vars
	g.vars, g.inDef = nil, true
	for _, p := range d.params {
		if p.typ != "_" && p.typ != "number" {
			g.vars = append(g.vars, p)
		}
	}
	for j := range g.pick(3) + 1 {
		typ := []string{"string", "int", "bool"}[g.pick(3)]
		var v string
		switch typ {
		case "string":
			v = g.str()
		case "int":
			v = g.int()
		default:
			v = g.bool()
		}
		f := genVar{fmt.Sprintf("c%d", j), typ}
		if g.pick(3) == 0 {
			f.name = fmt.Sprintf("_h%d", j)
			d.hidden = append(d.hidden, f)
		} else {
			d.fields = append(d.fields, f)
		}
		decls = append(decls, f.name+": "+v)
	}
	g.vars, g.inDef = saved, false
	for k := range decls { // the declaration order of the bytes
		j := g.pick(len(decls))
		decls[k], decls[j] = decls[j], decls[k]
	}
	g.defs = append(g.defs, d)
	return d.name + ": {" + strings.Join(decls, ", ") + "}"
}

// compose returns an expression, its imports (quoted) and a spec.
func (g *exprGen) compose() (expr string, imports []string, spec string) {
	var decls []string
	decls = append(decls, "let S = spec")
	for i := range g.pick(3) {
		decls = append(decls, g.def(i))
	}
	if g.pick(2) == 0 {
		decls = append(decls, "_s0: "+g.str())
		g.vars = append(g.vars, genVar{"_s0", "string"})
	}
	if g.pick(3) == 0 {
		decls = append(decls, "_h: "+g.int())
		g.vars = append(g.vars, genVar{"_h", "int"})
	}
	team := []genVar{{"t", "team"}, {"i", "int"}}
	if g.pick(10) == 0 {
		team[1].name = "_" // CUE never binds _
	}
	child := g.with(team, func() string {
		return fmt.Sprintf(`{kind: "k", name: %s, spec: %s}`, g.str(), g.value())
	})
	children := fmt.Sprintf("for %s, t in S.teams if %s ", team[1].name, g.with(team, g.bool)) + child
	switch g.pick(4) {
	case 1:
		children += fmt.Sprintf(`, {kind: "k2", name: "fixed", spec: %s}`, g.value())
	case 2:
		children = "for t in S.teams {[" + g.with(team[:1], func() string {
			return fmt.Sprintf(`{kind: "k", name: %s}, {kind: "k3", name: t.name, spec: %s}`, g.str(), g.value())
		}) + "]}"
	}
	decls = append(decls, "children: ["+children+"]")
	if g.pick(3) == 0 {
		decls = append(decls, `edges: [for t in S.teams {consumer: "k/\(t.name)", producer: "p/x", flows: {"status.a": "spec.x", "status.b": "spec.x", "status.\(t.name)": "spec.y"}}]`)
	}
	if g.pick(4) == 0 {
		decls = append(decls, "other: "+g.value())
	}
	expr = "{\n\t" + strings.Join(decls, "\n\t") + "\n}"
	for p := range g.imports {
		if strings.Contains(expr, p[strings.LastIndex(p, "/")+1:]+".") {
			imports = append(imports, `"`+p+`"`) // CUE refuses an unused import
		}
	}
	sort.Strings(imports)
	return expr, imports, g.spec()
}

// spec is a spec of the shape the expressions read, its values mostly
// of the expected types.
func (g *exprGen) spec() string {
	strs := []any{"a", "x-1", "", "é", "Z", "_x", "1", "-7", "q\"z", "ab_cd", "0x1f"}
	odd := []any{nil, 1.5, int64(-1), true, []any{"a"}, map[string]any{"a": "b"}, int64(1) << 62, json.Number("-0")}
	val := func(want string) any {
		if g.pick(10) == 0 {
			return odd[g.pick(len(odd))]
		}
		switch want {
		case "int":
			return []int64{0, 1, -1, 2, 7, -5, 36}[g.pick(7)]
		case "bool":
			return g.pick(2) == 0
		}
		return strs[g.pick(len(strs))]
	}
	tags := func() map[string]any {
		m := map[string]any{}
		keys := []string{"a", "b", "_x", "#x", "kind"}
		for range g.pick(3) {
			m[keys[g.pick(len(keys))]] = val("string")
		}
		return m
	}
	var teams []any
	for range g.pick(4) {
		teams = append(teams, map[string]any{"name": val("string"), "n": val("int"), "on": val("bool"), "tags": tags()})
	}
	if teams == nil {
		teams = []any{}
	}
	b, _ := json.Marshal(map[string]any{"teams": teams, "m": tags(), "k": val("int"), "s": val("string")})
	return string(b)
}
