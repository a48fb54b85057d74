package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/convergehq/converge"
)

// checkDecode fails t unless decodeResourceJSON(in) agrees with
// json.Unmarshal: whatever it accepts, encoding/json accepts and decodes
// to the same value (and the head decode to that value without its raw
// fields). It returns whether decodeResourceJSON accepted in.
func checkDecode(t *testing.T, in []byte) bool {
	t.Helper()
	got, ok := decodeResourceJSON(in, false)
	head, hok := decodeResourceJSON(in, true)
	if ok != hok {
		t.Fatalf("decodeResourceJSON(%q): full decode ok=%v, head decode ok=%v", in, ok, hok)
	}
	if !ok {
		return false
	}
	want := new(converge.Resource)
	if err := json.Unmarshal(in, want); err != nil {
		t.Fatalf("decodeResourceJSON accepted %q, which encoding/json rejects: %v", in, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeResourceJSON(%q) =\n%#v\nencoding/json =\n%#v", in, got, want)
	}
	want.Declared, want.Spec, want.Status = nil, nil, nil
	if !reflect.DeepEqual(head, want) {
		t.Fatalf("head decode of %q =\n%#v\nwant\n%#v", in, head, want)
	}
	return true
}

func encodedResources(t testing.TB) [][]byte {
	var out [][]byte
	for _, change := range []func(r *converge.Resource){
		nil,
		func(r *converge.Resource) { *r = converge.Resource{} },
		func(r *converge.Resource) { r.Lease, r.Declared, r.Status = nil, nil, nil },
		func(r *converge.Resource) { r.Name, r.LastError = "a\"b\\c\n<&>\u2028", "ünï \xff" },
		func(r *converge.Resource) { r.Generation, r.ObservedGeneration, r.Attempts = 1<<63-1, -1<<63, -5 },
	} {
		r := fullResource()
		if change != nil {
			change(r)
		}
		var buf bytes.Buffer
		if !appendResourceJSON(&buf, r) {
			t.Fatalf("appendResourceJSON refused %+v", r)
		}
		out = append(out, bytes.Clone(buf.Bytes()))
		j, err := json.MarshalIndent(r, " ", "\t")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, j)
	}
	return out
}

func TestDecodeResourceJSON(t *testing.T) {
	for _, in := range encodedResources(t) {
		if !checkDecode(t, in) {
			t.Errorf("decodeResourceJSON refused what converge writes: %s", in)
		}
	}
	tests := []struct {
		name   string
		in     string
		wantOK bool
	}{
		{name: "empty object", in: ` { } `, wantOK: true},
		{name: "nulls", in: `{"uid":null,"spec":null,"status":null,"generation":null,"lease":null,"deleting":null,"created_at":null}`, wantOK: true},
		{name: "empty lease", in: `{"lease":{}}`, wantOK: true},
		{name: "escaped strings", in: `{"name":"a\u00e9\n\"","reason":"\ud83d\ude00 \ud800"}`, wantOK: true},
		{name: "minus zero", in: `{"generation":-0}`, wantOK: true},
		{name: "raw spec kept as written", in: `{"spec": { "a" : [1, 2.5e3, "x"] } }`, wantOK: true},
		{name: "unknown key", in: `{"nope":1}`},
		{name: "key in other case", in: `{"Name":"x"}`},
		{name: "escaped key", in: `{"n\u0061me":"x"}`},
		{name: "key twice", in: `{"name":"x","name":"y"}`},
		{name: "lease key twice", in: `{"lease":{"worker":"a","worker":"b"}}`},
		{name: "fraction", in: `{"generation":1.0}`},
		{name: "exponent", in: `{"attempts":1e2}`},
		{name: "overflow", in: `{"generation":9223372036854775808}`},
		{name: "string for int", in: `{"generation":"1"}`},
		{name: "number for string", in: `{"name":1}`},
		{name: "bad time", in: `{"created_at":"yesterday"}`},
		{name: "invalid spec", in: `{"spec":{"a":}}`},
		{name: "control char", in: "{\"name\":\"a\x01\"}"},
		{name: "trailing data", in: `{} x`},
		{name: "not an object", in: `null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkDecode(t, []byte(tt.in)); got != tt.wantOK {
				t.Errorf("decodeResourceJSON(%s) ok = %v, want %v", tt.in, got, tt.wantOK)
			}
		})
	}
}

// FuzzDecodeResourceJSON: decodeResourceJSON never accepts what
// encoding/json rejects and decodes what it accepts to the same value.
func FuzzDecodeResourceJSON(f *testing.F) {
	for _, in := range encodedResources(f) {
		f.Add(in)
	}
	for _, s := range []string{`{"lease":{"task_id":"t","expires":"2026-01-01T00:00:00+01:00"}}`, `{"spec":null}`, `{"name":"\u00e9"}`, `{"generation":-0}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkDecode(t, in) })
}

func TestDecodeResourceRowFallsBack(t *testing.T) {
	// A row encoding/json wrote with a key decodeResourceJSON leaves to
	// it (an older writer's casing) still decodes, through the fallback.
	v := append(rowHead(""), []byte(`{"Name":"x","kind":"vpc","Spec":{"a":1}}`)...)
	r, err := DecodeResource(v)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.ID(), converge.ID("vpc/x"); got != want {
		t.Errorf("ID = %s, want %s", got, want)
	}
	if got, want := string(r.Spec), `{"a":1}`; got != want {
		t.Errorf("Spec = %s, want %s", got, want)
	}
	h, err := DecodeResourceHead(v)
	if err != nil {
		t.Fatal(err)
	}
	if h.Spec != nil || h.Name != "x" {
		t.Errorf("head = %+v, want name x and no spec", h)
	}
}

func rowHead(owner converge.ID) []byte {
	var buf bytes.Buffer
	writeRowHead(&buf, owner, nil, nil)
	return buf.Bytes()
}

func checkDecodeEdges(t *testing.T, in []byte) bool {
	t.Helper()
	got, ok := decodeEdgesJSON(in)
	if !ok {
		return false
	}
	var want []StoredEdge
	if err := json.Unmarshal(in, &want); err != nil {
		t.Fatalf("decodeEdgesJSON accepted %q, which encoding/json rejects: %v", in, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeEdgesJSON(%q) = %#v, encoding/json = %#v", in, got, want)
	}
	return true
}

func TestDecodeEdgesJSON(t *testing.T) {
	written, err := EncodeEdges([]StoredEdge{
		{Producer: "vpc/b", Flows: []converge.ValueFlow{{From: "vpc_id", To: "net.vpc"}, {From: "a", To: "b"}}},
		{Producer: "account/a"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		in     string
		wantOK bool
	}{
		{name: "as written", in: string(written), wantOK: true},
		{name: "null", in: `null`, wantOK: true},
		{name: "empty", in: ` [ ] `, wantOK: true},
		{name: "empty flows", in: `[{"producer":"a/b","flows":[]}]`, wantOK: true},
		{name: "null flows", in: `[{"producer":"a/b","flows":null},{}]`, wantOK: true},
		{name: "unknown key", in: `[{"consumer":"a/b"}]`},
		{name: "bad", in: `[{"producer":}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkDecodeEdges(t, []byte(tt.in)); got != tt.wantOK {
				t.Errorf("decodeEdgesJSON(%s) ok = %v, want %v", tt.in, got, tt.wantOK)
			}
		})
	}
}

// FuzzDecodeEdgesJSON is FuzzDecodeResourceJSON for a row's edges.
func FuzzDecodeEdgesJSON(f *testing.F) {
	for _, s := range []string{`[{"producer":"vpc/b","flows":[{"from":"a","to":"b"}]},{"producer":"x/y"}]`, `null`, `[]`, `[{"flows":[]}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkDecodeEdges(t, in) })
}

// BenchmarkDecodeResource compares the row decoder with encoding/json on
// a typical row.
func BenchmarkDecodeResource(b *testing.B) {
	r := fullResource()
	r.Lease = &converge.Lease{TaskID: "t", Reaction: "reconcile", Worker: "w", Expires: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	v, err := EncodeResource(r, nil)
	if err != nil {
		b.Fatal(err)
	}
	rw, _ := SplitRow(v)
	b.Run("resdecode", func(b *testing.B) {
		for b.Loop() {
			if _, ok := decodeResourceJSON(rw.JSON, false); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var r converge.Resource
			if err := json.Unmarshal(rw.JSON, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzParseUTC: parseUTC accepts only what time.Time.UnmarshalJSON
// accepts, and parses it to the same time.
func FuzzParseUTC(f *testing.F) {
	for _, s := range []string{"2026-11-30T09:00:00Z", "2026-11-30T09:00:00.123456789Z", "2024-02-29T23:59:59.5Z",
		"2023-02-29T00:00:00Z", "2026-13-01T00:00:00Z", "2026-11-30T24:00:00Z", "0000-01-01T00:00:00.1234567890Z", "2026-11-30T09:00:00+01:00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := []byte(`"` + s + `"`)
		got, ok := parseUTC(q)
		if !ok {
			return
		}
		var want time.Time
		if err := want.UnmarshalJSON(q); err != nil {
			t.Fatalf("parseUTC accepted %s, which time.Time refuses: %v", q, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("parseUTC(%s) = %#v, time.Time = %#v", q, got, want)
		}
	})
}

// TestSpecStoredOnce: a spec equal to the declared spec is written once
// (format 4, "spec": null) and read back as the declared spec; a spec
// with flows applied is written whole; a format 3 row still reads.
func TestSpecStoredOnce(t *testing.T) {
	big := json.RawMessage(`{"functional_domains":[{"name":"a","service_teams":[{"name":"t"}]}]}`)
	same := &converge.Resource{UID: "u", Kind: "classicbom", KindVersion: 1, Name: "c", Declared: big, Spec: big, Phase: converge.PhaseReady}
	row, err := EncodeResource(same, nil)
	if err != nil {
		t.Fatal(err)
	}
	if row[0] != 4 || bytes.Count(row, []byte(`"service_teams"`)) != 1 {
		t.Fatalf("row = %s: want format 4 with the spec once", row)
	}
	got, err := DecodeResource(row)
	if err != nil || !bytes.Equal(got.Spec, big) || !bytes.Equal(got.Declared, big) {
		t.Fatalf("DecodeResource = %s / %s, %v; want the declared spec twice", got.Declared, got.Spec, err)
	}
	flowed := &converge.Resource{UID: "u", Kind: "vpc", KindVersion: 1, Name: "v",
		Declared: json.RawMessage(`{"cidr":"10.0.0.0/24"}`), Spec: json.RawMessage(`{"account_id":"1","cidr":"10.0.0.0/24"}`)}
	row, err = EncodeResource(flowed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeResource(row); err != nil || string(got.Spec) != string(flowed.Spec) {
		t.Fatalf("flowed spec read back as %s, %v", got.Spec, err)
	}
	row[0] = 3 // the same bytes as a format 3 row wrote them
	if got, err := DecodeResource(row); err != nil || string(got.Spec) != string(flowed.Spec) {
		t.Fatalf("format 3 row read back as %s, %v", got.Spec, err)
	}
	row[0] = 2
	if _, err := DecodeResource(row); err == nil {
		t.Fatal("a format 2 row decoded")
	}
}

// TestRowApart round-trips a row whose declared spec is stored apart
// (format 5): the row holds the spec's digest and neither spec, decodes
// only given the spec (ErrApart without it, an error with another), and
// keeps its digest when its edges are rewritten.
func TestRowApart(t *testing.T) {
	spec := json.RawMessage(`{"teams":["a","b"]}`)
	r := &converge.Resource{UID: "u", Kind: "bom", KindVersion: 1, Name: "big", Declared: spec, Spec: spec,
		Status: json.RawMessage(`{"rollup":{"total":2}}`), Phase: converge.PhaseReady, Generation: 1, ObservedGeneration: 1}
	v, err := AppendResourceApart(nil, r, nil, SpecDigest(spec))
	if err != nil {
		t.Fatal(err)
	}
	rw, err := SplitRow(v)
	if err != nil || !bytes.Equal(rw.Apart, SpecDigest(spec)) || bytes.Contains(rw.JSON, []byte("teams")) {
		t.Fatalf("row: %v, apart %x, JSON %s", err, rw.Apart, rw.JSON)
	}
	if _, err := DecodeResource(v); !errors.Is(err, ErrApart) {
		t.Errorf("DecodeResource of a row with its spec apart: %v, want ErrApart", err)
	}
	if _, err := DecodeResourceWith(v, []byte(`{"teams":[]}`)); err == nil {
		t.Errorf("DecodeResourceWith another spec: no error")
	}
	got, err := DecodeResourceWith(v, bytes.Clone(spec))
	if err != nil || string(got.Declared) != string(spec) || string(got.Spec) != string(spec) || string(got.Status) != string(r.Status) {
		t.Fatalf("DecodeResourceWith: %v, %+v", err, got)
	}
	edges, err := EncodeEdges([]StoredEdge{{Producer: "vpc/a"}})
	if err != nil {
		t.Fatal(err)
	}
	if rw2, err := SplitRow(rw.WithEdges(edges)); err != nil || !bytes.Equal(rw2.Apart, rw.Apart) || string(rw2.Edges) != string(edges) {
		t.Errorf("WithEdges: %v, apart %x, edges %s", err, rw2.Apart, rw2.Edges)
	}
	bad := append([]byte{resourceFormatApart}, v[1:3]...) // owner and edges lengths 0, no digest
	if _, err := SplitRow(append(bad, 0)); err == nil {
		t.Errorf("SplitRow of a format 5 row with an empty digest: no error")
	}
}
