package cue

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/convergehq/converge"
)

const dependsKinds = `
-- kinds/account.cue --
type: "kind", kind: "account", kind_version: 1, reactions: ["reconcile"]
spec: team_name: string
status: account_id?: =~"^.{12}$"
-- kinds/vpc.cue --
type: "kind", kind: "vpc", kind_version: 1, reactions: ["reconcile"]
spec: {account_id: =~"^.{12}$", cidr: string}
status: vpc_id?: string
`

// fsOf turns "-- path --" sections into a MapFS.
func fsOf(txt string) fstest.MapFS {
	fsys := fstest.MapFS{}
	parts := strings.Split(txt, "\n-- ")
	for _, p := range parts[1:] {
		name, body, _ := strings.Cut(p, " --\n")
		fsys[name] = &fstest.MapFile{Data: []byte(body)}
	}
	return fsys
}

// TestDependsOn: a resource document's depends_on edges reach
// Desired.Edges with their flows (status./spec. prefixes dropped), the
// flowed field may be left out of the spec (known after apply), and a
// dangling reference, a cycle or a bad entry is a finding at the entry's
// file:line:col.
func TestDependsOn(t *testing.T) {
	good := dependsKinds + `
-- resources/acct.cue --
type: "resource", kind: "account", kind_version: 1, name: "sample-account"
spec: team_name: "t"
-- resources/vpc.cue --
type: "resource", kind: "vpc", kind_version: 1, name: "sample-vpc"
spec: cidr: "10.0.0.0/16"
depends_on: [{resource: "account/sample-account", flows: {"status.account_id": "spec.account_id"}}]
`
	res, err := Load(fsOf(good), ".", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Valid() {
		t.Fatalf("findings: %v", res.Findings)
	}
	want := []converge.Edge{{Consumer: "vpc/sample-vpc", Producer: "account/sample-account",
		Flows: []converge.ValueFlow{{From: "account_id", To: "account_id"}}}}
	if fmt.Sprint(res.Desired.Edges) != fmt.Sprint(want) {
		t.Errorf("edges = %v, want %v", res.Desired.Edges, want)
	}
	if len(res.Desired.Resources) != 2 {
		t.Errorf("resources = %d, want 2", len(res.Desired.Resources))
	}

	tests := []struct {
		name, files string
		want        []string // "file:line:col rule" prefixes of the findings
	}{
		{"dangling", `
-- resources/vpc.cue --
type: "resource", kind: "vpc", kind_version: 1, name: "sample-vpc"
spec: cidr: "10.0.0.0/16"
depends_on: [{resource: "account/nope", flows: {"status.account_id": "spec.account_id"}}]
`, []string{"resources/vpc.cue:3:15 DEPENDS_ON_UNKNOWN"}},
		{"cycle", `
-- resources/a.cue --
type: "resource", kind: "account", kind_version: 1, name: "a"
spec: team_name: "t"
depends_on: [{resource: "account/b"}]
-- resources/b.cue --
type: "resource", kind: "account", kind_version: 1, name: "b"
spec: team_name: "t"
depends_on: [
	{resource: "account/a"},
]
-- resources/c.cue --
type: "resource", kind: "account", kind_version: 1, name: "c"
spec: team_name: "t"
depends_on: [{resource: "account/a"}]
`, []string{"resources/a.cue:3:15 DEPENDS_ON_CYCLE", "resources/b.cue:4:3 DEPENDS_ON_CYCLE"}},
		{"not flowed: still required", `
-- resources/vpc.cue --
type: "resource", kind: "vpc", kind_version: 1, name: "sample-vpc"
spec: cidr: "10.0.0.0/16"
`, []string{"resources/vpc.cue:2:1 SPEC_INVALID"}},
		{"bad entry", `
-- resources/acct.cue --
type: "resource", kind: "account", kind_version: 1, name: "sample-account"
spec: team_name: "t"
-- resources/vpc.cue --
type: "resource", kind: "vpc", kind_version: 1, name: "sample-vpc"
spec: cidr: "10.0.0.0/16"
depends_on: [{resource: "account/sample-account", flow: {}}]
`, []string{"resources/vpc.cue:3:51 DEPENDS_ON_INVALID"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Load(fsOf(dependsKinds+tt.files), ".", Options{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range res.Findings {
				got = append(got, fmt.Sprintf("%s:%d:%d %s", f.File, f.Line, f.Column, f.Rule))
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("findings:\n%s\nwant:\n%s\n(%v)", strings.Join(got, "\n"), strings.Join(tt.want, "\n"), res.Findings)
			}
		})
	}
}
