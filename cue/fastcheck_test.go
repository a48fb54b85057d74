package cue

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/convergehq/converge"
)

// fastSchemas are schemas in the fast subset (and a few outside it) with
// data that probes every rule.
var fastSchemas = []struct {
	src         string
	status      bool
	unsupported bool
	valid       []string // the fast check must accept these
	samples     []string // anything: probed both ways
}{
	{src: `team_name: string`, valid: []string{`{"team_name":"a"}`, `{ "team_name" : "x\u00e9" }`},
		samples: []string{`{}`, `{"team_name":1}`, `{"team_name":"a","x":1}`, `{"team_name":null}`, `{"team_name":"a","team_name":"b"}`, `[]`, `"a"`}},
	{src: `account_id?: =~"^.{12}$"`, status: true, valid: []string{`{}`, `{"account_id":"123456789012"}`},
		samples: []string{`{"account_id":"12"}`, `{"account_id":"1234567890\u00312"}`, `{"account_id":12}`, `{"other":1}`}},
	{src: `{ account_id: =~"^.{12}$", cidr: string, tags?: [string]: string }`,
		valid:   []string{`{"account_id":"000000000000","cidr":"10.0.0.0/16"}`, `{"cidr":"c","account_id":"abcdefghijkl","tags":{"a":"b","c":""}}`},
		samples: []string{`{"account_id":"000000000000"}`, `{"account_id":"000000000000","cidr":"x","tags":{"a":1}}`, `{"account_id":"000000000000","cidr":"x","tags":[]}`, `{"account_id":"00000000000é","cidr":"x"}`}},
	{src: `vpc_id?: string
flow_logs?: {enabled: bool, bucket: string}`, status: true,
		valid:   []string{`{"vpc_id":"v"}`, `{"flow_logs":{"enabled":true,"bucket":"b"}}`},
		samples: []string{`{"flow_logs":{"enabled":"yes","bucket":"b"}}`, `{"flow_logs":{"enabled":true}}`, `{"flow_logs":{"enabled":true,"bucket":"b","x":1}}`, `{"vpc_id":"v","region":"r"}`}},
	{src: `functional_domains: [...{
	name: =~"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
	networking: bool
	service_teams: [...{name: =~"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}]
}]`,
		valid:   []string{`{"functional_domains":[]}`, `{"functional_domains":[{"name":"fd-1","networking":false,"service_teams":[{"name":"t-1"},{"name":"t2"}]}]}`},
		samples: []string{`{"functional_domains":[{"name":"FD","networking":false,"service_teams":[]}]}`, `{"functional_domains":[{"name":"fd","networking":false,"service_teams":[{"name":"t","x":1}]}]}`, `{"functional_domains":{}}`, `{"functional_domains":[1]}`}},
	{src: `rollup?: {total?: int, ready?: int}
...`, status: true,
		valid:   []string{`{"rollup":{"total":3,"ready":-0}}`, `{"rollup":{},"other":[1,{"a":null}],"x":1.5e3}`},
		samples: []string{`{"rollup":{"total":1.0}}`, `{"rollup":{"total":1e2}}`, `{"rollup":{"total":"1"}}`, `{"rollup":{"extra":1}}`, `{"rollup":{"total":123456789012345678901234567890}}`}},
	{src: `a: int & int, b: number, c: _, d: string & =~"^a" & =~"b$", "e-f"?: bool @converge(secret)`,
		valid:   []string{`{"a":1,"b":2.5,"c":null,"d":"ab"}`, `{"a":-7,"b":0,"c":{"x":[]},"d":"a-b","e-f":false}`},
		samples: []string{`{"a":1,"b":2,"c":1,"d":"ba"}`, `{"a":1,"b":"2","c":1,"d":"ab"}`, `{"a":1,"b":2,"d":"ab"}`}},
	// Outside the subset: CUE alone decides.
	{src: `a: *1 | int`, unsupported: true, samples: []string{`{"a":2}`, `{}`}},
	{src: `a: "lit"`, unsupported: true, samples: []string{`{"a":"lit"}`}},
	{src: `a: >=3`, unsupported: true, samples: []string{`{"a":2}`}},
	{src: `a: int, a: >0`, unsupported: true, samples: []string{`{"a":2}`}},
	{src: `{[string]: int, a: int}`, unsupported: true, samples: []string{`{"a":2}`}},
	{src: `#D: int
a: #D`, unsupported: true, samples: []string{`{"a":2}`}},
	{src: `a: string | int`, unsupported: true, samples: []string{`{"a":2}`}},
	{src: `a!: int`, unsupported: true, samples: []string{`{"a":2}`}},
}

// TestFastCheckNeverMorePermissive: on every schema of the subset, data
// the fast check accepts is data CUE accepts, over hand-picked probes and
// thousands of mutations of them; the fast check does accept the valid
// examples (it is used), and schemas outside the subset get none.
func TestFastCheckNeverMorePermissive(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for i, tc := range fastSchemas {
		part := "spec"
		if tc.status {
			part = "status"
		}
		k := &converge.Kind{Name: fmt.Sprintf("k%d", i), Version: 1}
		if tc.status {
			k.StatusSchema = tc.src
		} else {
			k.SpecSchema = tc.src
		}
		s, err := Compile([]*converge.Kind{k})
		if err != nil {
			t.Fatalf("schema %d: %v", i, err)
		}
		key := schemaKey{k.Ref(), part}
		f := s.fast[key]
		if tc.unsupported {
			if f != nil {
				t.Errorf("schema %q: compiled a fast check, want none", tc.src)
			}
			continue
		}
		if f == nil {
			t.Fatalf("schema %q: no fast check", tc.src)
		}
		for _, v := range tc.valid {
			if !f.accepts([]byte(v)) {
				t.Errorf("schema %q: fast check refuses valid %s", tc.src, v)
			}
			if err := s.validateCUE(key, json.RawMessage(v), nil); err != nil {
				t.Errorf("schema %q: %s is not valid after all: %v", tc.src, v, err)
			}
		}
		probes := append(append([]string(nil), tc.valid...), tc.samples...)
		for _, base := range append([]string(nil), probes...) {
			for range 300 {
				probes = append(probes, mutate(rng, base))
			}
		}
		for _, v := range probes {
			if f.accepts([]byte(v)) {
				if err := s.validateCUE(key, json.RawMessage(v), nil); err != nil {
					t.Errorf("schema %q: fast check accepts %s, CUE refuses it: %v", tc.src, v, err)
				}
			}
		}
	}
}

// mutate changes a JSON text a little: a byte dropped, duplicated or
// replaced by a JSON-ish one, or a fragment spliced in.
func mutate(rng *rand.Rand, s string) string {
	frags := []string{`"`, `{`, `}`, `[`, `]`, `,`, `:`, `1`, `-`, `.`, `e`, `"x"`, `null`, `true`, `\u0041`, `\"`, `"a":1,`, ` `, "\x01", "é", `"0000000000000"`}
	b := []byte(s)
	for range 1 + rng.IntN(3) {
		if len(b) == 0 {
			b = []byte(frags[rng.IntN(len(frags))])
			continue
		}
		i := rng.IntN(len(b))
		switch rng.IntN(4) {
		case 0:
			b = append(b[:i:i], b[i+1:]...)
		case 1:
			b = append(b[:i+1:i+1], b[i:]...)
		case 2:
			f := frags[rng.IntN(len(frags))]
			b = []byte(string(b[:i]) + f + string(b[i+1:]))
		default:
			f := frags[rng.IntN(len(frags))]
			b = []byte(string(b[:i]) + f + string(b[i:]))
		}
	}
	return strings.Clone(string(b))
}

// A deeply nested value (a worker's 20 MB status, say) is no stack
// overflow: past maxFastDepth the fast check says no and CUE decides, as
// it would have anyway.
func TestFastCheckDeepNesting(t *testing.T) {
	n := fastAnyValue
	const depth = 2_000_000
	deep := strings.Repeat("[", depth) + strings.Repeat("]", depth)
	if n.accepts([]byte(deep)) {
		t.Error("a list nested two million deep was accepted by the fast check; CUE decides that")
	}
	deepObj := strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
	if n.accepts([]byte(deepObj)) {
		t.Error("an object nested two million deep was accepted by the fast check")
	}
	shallow := strings.Repeat("[", 10) + strings.Repeat("]", 10)
	if !n.accepts([]byte(shallow)) {
		t.Error("a list nested 10 deep was refused")
	}
}

// TestFastCheckDepthIsJSONs: the fast check reads as deep as converge's
// one limit, encoding/json's (which CUE's path decodes with), and no
// deeper.
func TestFastCheckDepthIsJSONs(t *testing.T) {
	for _, depth := range []int{maxFastDepth, maxFastDepth + 1} {
		doc := []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
		if got, want := fastAnyValue.accepts(doc), json.Valid(doc); got != want {
			t.Errorf("depth %d: fast check accepts %v, encoding/json %v", depth, got, want)
		}
	}
}

// FuzzFastCheck: on any bytes, invalid JSON included, what the fast check
// of a schema of fastSchemas accepts is one JSON value encoding/json
// decodes, and CUE accepts it too.
func FuzzFastCheck(f *testing.F) {
	type compiled struct {
		s   *Schemas
		key schemaKey
		f   *fastNode
	}
	var schemas []compiled
	for i, tc := range fastSchemas {
		if tc.unsupported {
			continue
		}
		k := &converge.Kind{Name: fmt.Sprintf("k%d", i), Version: 1}
		part := "spec"
		if tc.status {
			k.StatusSchema, part = tc.src, "status"
		} else {
			k.SpecSchema = tc.src
		}
		s, err := Compile([]*converge.Kind{k})
		if err != nil {
			f.Fatal(err)
		}
		key := schemaKey{k.Ref(), part}
		for _, v := range append(append([]string(nil), tc.valid...), tc.samples...) {
			f.Add(uint8(len(schemas)), []byte(v))
		}
		schemas = append(schemas, compiled{s, key, s.fast[key]})
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		c := schemas[int(which)%len(schemas)]
		if !c.f.accepts(data) {
			return
		}
		var x any
		if err := json.Unmarshal(data, &x); err != nil {
			t.Fatalf("fast check accepts %q, encoding/json refuses it: %v", data, err)
		}
		if err := c.s.validateCUE(c.key, json.RawMessage(data), nil); err != nil {
			t.Fatalf("fast check accepts %q, CUE refuses it: %v", data, err)
		}
	})
}
