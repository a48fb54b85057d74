package view

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/statetest"
)

// readStore is a real store holding a composition root with three
// children, one of them drifted, of a kind with a secret spec field.
func readStore(t *testing.T) Reader {
	t.Helper()
	st := statetest.Open(t)
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	res := func(kind, name string, owner converge.ID, spec string) *converge.Resource {
		return &converge.Resource{UID: kind + "-" + name, Kind: kind, KindVersion: 1, Name: name, Owner: owner, Phase: converge.PhaseReady,
			Generation: 1, ObservedGeneration: 1, Spec: json.RawMessage(spec), Declared: json.RawMessage(spec), CreatedAt: at, UpdatedAt: at}
	}
	drifted := res("vpc", "b", "bom/root", `{"cidr":"10.0.1.0/24","password":"hunter22-hunter22"}`)
	drifted.Drift = &converge.DriftReport{Fields: []string{"cidr"}, Policy: converge.DriftPolicyReport, Since: at}
	b := &converge.Batch{
		Kinds: []*converge.Kind{{Name: "bom", Version: 1}, {Name: "vpc", Version: 1, Secret: []string{"spec.password"}}},
		Resources: []*converge.Resource{
			res("bom", "root", "", `{}`),
			res("vpc", "a", "bom/root", `{"cidr":"10.0.0.0/24","password":"hunter22-hunter22"}`),
			drifted,
			res("vpc", "c", "bom/root", `{"cidr":"10.0.2.0/24","password":"hunter22-hunter22"}`),
		},
	}
	if err := st.Commit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return st
}

// list shows the roots with their child counts; --all every resource;
// --drifted only the drifted, the limit counting them; secrets hidden.
func TestReadList(t *testing.T) {
	ctx := context.Background()
	rd := readStore(t)
	l, err := ReadList(ctx, rd, ListQuery{Table: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Resources) != 1 || l.Resources[0].Name != "root" || l.Resources[0].Children == nil || *l.Resources[0].Children != 3 {
		t.Fatalf("roots: %+v, want bom/root with 3 children", l.Resources)
	}
	l, err = ReadList(ctx, rd, ListQuery{All: true, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Resources) != 2 || l.Resources[0].Children != nil {
		t.Errorf("--all --limit 2: %d resources (children %v), want 2 without counts", len(l.Resources), l.Resources[0].Children)
	}
	l, err = ReadList(ctx, rd, ListQuery{Drifted: true, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Resources) != 1 || l.Resources[0].Name != "b" || l.Resources[0].Drift == nil {
		t.Fatalf("--drifted: %+v, want vpc/b", l.Resources)
	}
	var out bytes.Buffer
	if err := l.WriteData(&out, "json"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "hunter22") || !strings.Contains(out.String(), `"password": "(secret)"`) {
		t.Errorf("list -o json shows the secret, or no (secret):\n%s", out.String())
	}
	out.Reset()
	if err := l.WriteTable(&out, time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "vpc/b     v1       Ready (drifted)  -         1h") {
		t.Errorf("table:\n%s", out.String())
	}
}

// get KIND reads at most --limit resources in name order and says there
// are more; get KIND/NAME reads one, or says it is not there.
func TestReadKindAndGet(t *testing.T) {
	ctx := context.Background()
	rd := readStore(t)
	views, created, more, err := ReadKind(ctx, rd, "vpc", 2, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(views) != 2 || views[0].Name != "a" || views[1].Name != "b" || !more || created[0] == nil {
		t.Errorf("vpc --limit 2: %d (%v), more %v, want a and b, and more", len(views), views, more)
	}
	if _, _, more, err := ReadKind(ctx, rd, "vpc", 0, true); err != nil || more {
		t.Errorf("vpc --limit 0: more %v, %v; want all of them", more, err)
	}
	x, err := NewRedactor(ctx, rd)
	if err != nil {
		t.Fatal(err)
	}
	g, _, found, err := ReadGet(ctx, rd, x, "vpc/a")
	if err != nil || !found {
		t.Fatalf("get vpc/a: found %v, %v", found, err)
	}
	if strings.Contains(string(g.Spec), "hunter22") || g.CreatedAt == nil || g.DependsOn == nil || g.UsedBy == nil {
		t.Errorf("get vpc/a: %+v", g)
	}
	if _, _, found, err := ReadGet(ctx, rd, x, "vpc/nope"); err != nil || found {
		t.Errorf("get vpc/nope: found %v, %v; want not found and no error", found, err)
	}
}

// tree reads the root's children; more than group of them are counted
// by kind and phase instead.
func TestReadTree(t *testing.T) {
	ctx := context.Background()
	rd := readStore(t)
	n, err := ReadTree(ctx, rd, "bom/root", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Children) != 3 || n.Children[1].Drift == nil || len(n.Groups) != 0 {
		t.Errorf("--group 0: %d children, %d groups", len(n.Children), len(n.Groups))
	}
	n, err = ReadTree(ctx, rd, "bom/root", 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Children) != 0 || len(n.Groups) != 1 || n.Groups[0].Count != 3 || n.Groups[0].Drifted != 1 || n.Groups[0].Phases[converge.PhaseReady] != 3 {
		t.Errorf("--group 2: children %d, groups %+v", len(n.Children), n.Groups)
	}
}
