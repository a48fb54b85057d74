package site

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestIndentJSON(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		wantOK bool
	}{
		{name: "nested", in: `{"a":[1,2.5e-3,"x\"y",{},[],[{}]],"b":{"c":null,"d":true}}`, wantOK: true},
		{name: "spaced", in: " \n{ \"a\" : [ 1 , 2 ] }\t\n", wantOK: true},
		{name: "scalar", in: `"\u00e9"`, wantOK: true},
		{name: "invalid", in: `{"a":}`},
		{name: "two values", in: `1 2`},
		{name: "empty", in: ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := indentJSON([]byte("prefix"), []byte(tt.in))
			if ok != tt.wantOK {
				t.Fatalf("indentJSON(%q) ok = %v, want %v", tt.in, ok, tt.wantOK)
			}
			if !ok {
				return
			}
			var want bytes.Buffer
			want.WriteString("prefix")
			if err := json.Indent(&want, []byte(tt.in), "", "  "); err != nil {
				t.Fatal(err)
			}
			if string(got) != want.String() {
				t.Errorf("indentJSON(%q) =\n%s\njson.Indent =\n%s", tt.in, got, want.String())
			}
		})
	}
}

// FuzzIndentJSON: indentJSON never accepts what json.Indent rejects, and
// writes exactly what json.Indent writes.
func FuzzIndentJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e-3,"x\"y"]}`, " [ true , null ] ", `"\ud83d"`, "-0.0E+1", "{}", "[[[]]]", `{"a":}`, `[{}, {"b": [ ]}] `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, ok := indentJSON([]byte("prefix"), in)
		var want bytes.Buffer
		want.WriteString("prefix")
		err := json.Indent(&want, in, "", "  ")
		if ok && err != nil {
			t.Fatalf("accepted %q, which json.Indent rejects: %v", in, err)
		}
		if ok && string(got) != want.String() {
			t.Fatalf("indentJSON(%q) = %q, json.Indent = %q", in, got, want.String())
		}
		if !ok && string(got) != "prefix" {
			t.Fatalf("on rejection dst was changed to %q", got)
		}
	})
}

// TestIndentJSONDepth: indentJSON nests as deep as json.Indent, and no
// deeper; far deeper is refused, not a stack overflow.
func TestIndentJSONDepth(t *testing.T) {
	for _, depth := range []int{maxIndentDepth, maxIndentDepth + 1, 2_000_000} {
		doc := bytes.Repeat([]byte("["), depth)
		doc = append(doc, bytes.Repeat([]byte("]"), depth)...)
		var want bytes.Buffer
		_, ok := indentJSON(nil, doc)
		if wantOK := json.Indent(&want, doc, "", "  ") == nil; ok != wantOK {
			t.Errorf("depth %d: indentJSON ok = %v, json.Indent %v", depth, ok, wantOK)
		}
	}
}
