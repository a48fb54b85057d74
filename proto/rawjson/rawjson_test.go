package rawjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		wantErr string // "" for none
	}{
		{name: "object", doc: ` {"a": [true, -0.5e+3, "x\\q\u00e9"], "b": null} `},
		{name: "scalar", doc: `1`},
		{name: "null", doc: `null`},
		{name: "same key in two objects", doc: `{"a":{"a":1},"b":{"a":2}}`},
		{name: "empty", doc: ``, wantErr: "invalid JSON"},
		{name: "truncated literal", doc: `{"a":tru}`, wantErr: "invalid JSON"},
		{name: "leading zero", doc: `{"a":01}`, wantErr: "invalid JSON"},
		{name: "bad escape", doc: `{"a":"x\q"}`, wantErr: "invalid JSON"},
		{name: "control character", doc: "{\"a\":\"x\ny\"}", wantErr: "invalid JSON"},
		{name: "trailing bytes", doc: `{"a":1} x`, wantErr: "invalid JSON"},
		{name: "trailing comma", doc: `{"a":[1,]}`, wantErr: "invalid JSON"},
		{name: "duplicate", doc: `{"a":1,"b":2,"a":3}`, wantErr: `duplicate key "a"`},
		{name: "duplicate equal", doc: `{"a":1,"a":1}`, wantErr: `duplicate key "a"`},
		{name: "duplicate escaped", doc: `{"a":1,"\u0061":2}`, wantErr: `duplicate key "a"`},
		{name: "duplicate invalid UTF-8", doc: "{\"\xff\":1,\"\xfe\":2}", wantErr: "duplicate key \"\ufffd\""},
		{name: "duplicate nested", doc: `{"net":{"subnets":[{},{"zone":"a","zone":"b"}]}}`, wantErr: `duplicate key "zone" in net.subnets[1]`},
		{name: "duplicate in a list", doc: `[[{"x":1,"x":2}]]`, wantErr: `duplicate key "x" in [0][0]`},
		{name: "duplicate under an odd key", doc: `{"a.b":{"x":1,"x":2}}`, wantErr: `duplicate key "x" in "a.b"`},
		{name: "too deep", doc: strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), wantErr: ErrTooDeep.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check([]byte(tt.doc))
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.wantErr {
				t.Errorf("Check(%.40q) = %q, want %q", tt.doc, got, tt.wantErr)
			}
		})
	}
}

// TestCheckManyKeys crosses manyKeys, where Check looks keys up in a map.
func TestCheckManyKeys(t *testing.T) {
	for _, n := range []int{manyKeys - 1, manyKeys, manyKeys + 1, 200} {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		doc := b.String()
		if err := Check([]byte(doc + `"last":0}`)); err != nil {
			t.Errorf("%d keys: %v", n, err)
		}
		for _, dup := range []int{0, n - 1} {
			err := Check([]byte(doc + fmt.Sprintf(`"k%d":0}`, dup)))
			var d *DuplicateKeyError
			if !errors.As(err, &d) || d.Key != fmt.Sprintf("k%d", dup) {
				t.Errorf("%d keys, k%d again: %v, want a duplicate key", n, dup, err)
			}
		}
	}
}

func TestCheckObject(t *testing.T) {
	for doc, want := range map[string]error{
		`{"a":1}`:  nil,
		` {} `:     nil,
		`["acct"]`: ErrNotObject,
		`nope`:     ErrNotObject,
		``:         ErrNotObject,
		`{"a":`:    ErrSyntax,
	} {
		if got := CheckObject([]byte(doc)); got != want {
			t.Errorf("CheckObject(%q) = %v, want %v", doc, got, want)
		}
	}
}

// TestDepth: the limit is encoding/json's, and a document of brackets
// far deeper is an error from every function, not a stack overflow.
func TestDepth(t *testing.T) {
	for _, depth := range []int{MaxDepth, MaxDepth + 1} {
		doc := []byte(`{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`)
		if got, want := Check(doc) == nil, json.Valid(doc); got != want {
			t.Errorf("depth %d: Check accepts %v, encoding/json %v", depth, got, want)
		}
		if got, want := Fields(doc, func(Key, []byte) error { return nil }) == nil, json.Valid(doc); got != want {
			t.Errorf("depth %d: Fields accepts %v, encoding/json %v", depth, got, want)
		}
		list := doc[5 : len(doc)-1]
		if got, want := Elements(list, func([]byte) error { return nil }) == nil, json.Valid(list); got != want {
			t.Errorf("depth %d: Elements accepts %v, encoding/json %v", depth-1, got, want)
		}
	}
	const deep = 2_000_000
	lists := []byte(strings.Repeat("[", deep) + strings.Repeat("]", deep))
	objects := []byte(strings.Repeat(`{"a":`, deep) + "1" + strings.Repeat("}", deep))
	for _, doc := range [][]byte{lists, objects} {
		if Check(doc) == nil {
			t.Error("Check accepts a document nested two million deep")
		}
		if Fields(doc, func(Key, []byte) error { return nil }) == nil {
			t.Error("Fields accepts a document nested two million deep")
		}
		if Elements(doc, func([]byte) error { return nil }) == nil {
			t.Error("Elements accepts a document nested two million deep")
		}
		if _, err := Value(doc, 0, 0); err == nil {
			t.Error("Value accepts a document nested two million deep")
		}
		if Equal(doc, append(append([]byte{}, doc...), ' ')) {
			t.Error("Equal compares documents nested two million deep")
		}
	}
}

func TestField(t *testing.T) {
	doc := []byte(`{"a": {"b": [1,2]}, "d": null, "\u0065": 1.5e3, "a": "last"}`)
	for key, want := range map[string]string{"a": `"last"`, "d": `null`, "e": `1.5e3`, "f": ""} {
		v, ok, err := Field(doc, key)
		if err != nil || ok != (want != "") || string(v) != want {
			t.Errorf("Field(%s) = %s, %v, %v; want %s", key, v, ok, err, want)
		}
	}
	if _, ok, err := Field([]byte(` null `), "a"); ok || err != nil {
		t.Errorf("Field(null) = %v, %v; want no field, no error", ok, err)
	}
	for _, doc := range []string{`[1]`, `"a"`} {
		if _, _, err := Field([]byte(doc), "a"); err != ErrNotObject {
			t.Errorf("Field(%s) error = %v, want ErrNotObject", doc, err)
		}
	}
	if _, _, err := Field([]byte(`{"a":[tru, 1x, nul]}`), "b"); err != ErrSyntax {
		t.Errorf("Field of a malformed object: %v, want ErrSyntax", err)
	}
}

// duplicates reports whether a document encoding/json accepts has an
// object with one key twice, reading it with encoding/json's tokens.
func duplicates(b []byte) bool {
	type frame struct {
		obj       bool
		keys      map[string]bool
		expectKey bool
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			panic(err)
		}
		top := len(stack) - 1
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:top]
			if top > 0 && stack[top-1].obj {
				stack[top-1].expectKey = true
			}
			continue
		}
		if top >= 0 && stack[top].obj && stack[top].expectKey {
			k := tok.(string)
			if stack[top].keys[k] {
				return true
			}
			stack[top].keys[k] = true
			stack[top].expectKey = false
			continue
		}
		if d, ok := tok.(json.Delim); ok {
			stack = append(stack, &frame{obj: d == '{', keys: map[string]bool{}, expectKey: true})
			continue
		}
		if top >= 0 && stack[top].obj {
			stack[top].expectKey = true
		}
	}
}

var seeds = []string{
	`{"a":tru}`, `{"a":01}`, `{"a":"x\q"}`, `{"a":1} x`, `{"a":1}{}`, `null x`, `{"a":[tru, 1x, nul]}`,
	`{"a": [true, -0.5e+3, {"b": "x\"}\u00e9"}], "a": null}`, `{"k\u00e9y":1,"\ud83d":2}`,
	`null`, ``, ` `, `{}`, `[1]`, `"s"`, "{\"\xff\":1}", "{\"\xff\":1,\"\xfe\":2}", `{"a":1.}`, `{"a":-}`, `{"a":1e+}`,
	`{"a":{"b":1,"b":2}}`, `[{"x":1},{"x":1,"y":[{"z":0,"\u007a":1}]}]`, `[[[[]]]]`, `{"a":[1,2,]}`,
}

// FuzzCheck: Check accepts exactly what encoding/json accepts and holds no
// duplicate key as encoding/json reads keys.
func FuzzCheck(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		err := Check(in)
		valid := json.Valid(in)
		want := valid && !duplicates(in)
		if (err == nil) != want {
			t.Fatalf("Check(%q) = %v; encoding/json: valid %v, duplicates %v", in, err, valid, valid && duplicates(in))
		}
		var d *DuplicateKeyError
		if errors.As(err, &d) && !valid {
			// A duplicate found before a syntax error: still refused.
			return
		}
		if err := CheckObject(in); err == nil {
			var m map[string]any
			if json.Unmarshal(in, &m) != nil || m == nil {
				t.Fatalf("CheckObject(%q) accepts what is not an object", in)
			}
		}
	})
}

// FuzzCut: Fields, Field and Elements accept exactly what encoding/json
// decodes into a map or a slice and cut the same raw values.
func FuzzCut(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var want map[string]json.RawMessage
		wantErr := json.Unmarshal(in, &want)
		got := map[string][]byte{}
		err := Fields(in, func(k Key, v []byte) error {
			got[k.String()] = v
			if !k.Is(k.String()) {
				t.Fatalf("key %q is not its own text", k.String())
			}
			return nil
		})
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("Fields(%q) error = %v, encoding/json's = %v", in, err, wantErr)
		}
		if err == nil {
			if len(got) != len(want) {
				t.Fatalf("Fields(%q) has %d keys, encoding/json %d", in, len(got), len(want))
			}
			for k, w := range want {
				if v, ok, err := Field(in, k); err != nil || !ok || !bytes.Equal(v, w) || !bytes.Equal(got[k], w) {
					t.Fatalf("Field(%q, %q) = %s, %v, %v; encoding/json's %s", in, k, v, ok, err, w)
				}
			}
		}
		var wantList []json.RawMessage
		wantErr = json.Unmarshal(in, &wantList)
		isNull := bytes.Equal(bytes.TrimSpace(in), []byte("null"))
		var list [][]byte
		err = Elements(in, func(v []byte) error { list = append(list, v); return nil })
		if (err == nil) != (wantErr == nil && !isNull) {
			t.Fatalf("Elements(%q) error = %v, encoding/json's = %v", in, err, wantErr)
		}
		if err == nil {
			if len(list) != len(wantList) {
				t.Fatalf("Elements(%q) has %d elements, encoding/json %d", in, len(list), len(wantList))
			}
			for i := range list {
				if !bytes.Equal(list[i], wantList[i]) {
					t.Fatalf("Elements(%q)[%d] = %s, encoding/json's %s", in, i, list[i], wantList[i])
				}
			}
		}
		if end, err := Value(in, skipSpace(in, 0), 0); (err == nil && skipSpace(in, end) == len(in)) != json.Valid(in) {
			t.Fatalf("Value(%q) = %d, %v; encoding/json valid %v", in, end, err, json.Valid(in))
		}
	})
}

// FuzzEqual checks Equal against decoding both sides with encoding/json
// and comparing the trees; a text encoding/json refuses equals only its
// very bytes.
func FuzzEqual(f *testing.F) {
	for _, p := range [][2]string{
		{`{"a":1,"b":[1,2]}`, `{"b":[1,2],"a":1}`},
		{`{"a":1.0}`, `{"a":1}`},
		{`{"a":"\u00e9"}`, `{"a":"é"}`},
		{`{"a":1,"a":2}`, `{"a":2}`},
		{`[{"x":[]}, null, true]`, `[ {"x":[ ]},null,true ]`},
		{`{"a":tru}`, `{"a":true}`}, {`[1,]`, `[1]`},
		{`1`, `"1"`}, {`[]`, `{}`}, {`null`, `null `},
	} {
		f.Add([]byte(p[0]), []byte(p[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var x, y any
		if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
			if Equal(a, b) && !bytes.Equal(a, b) {
				t.Fatalf("Equal(%q, %q) holds for invalid JSON", a, b)
			}
			return
		}
		if got, want := Equal(a, b), reflect.DeepEqual(x, y); got != want {
			t.Fatalf("Equal(%q, %q) = %v, decoded trees say %v", a, b, got, want)
		}
	})
}

// status is a worker's status of about 1 KB.
var status = []byte(`{"id":"vpc-0a1b2c3d4e5f","arn":"arn:aws:ec2:eu-west-1:123456789012:vpc/vpc-0a1b2c3d4e5f","cidr":"10.12.0.0/16",` +
	`"state":"available","owner":"123456789012","dhcp_options_id":"dopt-0123456789abcdef0","instance_tenancy":"default",` +
	`"is_default":false,"ipv6":[{"association_id":"vpc-cidr-assoc-0123456789","cidr":"2001:db8::/56","state":"associated"}],` +
	`"tags":{"team":"fd-07-team-12","cost_center":"cc-1234","env":"prod","owner":"platform","note":"a \"quoted\" \u00e9"},` +
	`"subnets":[{"id":"subnet-01","az":"eu-west-1a","cidr":"10.12.0.0/20","public":true},{"id":"subnet-02","az":"eu-west-1b","cidr":"10.12.16.0/20","public":true},` +
	`{"id":"subnet-03","az":"eu-west-1c","cidr":"10.12.32.0/20","public":false},{"id":"subnet-04","az":"eu-west-1a","cidr":"10.12.48.0/20","public":false}],` +
	`"route_tables":["rtb-01","rtb-02","rtb-03"],"main_route_table":"rtb-01","default_security_group":"sg-0123456789abcdef0",` +
	`"flow_logs":{"enabled":true,"destination":"arn:aws:s3:::flow-logs-bucket","retention_days":90,"format":"${version} ${account-id}"},` +
	`"observed_at":"2026-12-02T00:00:00Z","generation":17,"weight":-0.5e-3}`)

func BenchmarkCheck(b *testing.B) {
	b.SetBytes(int64(len(status)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Check(status); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValid is encoding/json's validation of the same status, to
// compare with BenchmarkCheck.
func BenchmarkValid(b *testing.B) {
	b.SetBytes(int64(len(status)))
	b.ReportAllocs()
	for b.Loop() {
		if !json.Valid(status) {
			b.Fatal("invalid")
		}
	}
}

func BenchmarkField(b *testing.B) {
	b.SetBytes(int64(len(status)))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := Field(status, "weight"); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
