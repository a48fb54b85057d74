package scheduler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/convergehq/converge"
)

func TestSetFields(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		sets []flowSet
		want string
	}{
		{name: "empty doc", doc: ``, sets: []flowSet{{"a", json.RawMessage(`1`)}}, want: `{"a":1}`},
		{name: "null doc", doc: `null`, sets: []flowSet{{"a", json.RawMessage(`"x"`)}}, want: `{"a":"x"}`},
		{name: "replace and sort", doc: `{ "z": [1, {"q": "}"}], "a": "old" }`, sets: []flowSet{{"a", json.RawMessage(`"new"`)}},
			want: `{"a":"new","z":[1, {"q": "}"}]}`},
		{name: "nested create", doc: `{"b":true}`, sets: []flowSet{{"net.tgw_id", json.RawMessage(`"t"`)}},
			want: `{"b":true,"net":{"tgw_id":"t"}}`},
		{name: "nested keep siblings", doc: `{"net":{"x":1}}`, sets: []flowSet{{"net.y", json.RawMessage(`2`)}},
			want: `{"net":{"x":1,"y":2}}`},
		{name: "escaped key", doc: `{"a\"b":1}`, sets: []flowSet{{"c", json.RawMessage(`3`)}},
			want: `{"a\"b":1,"c":3}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := setFields([]byte(tt.doc), tt.sets)
			if err != nil {
				t.Fatal(err)
			}
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("invalid JSON %s: %v", got, err)
			}
			_ = json.Unmarshal([]byte(tt.want), &w)
			if !reflect.DeepEqual(g, w) {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
	if _, err := setFields([]byte(`{"net":5}`), []flowSet{{"net.x", json.RawMessage(`1`)}}); err == nil {
		t.Errorf("flow into a number: want an error")
	}
	if _, err := setFields([]byte(`[1]`), []flowSet{{"x", json.RawMessage(`1`)}}); err == nil {
		t.Errorf("flow into an array: want an error")
	}
}

func TestGetField(t *testing.T) {
	doc := []byte(`{"a": {"b": [1,2], "c": "x,}"}, "d": null, "e": 1.5e3}`)
	tests := []struct {
		name, path string
		want       string
		wantOK     bool
	}{
		{name: "nested array", path: "a.b", want: `[1,2]`, wantOK: true},
		{name: "nested string", path: "a.c", want: `"x,}"`, wantOK: true},
		{name: "null", path: "d", want: `null`, wantOK: true},
		{name: "number", path: "e", want: `1.5e3`, wantOK: true},
		{name: "missing", path: "f", wantOK: false},
		{name: "through a scalar", path: "e.x", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := getField(doc, tt.path)
			if ok != tt.wantOK || string(got) != tt.want {
				t.Errorf("getField(%q) = %s, %v; want %s, %v", tt.path, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestSplitObjectStrict pins the answers for malformed documents that the
// scanner once accepted: only what encoding/json accepts may flow.
func TestSplitObjectStrict(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		wantErr bool
	}{
		{name: "empty", doc: ``},
		{name: "null", doc: ` null `},
		{name: "object", doc: ` {"a": [true, -0.5e+3, "x\\q\u00e9"]} `},
		{name: "truncated literal", doc: `{"a":tru}`, wantErr: true},
		{name: "literal with tail", doc: `{"a":truex}`, wantErr: true},
		{name: "leading zero", doc: `{"a":01}`, wantErr: true},
		{name: "bare minus", doc: `{"a":-}`, wantErr: true},
		{name: "bad fraction", doc: `{"a":1.}`, wantErr: true},
		{name: "bad exponent", doc: `{"a":1e}`, wantErr: true},
		{name: "bad escape", doc: `{"a":"x\q"}`, wantErr: true},
		{name: "short unicode escape", doc: `{"a":"\u12"}`, wantErr: true},
		{name: "control character", doc: "{\"a\":\"x\ny\"}", wantErr: true},
		{name: "bad escape in key", doc: `{"\q":1}`, wantErr: true},
		{name: "trailing bytes", doc: `{"a":1} x`, wantErr: true},
		{name: "two objects", doc: `{"a":1}{}`, wantErr: true},
		{name: "trailing bytes after empty", doc: `{}]`, wantErr: true},
		{name: "trailing bytes after null", doc: `null x`, wantErr: true},
		{name: "whitespace only", doc: `  `, wantErr: true},
		{name: "nested unbalanced", doc: `{"a":[1}}`, wantErr: true},
		{name: "nested trailing comma", doc: `{"a":[1,]}`, wantErr: true},
		{name: "nested missing colon", doc: `{"a":{"b" 1}}`, wantErr: true},
		{name: "nested bare key", doc: `{"a":{b:1}}`, wantErr: true},
		{name: "array", doc: `[1]`, wantErr: true},
		{name: "number", doc: `1`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := splitObject([]byte(tt.doc))
			if got, want := err != nil, tt.wantErr; got != want {
				t.Errorf("splitObject(%q) error = %v, want error %v", tt.doc, err, want)
			}
			if tt.wantErr {
				if v, ok := getField([]byte(tt.doc), "a"); ok {
					t.Errorf("getField(%q, a) = %s, want no value", tt.doc, v)
				}
			}
		})
	}
}

// TestSplitObjectDepth checks the nesting limit is encoding/json's.
func TestSplitObjectDepth(t *testing.T) {
	for _, depth := range []int{maxDepth, maxDepth + 1} {
		doc := []byte(`{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`)
		_, err := splitObject(doc)
		if got, want := err == nil, json.Valid(doc); got != want {
			t.Errorf("depth %d: splitObject accepts %v, encoding/json %v", depth, got, want)
		}
	}
}

// FuzzSplitObject checks the scanner against encoding/json: it accepts
// exactly the documents json.Unmarshal decodes into a map (plus the empty
// document, an absent spec), yields the same fields with the same raw
// values, and setFields on what it accepts writes valid JSON.
func FuzzSplitObject(f *testing.F) {
	for _, s := range []string{
		`{"a":tru}`, `{"a":01}`, `{"a":"x\q"}`, `{"a":1} x`, `{"a":1}{}`, `null x`,
		`{"a": [true, -0.5e+3, {"b": "x\"}\u00e9"}], "a": null}`, `{"k\u00e9y":1,"\ud83d":2}`,
		`null`, ``, ` `, `{}`, `[1]`, `"s"`, "{\"\xff\":1}", `{"a":1.}`, `{"a":-}`, `{"a":1e+}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := splitObject(in)
		if len(in) == 0 {
			if err != nil || got != nil {
				t.Fatalf("splitObject(empty) = %v, %v; want no fields", got, err)
			}
			return
		}
		var want map[string]json.RawMessage
		wantErr := json.Unmarshal(in, &want)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("splitObject(%q) error = %v, encoding/json's = %v", in, err, wantErr)
		}
		if err != nil {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("splitObject(%q) has %d fields, encoding/json %d", in, len(got), len(want))
		}
		for _, f := range got {
			if w, ok := want[f.key]; !ok || !bytes.Equal(f.val, w) {
				t.Fatalf("splitObject(%q): field %q = %s, encoding/json's = %s (present %v)", in, f.key, f.val, w, ok)
			}
			if !strings.Contains(f.key, ".") {
				if v, ok := getField(in, f.key); !ok || !bytes.Equal(v, f.val) {
					t.Fatalf("getField(%q, %q) = %s, %v; want %s", in, f.key, v, ok, f.val)
				}
			}
		}
		out, err := setFields(in, []flowSet{{"flowed", json.RawMessage(`1`)}})
		if err != nil || !json.Valid(out) {
			t.Fatalf("setFields(%q) = %s, %v; want valid JSON", in, out, err)
		}
	})
}

func TestFindCycle(t *testing.T) {
	e := func(c, p converge.ID) converge.Edge { return converge.Edge{Consumer: c, Producer: p} }
	tests := []struct {
		name  string
		edges []converge.Edge
		want  converge.ID
	}{
		{name: "none", edges: nil, want: ""},
		{name: "chain", edges: []converge.Edge{e("r/1", "v/1"), e("v/1", "a/1"), e("r/1", "t/1")}, want: ""},
		{name: "diamond", edges: []converge.Edge{e("d/1", "b/1"), e("d/1", "c/1"), e("b/1", "a/1"), e("c/1", "a/1")}, want: ""},
		{name: "two-cycle", edges: []converge.Edge{e("a/1", "b/1"), e("b/1", "a/1"), e("c/1", "a/1")}, want: "a/1"},
		{name: "long cycle", edges: []converge.Edge{e("x/2", "x/1"), e("x/3", "x/2"), e("x/1", "x/3")}, want: "x/1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := findCycle(tt.edges); got != tt.want {
				t.Errorf("findCycle = %q, want %q", got, tt.want)
			}
		})
	}
}

// BenchmarkValueFlow is the scanner's share of computeSpec for a classic
// route: two values read from producer statuses, written into its spec.
func BenchmarkValueFlow(b *testing.B) {
	vpc := []byte(`{"vpc_id":"vpc-fd-07-team-12","cidr":"10.0.0.0/16","tags":{"team":"fd-07-team-12","cost":12.5e0}}`)
	tgw := []byte(`{"tgw_id":"tgw-fd-07-tgw","attachments":[1,2,3],"ok":true,"note":"a \"quoted\" \u00e9"}`)
	declared := []byte(`{"dest":"0.0.0.0/0","net":{"mtu":1500},"vpc_id":"","weight":-0.5}`)
	b.ReportAllocs()
	for b.Loop() {
		v1, ok1 := getField(vpc, "vpc_id")
		v2, ok2 := getField(tgw, "tgw_id")
		if !ok1 || !ok2 {
			b.Fatal("field missing")
		}
		if _, err := setFields(declared, []flowSet{{"vpc_id", v1}, {"net.tgw_id", v2}}); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzJSONEqual checks the raw-text comparison against decoding both
// sides with encoding/json and comparing the trees, on every pair of
// documents encoding/json decodes.
func FuzzJSONEqual(f *testing.F) {
	for _, p := range [][2]string{
		{`{"a":1,"b":[1,2]}`, `{"b":[1,2],"a":1}`},
		{`{"a":1,"b":[1,2]}`, `{"b":[2,1],"a":1}`},
		{`{"a":1.0}`, `{"a":1}`},
		{`{"a":"\u00e9"}`, `{"a":"é"}`},
		{`{"a":1,"a":2}`, `{"a":2}`},
		{`[{"x":[]}, null, true]`, `[ {"x":[ ]},null,true ]`},
		{`{"a":{"b":1}}`, `{"a":{"b":1,"c":2}}`},
		{`{"functional_domains":[{"name":"a","service_teams":[{"name":"t1"}]}]}`, `{"functional_domains":[{"name":"a","service_teams":[{"name":"t1"},{"name":"t2"}]}]}`},
		{`1`, `"1"`}, {`[]`, `{}`}, {`null`, `null `},
	} {
		f.Add([]byte(p[0]), []byte(p[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var x, y any
		if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
			return
		}
		if got, want := jsonEqual(a, b), reflect.DeepEqual(x, y); got != want {
			t.Fatalf("jsonEqual(%q, %q) = %v, decoded trees say %v", a, b, got, want)
		}
	})
}

// TestComposedSpecDuplicateKey: a composed child's spec is checked where
// it enters (validateSpecs), and a key written twice is refused with the
// key and its place named, as a status is (TestBadStatusRefusedOnArrival).
func TestComposedSpecDuplicateKey(t *testing.T) {
	children := []converge.Child{
		{Kind: "vpc", KindVersion: 1, Name: "a", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)},
		{Kind: "vpc", KindVersion: 1, Name: "b", Spec: json.RawMessage(`{"net":{"mtu":1500,"mtu":9000}}`)},
	}
	ids := []converge.ID{"vpc/a", "vpc/b"}
	err := validateSpecs(children, ids, []int{0, 1}, nil, nil)
	if got, want := fmt.Sprint(err), `vpc/b: spec: duplicate key "mtu" in net`; got != want {
		t.Errorf("validateSpecs = %s, want %s", got, want)
	}
	if err := validateSpecs(children, ids, []int{0}, nil, nil); err != nil {
		t.Errorf("validateSpecs of a spec without duplicates = %v", err)
	}
}
