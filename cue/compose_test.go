package cue

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/convergehq/converge"
)

const composeKinds = `
-- kinds/account.cue --
type: "kind", kind: "account", kind_version: 1, reactions: ["reconcile"]
spec: team_name: string
status: account_id?: string
-- kinds/vpc.cue --
type: "kind", kind: "vpc", kind_version: 1, reactions: ["reconcile"]
spec: {account_id: =~"^.{12}$", cidr: string}
status: vpc_id?: string
-- resources/org.cue --
type: "resource", kind: "org", kind_version: 1, name: "acme"
spec: teams: [{name: "a"}, {name: "b"}]
`

// orgKind is a kind composing in CUE; BODY is its teams comprehension.
func orgKind(body string) string {
	return `
-- kinds/org.cue --
type: "kind", kind: "org", kind_version: 1, reactions: ["compose"]
spec: teams: [...{name: string}]
compose: {
	children: [
` + body + `
	]
	edges: [for t in spec.teams {consumer: "vpc/\(t.name)", producer: "account/\(t.name)", flows: {"status.account_id": "spec.account_id"}}]
}
`
}

// TestComposeCUE: a kind's compose expression is evaluated with a spec
// into children and edges (flows' prefixes dropped), and its mistakes
// are validation findings naming the kind file:line:col: a reference to a
// field the spec schema lacks, a child of a kind no document declares, a
// child whose spec is invalid.
func TestComposeCUE(t *testing.T) {
	good := orgKind(`		for t in spec.teams {kind: "account", name: t.name, spec: team_name: t.name},
		for t in spec.teams {kind: "vpc", name: t.name, spec: cidr: "10.0.0.0/24"},`)
	res, err := Load(fsOf(composeKinds+good), ".", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Valid() {
		t.Fatalf("findings: %v", res.Findings)
	}
	ref := converge.KindRef{Kind: "org", Version: 1}
	if !res.Schemas.Composes(ref) || res.Schemas.Composes(converge.KindRef{Kind: "vpc", Version: 1}) {
		t.Fatal("Composes: want org only")
	}
	r := res.Schemas.Compose(&converge.Task{ID: "t1", Kind: "org", KindVersion: 1, Reaction: converge.ReactionCompose,
		Spec: []byte(`{"teams":[{"name":"x"}]}`)})
	if r.Outcome != converge.OutcomeOK {
		t.Fatalf("compose: %v %s", r.Outcome, r.Message)
	}
	var got []string
	for _, c := range r.Children {
		got = append(got, fmt.Sprintf("%s/v%d/%s %s", c.Kind, c.KindVersion, c.Name, c.Spec))
	}
	for _, e := range r.Edges {
		got = append(got, fmt.Sprintf("%s<-%s %v", e.Consumer, e.Producer, e.Flows))
	}
	want := `account/v1/x {"team_name":"x"}; vpc/v1/x {"cidr":"10.0.0.0/24"}; vpc/x<-account/x [{account_id account_id}]`
	if strings.Join(got, "; ") != want {
		t.Errorf("composition:\n%s\nwant\n%s", strings.Join(got, "; "), want)
	}
	if r := res.Schemas.Compose(&converge.Task{ID: "t2", Kind: "org", KindVersion: 1, Reaction: converge.ReactionTeardown}); r.Outcome != converge.OutcomeOK {
		t.Errorf("teardown: %v %s", r.Outcome, r.Message)
	}

	tests := []struct {
		name, body string
		want       string // "file:line:col RULE message-substring"
	}{
		{"missing field", `		for t in spec.team {kind: "account", name: t.name, spec: team_name: t.name},`,
			"kinds/org.cue:5:17 COMPOSE_INVALID children: undefined field: team"},
		{"unknown kind", `		for t in spec.teams {kind: "acount", name: t.name, spec: team_name: t.name},
		for t in spec.teams {kind: "vpc", name: t.name, spec: cidr: "10.0.0.0/24"},`,
			`kinds/org.cue:5:30 COMPOSE_KIND_UNKNOWN emits unknown kind "acount"`},
		{"invalid child", `		for t in spec.teams {kind: "account", name: t.name, spec: team_name: t.name},
		for t in spec.teams {kind: "vpc", name: t.name, spec: cidr: 5},`,
			"kinds/org.cue:3:10 COMPOSE_CHILD_INVALID child vpc/a: spec.cidr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Load(fsOf(composeKinds+orgKind(tt.body)), ".", Options{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range res.Findings {
				got = append(got, fmt.Sprintf("%s:%d:%d %s %s", f.File, f.Line, f.Column, f.Rule, f.Message))
			}
			found := false
			for _, g := range got {
				found = found || strings.HasPrefix(g, tt.want)
			}
			if !found {
				t.Errorf("findings:\n%s\nwant one starting %q", strings.Join(got, "\n"), tt.want)
			}
		})
	}
}

// TestLoadDatadriven: examples/datadriven validates, its classicbom
// composes in CUE, and composing its BOM gives the classic shape.
func TestLoadDatadriven(t *testing.T) {
	res, err := Load(os.DirFS("../examples/datadriven"), ".", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Valid() {
		t.Fatalf("findings: %v", res.Findings)
	}
	var bom *converge.Resource
	for _, r := range res.Desired.Resources {
		if r.Kind == "classicbom" {
			bom = r
		}
	}
	r := res.Schemas.Compose(&converge.Task{Kind: "classicbom", KindVersion: 1, Reaction: converge.ReactionCompose, Spec: bom.Declared})
	if r.Outcome != converge.OutcomeOK {
		t.Fatalf("compose: %s", r.Message)
	}
	// 58 domains × (tgw + host) + 1,176 teams × (account, vpc, route).
	if got, want := len(r.Children), 58*2+1176*3; got != want {
		t.Errorf("children = %d, want %d", got, want)
	}
	if got, want := len(r.Edges), 58+1176*3; got != want {
		t.Errorf("edges = %d, want %d", got, want)
	}
}
