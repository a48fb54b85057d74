package onprem

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/sdk"
)

func TestComposeBOM(t *testing.T) {
	spec := BOMSpec{FunctionalDomains: []Domain{{Name: "fd-00", ServiceTeams: []Team{{Name: "team-000"}, {Name: "team-001", ConnectionLimit: 3}}}}}
	c, err := ComposeBOM(spec)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, ch := range c.Children {
		ids = append(ids, ch.Kind+"/"+ch.Name+" "+string(ch.Spec))
	}
	want := []string{
		`pgrole/fd-00-team-000 {"name":"fd_00_team_000","connection_limit":10}`,
		`pgdatabase/fd-00-team-000 {"name":"fd_00_team_000"}`,
		`dnsrecord/fd-00-team-000 {"name":"team-000.fd-00.db"}`,
		`pgrole/fd-00-team-001 {"name":"fd_00_team_001","connection_limit":3}`,
		`pgdatabase/fd-00-team-001 {"name":"fd_00_team_001"}`,
		`dnsrecord/fd-00-team-001 {"name":"team-001.fd-00.db"}`,
	}
	if !reflect.DeepEqual(ids, want) {
		t.Errorf("children\n got %q\nwant %q", ids, want)
	}
	if got, want := c.Edges[0], (converge.Edge{Consumer: "pgdatabase/fd-00-team-000", Producer: "pgrole/fd-00-team-000",
		Flows: []converge.ValueFlow{{From: "name", To: "owner"}}}); !reflect.DeepEqual(got, want) {
		t.Errorf("edge 0 = %+v, want %+v", got, want)
	}
	if got := c.Edges[1]; got.Consumer != "dnsrecord/fd-00-team-000" || got.Producer != "pgdatabase/fd-00-team-000" || got.Flows[0] != (converge.ValueFlow{From: "host", To: "target"}) {
		t.Errorf("edge 1 = %+v", got)
	}

	// The streamed compose, whole and by parts, yields the same.
	b, _ := json.Marshal(spec)
	p := Providers()[0]
	got, err := sdk.Compose(context.Background(), &p, &sdk.Request{Kind: BOMKind, KindVersion: 1, Name: "b", Spec: b})
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Errorf("sdk.Compose = %+v, %v; want ComposeBOM's", got, err)
	}

	_, err = ComposeBOM(BOMSpec{FunctionalDomains: []Domain{{Name: "fd", ServiceTeams: []Team{{Name: "ok"}, {Name: "Bad_Name"}}}}})
	if sdk.OutcomeOf(err) != converge.OutcomePermanent || !strings.Contains(err.Error(), "service_teams[1].name") {
		t.Errorf("bad names: %v", err)
	}
	_, err = ComposeBOM(BOMSpec{FunctionalDomains: []Domain{{Name: "fd", ServiceTeams: []Team{{Name: "ab"}, {Name: "ab"}}}}})
	if sdk.OutcomeOf(err) != converge.OutcomePermanent || !strings.Contains(err.Error(), "both map to fd-ab") {
		t.Errorf("duplicate: %v", err)
	}
}
