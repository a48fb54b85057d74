package view

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
)

// A table aligns its columns two spaces apart and pads no last column.
func TestTableAlignsColumns(t *testing.T) {
	var b bytes.Buffer
	if err := Table(&b, [][]string{{"A", "BB"}, {"ccc", "d"}}); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "A    BB\nccc  d\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// -o yaml prints the JSON's keys in the same order, in block style and
// without JSON's quotes, except where YAML needs some.
func TestWriteDataYAMLIsBlockStyle(t *testing.T) {
	var b bytes.Buffer
	v := map[string]any{"name": "a b", "list": []int{1, 2}, "empty": []int{}, "nested": map[string]any{"k": "v: x"}}
	if err := WriteData(&b, "yaml", v); err != nil {
		t.Fatal(err)
	}
	want := "empty: []\nlist:\n  - 1\n  - 2\nname: a b\nnested:\n  k: 'v: x'\n"
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// A resource's JSON has every stable key: a spec of {} and a status and
// owner of null when it has none, and no optional key it does not use.
func TestResourceJSONIsStable(t *testing.T) {
	var b bytes.Buffer
	r := &converge.Resource{UID: "u1", Kind: "vpc", KindVersion: 2, Name: "a", Phase: converge.PhasePending, Generation: 3, ObservedGeneration: 2}
	if err := WriteData(&b, "json", ResourceOf(r)); err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v:\n%s", err, b.String())
	}
	for k, want := range map[string]string{"uid": `"u1"`, "kind": `"vpc"`, "kind_version": "2", "name": `"a"`, "phase": `"Pending"`,
		"reason": `""`, "generation": "3", "observed_generation": "2", "spec": "{}", "status": "null", "owner": "null", "attempts": "0"} {
		if string(got[k]) != want {
			t.Errorf("%s = %s, want %s", k, got[k], want)
		}
	}
	for _, k := range []string{"last_error", "next_attempt", "deleting", "children", "drift", "rollout"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s is present, want it left out", k)
		}
	}
	owned := &converge.Resource{Kind: "vpc", Name: "b", Owner: "classicbom/c", Spec: json.RawMessage(`{"cidr":"10.0.0.0/24"}`)}
	if v := ResourceOf(owned); v.Owner == nil || *v.Owner != "classicbom/c" || string(v.Spec) != `{"cidr":"10.0.0.0/24"}` {
		t.Errorf("owned: owner %v, spec %s", v.Owner, v.Spec)
	}
}

// The tree draws each level's branches, a node's dependencies after →,
// a drift and a reason on its line, and a node's groups as one line per
// kind with its phases counted, most first.
func TestWriteTreeDrawsLevelsAndGroups(t *testing.T) {
	root := &TreeNode{ID: "classicbom/c", Version: 1, Phase: converge.PhaseReady, Children: []*TreeNode{
		{ID: "vpc/a", Version: 1, Phase: converge.PhaseReady, DependsOn: []converge.ID{"account/a", "tgw/t"}, Children: []*TreeNode{
			{ID: "route/a", Version: 1, Phase: converge.PhasePending, Reason: "waiting for vpc/a"},
		}},
		{ID: "vpc/b", Version: 2, Phase: converge.PhaseFailed, Reason: "boom", Drift: &converge.DriftReport{Fields: []string{"cidr"}}},
		{ID: "team/t", Version: 1, Phase: converge.PhaseReady, Groups: []*TreeGroup{
			{Kind: "route", Count: 30, Phases: map[converge.Phase]int{converge.PhaseReady: 28, converge.PhaseFailed: 2}, Drifted: 1},
			{Kind: "vpc", Count: 25, Phases: map[converge.Phase]int{converge.PhaseReady: 25}},
		}},
	}}
	var b bytes.Buffer
	WriteTree(&b, root)
	want := `classicbom/c (v1) Ready
├── vpc/a (v1) Ready  → account/a, tgw/t
│   └── route/a (v1) Pending: waiting for vpc/a
├── vpc/b (v2) Failed (drifted): boom
└── team/t (v1) Ready
    ├── route × 30: 28 Ready, 2 Failed (1 drifted)
    └── vpc × 25: 25 Ready
`
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// A lone resource is its one line.
	b.Reset()
	WriteTree(&b, &TreeNode{ID: "vpc/x", Version: 3, Phase: converge.PhaseRunning})
	if got, want := b.String(), "vpc/x (v3) Running\n"; got != want {
		t.Errorf("lone: got %q, want %q", got, want)
	}
}

// list's table of nothing is its header; a long name widens its column
// and is never cut; the applied revision heads the table.
func TestWriteListEmptyAndLongNames(t *testing.T) {
	var b bytes.Buffer
	if err := WriteList(&b, nil, nil, nil, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "RESOURCE  VERSION  PHASE  CHILDREN  AGE  REASON\n"; got != want {
		t.Errorf("empty: got %q, want %q", got, want)
	}
	b.Reset()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	n := 3
	applied := &converge.AppliedSource{Revision: converge.Revision{Ref: "main", Hash: "0123456789abcdef0123456789abcdef01234567", Time: now.Add(-3 * time.Minute), Subject: "add vpc"}}
	views := []Resource{
		{Kind: "classicbom", Name: "a-very-long-name-that-goes-on-and-on", KindVersion: 1, Phase: converge.PhaseReady, Children: &n},
		{Kind: "vpc", Name: "b", KindVersion: 2, Phase: converge.PhaseFailed, Reason: "boom"},
	}
	if err := WriteList(&b, applied, nil, views, []time.Time{now.Add(-time.Hour), {}}, now); err != nil {
		t.Fatal(err)
	}
	want := `applied main@sha1:0123456789abcdef0123456789abcdef01234567 (committed 3m ago: add vpc)
RESOURCE                                         VERSION  PHASE   CHILDREN  AGE  REASON
classicbom/a-very-long-name-that-goes-on-and-on  v1       Ready   3         1h   -
vpc/b                                            v2       Failed  -         -    boom
`
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// get's table of several cuts a long reason at DescribeWidth; an empty
// one is its header.
func TestKindTableCutsLongReasons(t *testing.T) {
	var b bytes.Buffer
	if err := KindTable(&b, nil, nil, true, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "RESOURCE  VERSION  PHASE  AGE  REASON  GENERATION  ATTEMPTS  OWNER  SOURCE\n"; got != want {
		t.Errorf("empty wide: got %q, want %q", got, want)
	}
	b.Reset()
	long := strings.Repeat("x", 200)
	if err := KindTable(&b, []Resource{{Kind: "vpc", Name: "a", KindVersion: 1, Phase: converge.PhaseFailed, Reason: long}}, []*time.Time{nil}, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[1], strings.Repeat("x", DescribeWidth-1)+"…") || strings.Contains(lines[1], strings.Repeat("x", DescribeWidth)) {
		t.Errorf("got\n%s\nwant the reason cut to %d runes", b.String(), DescribeWidth)
	}
}

// describe summarises a spec one line a top-level field: a value that
// fits as it is, a long list or object as its size and first items.
func TestSummarizeCutsBigValues(t *testing.T) {
	spec := json.RawMessage(`{"cidr":"10.0.0.0/24","tags":{"a":"1","b":"2","c":"3333333333333333333333333"},"list":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}`)
	got := summarize(spec, 20)
	want := [][2]string{{"cidr", `"10.0.0.0/24"`}, {"list", "[1,2,3,4,5…] (15 items, 37 B)"}, {"tags", "{a, b, c} (3 keys, 49 B)"}}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %q, want %q", i, got[i], want[i])
		}
	}
	if got := summarize(json.RawMessage("null"), 20); got != nil {
		t.Errorf("null: got %q, want no lines", got)
	}
	for _, tt := range []struct {
		in    string
		width int
		want  string
	}{{"abcdef", 4, "abc…"}, {"abc", 4, "abc"}, {"äöüß€x", 3, "äö…"}, {"abcdef", 0, "abcdef"}} {
		if got := Cut(tt.in, tt.width); got != tt.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", tt.in, tt.width, got, tt.want)
		}
	}
}

// status's table names the revision, the pin when one holds, and one
// row a status; -o json is Statuses as it is.
func TestWriteStatuses(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	v := Statuses{Revision: "main@sha1:abc", Statuses: []converge.CommitStatus{
		{Context: converge.ContextValidate, State: converge.StateSuccess, Description: "3 documents", Time: at},
		{Context: converge.ContextSync, State: converge.StatePending},
	}}
	var b bytes.Buffer
	if err := WriteStatuses(&b, "table", v); err != nil {
		t.Fatal(err)
	}
	want := `revision main@sha1:abc
CONTEXT            STATE    DESCRIPTION  TIME
converge/validate  success  3 documents  2026-12-01T12:00:00Z
converge/sync      pending  -            -
`
	if got := b.String(); got != want {
		t.Errorf("table: got\n%s\nwant\n%s", got, want)
	}
	b.Reset()
	if err := WriteStatuses(&b, "json", v); err != nil {
		t.Fatal(err)
	}
	var back Statuses
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Revision != v.Revision || len(back.Statuses) != 2 || back.Pin != nil {
		t.Errorf("json %s: %+v, %v", b.String(), back, err)
	}
}
