package sdk

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzArrayField checks the part cutter against encoding/json: on every
// valid document the same elements of field "a" and the same string at
// field "n"; on any other input an error from ArrayField and from
// StringField (malformed input is an error, never a wrong cut).
func FuzzArrayField(f *testing.F) {
	for _, s := range []string{
		`{"a":[1,"x",{"b":[]},[2,"]"],null]}`, `{"a":null}`, `{}`, `{"b":1}`, `{"a":[]}`,
		`{"a":[{"n":"q\"}"}],"a":["last"]}`, `{"n":"d\u00e9","a":[ 1 , 2 ]}`, `{"\u0061":[3]}`,
		`{"a":[true,false,-1.5e3]}`, `{"n":5}`, `[1]`, `{"a":{"x":1}}`,
		`{"a":[tru, 1x, nul]}`, `{"a":[1]} trailing`, `{"a":[1]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := ArrayField(in, "a")
		if !json.Valid(in) {
			if err == nil {
				t.Fatalf("ArrayField(%q) = %q for input that is not JSON, want an error", in, got)
			}
			if s, ok, err := StringField(in, "n"); err == nil {
				t.Fatalf("StringField(%q) = %q, %v for input that is not JSON, want an error", in, s, ok)
			}
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(in, &m) != nil {
			return
		}
		var want []json.RawMessage
		wantErr := m["a"] != nil && json.Unmarshal(m["a"], &want) != nil
		if wantErr != (err != nil) {
			t.Fatalf("ArrayField(%q) error %v, encoding/json error %v", in, err, wantErr)
		}
		if err == nil {
			if len(got) != len(want) {
				t.Fatalf("ArrayField(%q) = %q, want %q", in, got, want)
			}
			for i := range got {
				if !bytes.Equal(bytes.TrimSpace(got[i]), bytes.TrimSpace(want[i])) {
					t.Fatalf("ArrayField(%q)[%d] = %q, want %q", in, i, got[i], want[i])
				}
			}
		}
		s, ok, err := StringField(in, "n")
		var ws string
		wok := m["n"] != nil && json.Unmarshal(m["n"], &ws) == nil
		if _, present := m["n"]; present && !wok && err == nil && string(m["n"]) != "null" {
			t.Fatalf("StringField(%q) = %q, want an error for %s", in, s, m["n"])
		}
		if wok && (err != nil || !ok || s != ws) {
			t.Fatalf("StringField(%q) = %q, %v, %v; want %q", in, s, ok, err, ws)
		}
	})
}
