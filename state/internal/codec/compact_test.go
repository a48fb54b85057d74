package codec

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestAppendCompactJSON(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		wantOK bool
	}{
		{name: "object", in: "{ \"a\" : [1, -2.5e+3, true, false, null, \"x\\n\\u00e9\"] ,\n\"b\":{}}", wantOK: true},
		{name: "scalar", in: " 0 ", wantOK: true},
		{name: "empty array", in: "[ ]", wantOK: true},
		{name: "empty", in: ""},
		{name: "leading zero", in: "01"},
		{name: "bare minus", in: "-"},
		{name: "trailing comma", in: "[1,]"},
		{name: "two values", in: "1 2"},
		{name: "bad escape", in: `"\x"`},
		{name: "short unicode escape", in: `"\u12"`},
		{name: "control char in string", in: "\"a\tb\""},
		{name: "unterminated", in: `{"a":1`},
		{name: "single quotes", in: `{'a':1}`},
		{name: "too deep", in: strings.Repeat("[", maxCompactDepth+2) + strings.Repeat("]", maxCompactDepth+2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := appendCompactJSON(nil, []byte(tt.in))
			if ok != tt.wantOK {
				t.Fatalf("appendCompactJSON(%q) ok = %v, want %v", tt.in, ok, tt.wantOK)
			}
			if !ok {
				return
			}
			var want bytes.Buffer
			if err := json.Compact(&want, []byte(tt.in)); err != nil {
				t.Fatal(err)
			}
			if string(got) != want.String() {
				t.Errorf("appendCompactJSON(%q) = %q, want %q", tt.in, got, want.String())
			}
		})
	}
}

// FuzzCompactJSON: appendCompactJSON never accepts what encoding/json
// rejects, and writes exactly what json.Compact writes.
func FuzzCompactJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e-3,"x\"y"]}`, " [ true , null ] ", `"\ud83d"`, "-0.0E+1", "{}", "[[[]]]", `{"a":}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, ok := appendCompactJSON([]byte("prefix"), in)
		var want bytes.Buffer
		err := json.Compact(&want, in)
		if ok && err != nil {
			t.Fatalf("accepted %q, which encoding/json rejects: %v", in, err)
		}
		if ok && string(got) != "prefix"+want.String() {
			t.Fatalf("appendCompactJSON(%q) = %q, json.Compact = %q", in, got, want.String())
		}
		if !ok && string(got) != "prefix" {
			t.Fatalf("on rejection dst was changed to %q", got)
		}
	})
}
