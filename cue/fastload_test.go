package cue

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	cuelang "cuelang.org/go/cue"

	"github.com/convergehq/converge"
)

// fastLoadKinds are plain schemas (every one on the fast check), so a
// document of theirs can be judged on its JSON.
const fastLoadKinds = `
-- kinds/plain.cue --
type: "kind", kind: "plain", kind_version: 1, reactions: ["reconcile"]
spec: {
	n:     int
	s?:    string
	tags?: [string]: string
	teams?: [...{name: =~"^[a-z]+$"}]
	sub?: {x: int, y?: bool}
}
config: region: string
-- kinds/acct.cue --
type: "kind", kind: "acct", kind_version: 1, reactions: ["reconcile"]
spec: team: string
status: id?: string
-- kinds/use.cue --
type: "kind", kind: "use", kind_version: 1, reactions: ["reconcile"]
spec: {id: string, n: int}
-- configs/c.cue --
type: "providerconfig", name: "c", kind: "plain", kind_version: 1
config: region: "eu"
-- resources/a.cue --
type: "resource", kind: "acct", kind_version: 1, name: "a"
spec: team: "t"
`

// TestLoadFastAgrees: a document the fast check judges (fastValid) gets
// the very findings and spec JSON that CUE alone gives it, on the cases
// where a CUE value and its JSON differ: optional, hidden, definition and
// required-constraint fields, defaults, non-concrete values, and numbers
// CUE types apart from their JSON.
func TestLoadFastAgrees(t *testing.T) {
	docs := map[string]string{
		"plain":              `spec: {n: 1, s: "x", teams: [{name: "a"}, {name: "b"}], sub: {x: 2}}`,
		"comprehension":      `spec: {n: 3, teams: [for i in ["a", "b", "c"] {name: i}]}`,
		"optional in data":   `spec: {n: 1, extra?: 2, sub: {x: 1, z?: 3}}`,
		"hidden in data":     `spec: {n: 1, _h: 2, sub: {x: 1, _k: "v"}}`,
		"definition":         `spec: {n: 1, #d: 2, sub: {x: 1, #e: {a: 1}}}`,
		"closed by def":      "#D: {n: int, s?: string}\nspec: #D & {n: 4}",
		"required in data":   `spec: {n: 1, must!: 2}`,
		"default kept":       `spec: {n: *1 | 2}`,
		"default refused":    `spec: {n: 1, s: *2 | "y"}`,
		"default both ways":  `spec: {n: *"a" | 3}`,
		"not concrete":       `spec: {n: int}`,
		"bound":              `spec: {n: >3}`,
		"float for int":      `spec: {n: 1.0}`,
		"exponent":           `spec: {n: 1e3}`,
		"huge int":           `spec: {n: 100000000000000000000000}`,
		"unknown field":      `spec: {n: 1, nope: true}`,
		"deep unknown":       `spec: {n: 1, sub: {x: 1, nope: 2}}`,
		"missing":            `spec: {s: "x"}`,
		"regexp":             `spec: {n: 1, teams: [{name: "Bad"}]}`,
		"pattern":            `spec: {n: 1, tags: {a: "b", c: 3}}`,
		"null":               `spec: {n: null}`,
		"bytes":              `spec: {n: 1, s: 'x'}`,
		"bytes raw":          "spec: {n: 1, s: #'x'#}",
		"bytes interpolated": "_x: 1\nspec: {n: 1, s: '\\(_x)'}",
		"bytes builtin":      "import \"encoding/base64\"\nspec: {n: 1, s: base64.Decode(null, \"eA==\")}",
		"yaml":               "yaml:spec: {n: 1, s: x}",
		"yaml binary":        "yaml:spec: {n: 1, s: !!binary eA==}",
		"allowed import":     "import \"strings\"\nspec: {n: 1, s: strings.ToUpper(\"x\")}",
		"config":             "provider_config_ref: \"c\"\nspec: n: 1",
		"depends":            "depends_on: [{resource: \"acct/a\", flows: {\"status.id\": \"spec.id\"}}]\nspec: n: 1",
		"depends present":    "depends_on: [{resource: \"acct/a\", flows: {\"status.id\": \"spec.id\"}}]\nspec: {n: 1, id: 2}",
	}
	i := 0
	for name, body := range docs {
		i++
		kind := "plain"
		if name == "depends" || name == "depends present" {
			kind = "use"
		}
		src := fastLoadKinds + fmt.Sprintf("-- resources/r.cue --\ntype: \"resource\", kind: %q, kind_version: 1, name: \"r%d\"\n%s\n", kind, i, body)
		if yaml, ok := strings.CutPrefix(body, "yaml:"); ok {
			src = fastLoadKinds + fmt.Sprintf("-- resources/r.yaml --\ntype: resource\nkind: %s\nkind_version: 1\nname: r%d\n%s\n", kind, i, yaml)
		}
		t.Run(name, func(t *testing.T) {
			fast, err := Load(fsOf(src), ".", Options{})
			if err != nil {
				t.Fatal(err)
			}
			slow, err := Load(fsOf(src), ".", Options{noFastDocuments: true})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fast.Findings, slow.Findings) {
				t.Errorf("findings differ:\nfast %v\n CUE %v", fast.Findings, slow.Findings)
			}
			if f, s := specOf(fast, kind), specOf(slow, kind); f != s {
				t.Errorf("spec differs: fast %s, CUE %s", f, s)
			}
		})
	}
}

// specOf is the spec JSON of res's one resource of kind ("" if none).
func specOf(res *Result, kind string) string {
	for _, r := range res.Desired.Resources {
		if r.Kind == kind {
			return string(r.Spec)
		}
	}
	return ""
}

// TestLoadFastJudges: the fast check does judge a plain document (else
// TestLoadFastAgrees would compare CUE with itself).
func TestLoadFastJudges(t *testing.T) {
	src := fastLoadKinds + "-- resources/r.cue --\ntype: \"resource\", kind: \"plain\", kind_version: 1, name: \"r\"\nspec: {n: 1, teams: [{name: \"a\"}]}\n"
	res, err := Load(fsOf(src), ".", Options{})
	if err != nil || !res.Valid() {
		t.Fatalf("load: %v %v", err, res.Findings)
	}
	key := schemaKey{converge.KindRef{Kind: "plain", Version: 1}, "spec"}
	if res.Schemas.fast[key] == nil {
		t.Fatal("kind plain has no fast check: the agreement test would not exercise it")
	}
	l, d := &loader{schemas: res.Schemas}, &document{json: true}
	v := newSchemas().newEvaluator().ctx.CompileString(`{n: 1, teams: [{name: "a"}]}`)
	if b := l.fastValid(d, v, key, nil); string(b) != `{"n":1,"teams":[{"name":"a"}]}` {
		t.Errorf("fastValid = %s, want the JSON", b)
	}
	if b := l.fastValid(d, v.FillPath(cuelang.ParsePath("n"), "x"), key, nil); b != nil {
		t.Errorf("fastValid of a bad spec = %s, want nil (CUE judges)", b)
	}
}
