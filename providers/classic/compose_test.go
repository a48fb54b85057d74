package classic

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/sdk"
)

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// smallBOM: one networking domain with two teams, one without networking
// with one team.
var smallBOM = BOMSpec{FunctionalDomains: []FunctionalDomain{
	{Name: "payments", Networking: true, ServiceTeams: []ServiceTeam{{Name: "ledger"}, {Name: "checkout"}}},
	{Name: "research", Networking: false, ServiceTeams: []ServiceTeam{{Name: "lab"}}},
}}

func TestComposeSmallBOM(t *testing.T) {
	ps := Providers(Options{})
	bom := find(t, ps, "classicbom", 1)
	if bom.ComposeStream == nil || bom.Teardown == nil || bom.Reconcile != nil {
		t.Fatalf("classicbom provider: want ComposeStream and Teardown only")
	}
	comp, err := sdk.Compose(context.Background(), &bom, request(t, "classicbom", 1, "org", smallBOM))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range comp.Children {
		got = append(got, fmt.Sprintf("%s/v%d/%s %s", c.Kind, c.KindVersion, c.Name, c.Spec))
	}
	want := []string{
		`tgw/v1/payments-tgw {"name":"payments-tgw"}`,
		`account/v1/payments-tgw-host {"team_name":"payments-tgw-host"}`,
		`account/v1/payments-ledger {"team_name":"payments-ledger"}`,
		`vpc/v1/payments-ledger {"cidr":"` + cidrFor("payments-ledger") + `"}`,
		`route/v1/payments-ledger {}`,
		`account/v1/payments-checkout {"team_name":"payments-checkout"}`,
		`vpc/v1/payments-checkout {"cidr":"` + cidrFor("payments-checkout") + `"}`,
		`route/v1/payments-checkout {}`,
		`account/v1/research-lab {"team_name":"research-lab"}`,
		`vpc/v1/research-lab {"cidr":"` + cidrFor("research-lab") + `"}`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("children:\n got %q\nwant %q", got, want)
	}
	var edges []string
	for _, e := range comp.Edges {
		s := fmt.Sprintf("%s -> %s", e.Consumer, e.Producer)
		for _, f := range e.Flows {
			s += fmt.Sprintf(" [%s->%s]", f.From, f.To)
		}
		edges = append(edges, s)
	}
	wantEdges := []string{
		"tgw/payments-tgw -> account/payments-tgw-host",
		"vpc/payments-ledger -> account/payments-ledger [account_id->account_id]",
		"route/payments-ledger -> vpc/payments-ledger [vpc_id->vpc_id]",
		"route/payments-ledger -> tgw/payments-tgw [tgw_id->tgw_id]",
		"vpc/payments-checkout -> account/payments-checkout [account_id->account_id]",
		"route/payments-checkout -> vpc/payments-checkout [vpc_id->vpc_id]",
		"route/payments-checkout -> tgw/payments-tgw [tgw_id->tgw_id]",
		"vpc/research-lab -> account/research-lab [account_id->account_id]",
	}
	if !reflect.DeepEqual(edges, wantEdges) {
		t.Errorf("edges:\n got %q\nwant %q", edges, wantEdges)
	}
}

// largeBOM generates nFD domains with teams spread over them; every third
// domain has no networking. Names mix case and punctuation on purpose.
func largeBOM(nFD, nTeams int) BOMSpec {
	var s BOMSpec
	for i := range nFD {
		s.FunctionalDomains = append(s.FunctionalDomains, FunctionalDomain{
			Name: fmt.Sprintf("Functional Domain %02d", i), Networking: i%3 != 0})
	}
	for j := range nTeams {
		fd := &s.FunctionalDomains[j%nFD]
		name := fmt.Sprintf("service-team-%04d", j)
		if j%7 == 0 {
			name = fmt.Sprintf("Service_Team %04d with a very long descriptive name that goes on", j)
		}
		fd.ServiceTeams = append(fd.ServiceTeams, ServiceTeam{Name: name})
	}
	return s
}

func TestComposeLargeBOM(t *testing.T) {
	spec := largeBOM(58, 1176)
	comp, err := ComposeBOM(spec)
	if err != nil {
		t.Fatal(err)
	}
	var wantChildren, wantEdges int
	wantKinds := map[string]int{}
	for _, fd := range spec.FunctionalDomains {
		n := len(fd.ServiceTeams)
		wantKinds["account"] += n
		wantKinds["vpc"] += n
		wantEdges += n // vpc -> account
		if fd.Networking {
			wantKinds["tgw"]++
			wantKinds["account"]++
			wantKinds["route"] += n
			wantEdges += 1 + 2*n
		}
	}
	for _, n := range wantKinds {
		wantChildren += n
	}
	if got, want := len(comp.Children), wantChildren; got != want {
		t.Errorf("children = %d, want %d", got, want)
	}
	if got, want := len(comp.Edges), wantEdges; got != want {
		t.Errorf("edges = %d, want %d", got, want)
	}
	gotKinds := map[string]int{}
	ids := map[converge.ID]bool{}
	for _, c := range comp.Children {
		gotKinds[c.Kind]++
		id := converge.NewID(c.Kind, c.Name)
		if ids[id] {
			t.Errorf("duplicate child %s", id)
		}
		ids[id] = true
		if len(c.Name) > MaxNameLen || !dnsLabel.MatchString(c.Name) {
			t.Errorf("child %s: name is not a DNS label of at most %d characters", id, MaxNameLen)
		}
		if !json.Valid(c.Spec) {
			t.Errorf("child %s: spec %q is not JSON", id, c.Spec)
		}
	}
	if !reflect.DeepEqual(gotKinds, wantKinds) {
		t.Errorf("children by kind = %v, want %v", gotKinds, wantKinds)
	}
	for _, e := range comp.Edges {
		if !ids[e.Consumer] || !ids[e.Producer] {
			t.Errorf("edge %s -> %s names a child that was not emitted", e.Consumer, e.Producer)
		}
	}
	t.Logf("58 FDs, 1176 teams: %d children, %d edges", len(comp.Children), len(comp.Edges))
}

func TestComposeDeterministic(t *testing.T) {
	spec := largeBOM(58, 1176)
	a, err := ComposeBOM(spec)
	if err != nil {
		t.Fatal(err)
	}
	// Decode a fresh copy from JSON, as a second task would.
	var again BOMSpec
	if err := json.Unmarshal(mustJSON(t, spec), &again); err != nil {
		t.Fatal(err)
	}
	b, err := ComposeBOM(again)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same spec composed twice gave different children or edges")
	}
}

// TestComposeStableUnderEdit: removing one team and adding another (the
// updated BOM) changes only those teams' children; every other child keeps
// its name and spec byte for byte.
func TestComposeStableUnderEdit(t *testing.T) {
	before := largeBOM(58, 1176)
	after := largeBOM(58, 1176)
	fd := &after.FunctionalDomains[1]
	removed := fd.ServiceTeams[0].Name
	fd.ServiceTeams = append(fd.ServiceTeams[1:], ServiceTeam{Name: "new-team"})
	a, err := ComposeBOM(before)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ComposeBOM(after)
	if err != nil {
		t.Fatal(err)
	}
	index := func(c *sdk.Composition) map[converge.ID]string {
		m := map[converge.ID]string{}
		for _, ch := range c.Children {
			m[converge.NewID(ch.Kind, ch.Name)] = string(ch.Spec)
		}
		return m
	}
	ia, ib := index(a), index(b)
	var gone, added, changed []string
	for id, spec := range ia {
		if s, ok := ib[id]; !ok {
			gone = append(gone, string(id))
		} else if s != spec {
			changed = append(changed, string(id))
		}
	}
	for id := range ib {
		if _, ok := ia[id]; !ok {
			added = append(added, string(id))
		}
	}
	oldName := childName(fd.Name, removed)
	newName := childName(fd.Name, "new-team")
	if got, want := len(gone), 3; got != want {
		t.Errorf("removed children = %v, want the 3 of %s", gone, oldName)
	}
	if got, want := len(added), 3; got != want {
		t.Errorf("added children = %v, want the 3 of %s", added, newName)
	}
	for _, id := range append(gone, added...) {
		if n := converge.ID(id).Name(); n != oldName && n != newName {
			t.Errorf("child %s changed but belongs to neither edited team", id)
		}
	}
	if len(changed) != 0 {
		t.Errorf("children whose spec changed: %v, want none", changed)
	}
}

func TestComposeErrors(t *testing.T) {
	tests := []struct {
		name    string
		spec    BOMSpec
		wantErr string
	}{
		{"empty domain name", BOMSpec{FunctionalDomains: []FunctionalDomain{{Name: " "}}},
			"functional_domains[0].name: empty"},
		{"empty team name", BOMSpec{FunctionalDomains: []FunctionalDomain{{Name: "a", ServiceTeams: []ServiceTeam{{Name: "x"}, {}}}}},
			"functional_domains[0].service_teams[1].name: empty"},
		{"duplicate team", BOMSpec{FunctionalDomains: []FunctionalDomain{{Name: "a", ServiceTeams: []ServiceTeam{{Name: "x"}, {Name: "x"}}}}},
			"functional_domains[0].service_teams[0] and functional_domains[0].service_teams[1] both map to account/a-x"},
		{"ambiguous join", BOMSpec{FunctionalDomains: []FunctionalDomain{
			{Name: "a-b", ServiceTeams: []ServiceTeam{{Name: "c"}}},
			{Name: "a", ServiceTeams: []ServiceTeam{{Name: "b-c"}}}}},
			"functional_domains[0].service_teams[0] and functional_domains[1].service_teams[0] both map to account/a-b-c"},
		{"team named like the tgw host", BOMSpec{FunctionalDomains: []FunctionalDomain{
			{Name: "a", Networking: true, ServiceTeams: []ServiceTeam{{Name: "tgw-host"}}}}},
			"functional_domains[0] and functional_domains[0].service_teams[0] both map to account/a-tgw-host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ComposeBOM(tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
			if !isPermanent(err) {
				t.Errorf("err = %v, want a permanent error", err)
			}
		})
	}
}

func TestComposeBadSpec(t *testing.T) {
	bom := find(t, Providers(Options{FaultRate: 1}), "classicbom", 1)
	r := request(t, "classicbom", 1, "org", nil)
	r.Spec = json.RawMessage(`{"functional_domains": 3}`)
	if _, err := sdk.Compose(context.Background(), &bom, r); !isPermanent(err) {
		t.Errorf("compose of a malformed spec: err = %v, want a permanent error", err)
	}
	// FaultRate 1 never touches the composer.
	r.Spec = mustJSON(t, smallBOM)
	if _, err := sdk.Compose(context.Background(), &bom, r); err != nil {
		t.Errorf("compose with FaultRate 1: %v, want no fault", err)
	}
}

func TestChildName(t *testing.T) {
	long := strings.Repeat("x", 70)
	tests := []struct {
		name  string
		parts []string
		want  string
	}{
		{"clean", []string{"payments", "ledger"}, "payments-ledger"},
		{"literal suffix", []string{"payments", "tgw-host"}, "payments-tgw-host"},
		{"cleaned gets hash", []string{"Payments", "Ledger Team"}, "payments-ledger-team-" + shortHash(8, "Payments", "Ledger Team")},
		{"punctuation only", []string{"__", "--"}, shortHash(8, "__", "--")},
		{"too long", []string{long, "t"}, strings.Repeat("x", 54) + "-" + shortHash(8, long, "t")},
		{"exactly 63", []string{strings.Repeat("y", 61), "z"}, strings.Repeat("y", 61) + "-z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := childName(tt.parts...)
			if got != tt.want {
				t.Errorf("childName(%q) = %q, want %q", tt.parts, got, tt.want)
			}
			if len(got) > MaxNameLen || !dnsLabel.MatchString(got) {
				t.Errorf("childName(%q) = %q: not a DNS label ≤ %d", tt.parts, got, MaxNameLen)
			}
		})
	}
	if a, b := childName("Team A"), childName("team-a"); a == b {
		t.Errorf("raw names %q and %q both map to %q", "Team A", "team-a", a)
	}
}

func ExampleComposeBOM() {
	comp, err := ComposeBOM(BOMSpec{FunctionalDomains: []FunctionalDomain{
		{Name: "payments", Networking: true, ServiceTeams: []ServiceTeam{{Name: "ledger"}}},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range comp.Children {
		fmt.Printf("%s/v%d %s\n", c.Kind, c.KindVersion, c.Name)
	}
	for _, e := range comp.Edges {
		fmt.Println(e.Consumer, "->", e.Producer, e.Flows)
	}
	// Output:
	// tgw/v1 payments-tgw
	// account/v1 payments-tgw-host
	// account/v1 payments-ledger
	// vpc/v1 payments-ledger
	// route/v1 payments-ledger
	// tgw/payments-tgw -> account/payments-tgw-host []
	// vpc/payments-ledger -> account/payments-ledger [{account_id account_id}]
	// route/payments-ledger -> vpc/payments-ledger [{vpc_id vpc_id}]
	// route/payments-ledger -> tgw/payments-tgw [{tgw_id tgw_id}]
}

// BenchmarkComposeBOM composes the classic example's shape, 58
// networking domains and 1,176 teams (3,644 children), and the million
// resources of the scale gate (333,000 teams, 999,116 children), from
// the spec's JSON as a compose task carries it.
func BenchmarkComposeBOM(b *testing.B) {
	for _, c := range []struct{ teams, children int }{{1176, 3644}, {333000, 999116}} {
		b.Run(fmt.Sprintf("teams=%d", c.teams), func(b *testing.B) {
			spec := largeBOM(58, c.teams)
			for i := range spec.FunctionalDomains {
				spec.FunctionalDomains[i].Networking = true
			}
			raw, err := json.Marshal(spec)
			if err != nil {
				b.Fatal(err)
			}
			p := find(&testing.T{}, Providers(Options{}), "classicbom", 1)
			r := &sdk.Request{Kind: "classicbom", KindVersion: 1, Name: "classic", Spec: raw}
			b.ReportAllocs()
			for b.Loop() {
				comp, err := sdk.Compose(context.Background(), &p, r)
				if err != nil {
					b.Fatal(err)
				}
				if len(comp.Children) != c.children {
					b.Fatalf("children = %d, want %d", len(comp.Children), c.children)
				}
			}
		})
	}
}

// BenchmarkComposeDelta answers a one-team change of the 333,000-team
// BOM as the SDK does against its base: both specs cut into domains, the
// changed domain composed twice, the difference sent.
func BenchmarkComposeDelta(b *testing.B) {
	spec := largeBOM(58, 333000)
	base, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	fd := &spec.FunctionalDomains[17]
	fd.ServiceTeams = append(fd.ServiceTeams, ServiceTeam{Name: "one-more-team"})
	next, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	p := find(&testing.T{}, Providers(Options{}), "classicbom", 1)
	r := &sdk.Request{Kind: "classicbom", KindVersion: 1, Name: "classic", Spec: next, BaseSpec: base}
	b.ReportAllocs()
	for b.Loop() {
		comp, removed, err := sdk.ComposeDelta(context.Background(), &p, r)
		if err != nil {
			b.Fatal(err)
		}
		if len(comp.Children) != 3 || len(removed) != 0 {
			b.Fatalf("delta: %d children, %d removed; want 3, 0", len(comp.Children), len(removed))
		}
	}
}
