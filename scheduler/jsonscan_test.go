package scheduler

import (
	"encoding/json"
	"reflect"
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
