package sync

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

func TestDiffSpecs(t *testing.T) {
	secret := [][]string{{"password"}, {"db", "token"}, {"users", "key"}}
	tests := []struct {
		name     string
		old, new string
		want     []string // FieldChange.String()
	}{
		{"a changed field shows both values", `{"cidr":"10.0.0.0/24"}`, `{"cidr":"10.1.0.0/24"}`,
			[]string{`~ cidr: "10.0.0.0/24" → "10.1.0.0/24"`}},
		{"nothing changed", `{"a":1,"b":{"c":[1,2]}}`, `{"b":{"c":[1,2]},"a":1}`, nil},
		{"added and removed fields", `{"a":1}`, `{"b":true}`, []string{`- a: 1`, `+ b: true`}},
		{"nested fields by path", `{"tags":{"owner":"a","team":"x"}}`, `{"tags":{"owner":"b","team":"x"}}`,
			[]string{`~ tags.owner: "a" → "b"`}},
		{"numbers keep their text", `{"n":1.50}`, `{"n":2}`, []string{`~ n: 1.50 → 2`}},
		{"a list of named rows is matched by name", `{"fds":[{"name":"a","teams":[{"name":"t1"},{"name":"t2"}]}]}`,
			`{"fds":[{"name":"a","teams":[{"name":"t2"},{"name":"t3"}]}]}`,
			[]string{`- fds[a].teams[t1]: {"name":"t1"}`, `+ fds[a].teams[t3]: {"name":"t3"}`}},
		{"a row's field changes in place", `{"fds":[{"name":"a","networking":true}]}`, `{"fds":[{"name":"a","networking":false}]}`,
			[]string{`~ fds[a].networking: true → false`}},
		{"a plain list changes whole", `{"l":[1,2]}`, `{"l":[2,1]}`, []string{`~ l: [1,2] → [2,1]`}},
		{"a secret change shows (secret) only", `{"password":"hunter2hunter2"}`, `{"password":"s3cr3tvalue!"}`,
			[]string{`~ password: "(secret)" → "(secret)"`}},
		{"an added secret", `{}`, `{"password":"hunter2hunter2"}`, []string{`+ password: "(secret)"`}},
		{"a secret inside an added object", `{}`, `{"db":{"host":"h","token":"tok-123456"}}`,
			[]string{`+ db: {"host":"h","token":"(secret)"}`}},
		{"a secret in the rows of a list", `{"users":[{"key":"k-1111"}]}`, `{"users":[{"key":"k-2222"},{"key":"k-3333"}]}`,
			[]string{`~ users: [{"key":"(secret)"}] → [{"key":"(secret)"},{"key":"(secret)"}]`}},
		{"from nothing", ``, `{"a":"x"}`, []string{`+ a: "x"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, c := range DiffSpecs(json.RawMessage(tt.old), json.RawMessage(tt.new), secret) {
				got = append(got, c.String())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("DiffSpecs =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			for _, leak := range []string{"hunter2", "s3cr3t", "tok-123456", "k-1111", "k-2222"} {
				if strings.Contains(strings.Join(got, "\n"), leak) {
					t.Errorf("secret %q shown", leak)
				}
			}
		})
	}
}

func TestSpecFieldsLongValueIsCut(t *testing.T) {
	long := strings.Repeat("é", 80) // two bytes each: a cut must not split one
	got := SpecFields("+", json.RawMessage(`{"a":"`+long+`"}`), nil)
	if len(got) != 1 {
		t.Fatalf("SpecFields = %v", got)
	}
	s := got[0].String()
	if !strings.HasSuffix(s, "…") || !json.Valid(got[0].New) {
		t.Errorf("String = %q, New %s: want a cut line and the whole value", s, got[0].New)
	}
	if !bytes.ContainsRune([]byte(s), 'é') || strings.ContainsRune(s, '\uFFFD') {
		t.Errorf("String = %q cuts a character", s)
	}
}

func TestRowOf(t *testing.T) {
	rows := scheduler.NewRowIndex(scheduler.SpecRows(json.RawMessage(`{"functional_domains":[
		{"name":"fd-0","service_teams":[{"name":"team-1"}]},
		{"name":"fd-00","service_teams":[{"name":"team-1"},{"name":"team-10"}]}]}`)))
	tests := []struct {
		child, want string
	}{
		{"fd-00-team-1", "fd-00/team-1"},
		{"fd-00-team-10", "fd-00/team-10"},
		{"fd-0-team-1", "fd-0/team-1"},
		{"fd-00-tgw", "fd-00"},
		{"fd-000-tgw", ""},
		{"other", ""},
	}
	for _, tt := range tests {
		t.Run(tt.child, func(t *testing.T) {
			r, _ := rows.Of(tt.child)
			if got := r.Label(); got != tt.want {
				t.Errorf("rowOf(%s) = %q, want %q", tt.child, got, tt.want)
			}
		})
	}
}

func TestTeardownOrder(t *testing.T) {
	snap := guardSnapshot() // bom/root owns accounts a-d and vpcs a-d (each vpc consumes its account); vpc/uses-solo consumes tgw/solo
	kinds := map[converge.KindRef]*converge.Kind{
		{Kind: "vpc"}:     {Name: "vpc", Finalizer: true, Reactions: []string{"reconcile", "teardown"}},
		{Kind: "account"}: {Name: "account", Finalizer: true, Reactions: []string{"teardown"}},
	}
	tests := []struct {
		name  string
		roots []scheduler.PlanItem
		want  []string // "step id finalizer because"
	}{
		{"a producer waits for its consumer", []scheduler.PlanItem{{ID: "tgw/solo"}}, []string{
			"1 vpc/uses-solo vpc/v0 teardown consumes tgw/solo",
			"2 tgw/solo  removed from git after [vpc/uses-solo]"}},
		{"an owner waits for its children, a producer for its consumer", []scheduler.PlanItem{{ID: "bom/root"}}, []string{
			"1 vpc/a vpc/v0 teardown owned by bom/root",
			"1 vpc/b vpc/v0 teardown owned by bom/root",
			"1 vpc/c vpc/v0 teardown owned by bom/root",
			"1 vpc/d vpc/v0 teardown owned by bom/root",
			"2 account/a account/v0 teardown owned by bom/root after [vpc/a]",
			"2 account/b account/v0 teardown owned by bom/root after [vpc/b]",
			"2 account/c account/v0 teardown owned by bom/root after [vpc/c]",
			"2 account/d account/v0 teardown owned by bom/root after [vpc/d]",
			"3 bom/root  removed from git after [account/a account/b account/c account/d vpc/a vpc/b vpc/c vpc/d]"}},
		{"a pruned child", []scheduler.PlanItem{{ID: "account/a", Reason: "pruned by bom/root"}}, []string{
			"1 vpc/a vpc/v0 teardown consumes account/a",
			"2 account/a account/v0 teardown pruned by bom/root after [vpc/a]"}},
		{"an absent resource is left out", []scheduler.PlanItem{{ID: "vpc/ghost"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			_ = scheduler.SnapshotGraph(snap).Read(context.Background(), func(v scheduler.GraphView) {
				for _, s := range TeardownOrder(v, tt.roots, kinds) {
					line := strings.Join([]string{strconv.Itoa(s.Step), string(s.ID), s.Finalizer, s.Because}, " ")
					if len(s.After) > 0 {
						line += fmt.Sprintf(" after %v", s.After)
					}
					got = append(got, line)
				}
			})
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("TeardownOrder =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestReviewGroups(t *testing.T) {
	snap := &converge.Snapshot{}
	d := &converge.Desired{}
	p := &scheduler.Plan{}
	for _, n := range []string{"a", "b", "c"} {
		snap.Resources = append(snap.Resources, &converge.Resource{Kind: "vpc", Name: n, KindVersion: 1,
			Declared: json.RawMessage(`{"tags":{"owner":"x"},"cidr":"` + n + `"}`)})
		d.Resources = append(d.Resources, &converge.Resource{Kind: "vpc", Name: n, KindVersion: 1,
			Declared: json.RawMessage(`{"tags":{"owner":"y"},"cidr":"` + n + `"}`)})
		p.Update = append(p.Update, scheduler.PlanItem{ID: converge.NewID("vpc", n), From: converge.KindRef{Kind: "vpc", Version: 1},
			To: converge.KindRef{Kind: "vpc", Version: 1}, Fields: []string{"tags"}})
	}
	d.Resources[2].Declared = json.RawMessage(`{"tags":{"owner":"z"},"cidr":"c"}`)
	rv, err := NewReview(context.Background(), ReviewInput{Revision: "main@sha1:1", Plan: p, Desired: d, Graph: scheduler.SnapshotGraph(snap)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		max       int
		wantCount []int
		wantSame  []bool
	}{
		{"identical changes group", 0, []int{2, 1}, []bool{true, true}},
		{"over the limit, the same fields group", 1, []int{3}, []bool{false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gs := rv.Groups(tt.max)
			var counts []int
			var same []bool
			for _, g := range gs {
				counts, same = append(counts, g.Count), append(same, g.Same)
			}
			if got, want := fmtInts(counts), fmtInts(tt.wantCount); got != want {
				t.Errorf("counts = %v, want %v", counts, tt.wantCount)
			}
			for i := range same {
				if i < len(tt.wantSame) && same[i] != tt.wantSame[i] {
					t.Errorf("same = %v, want %v", same, tt.wantSame)
				}
			}
		})
	}
	var b bytes.Buffer
	rv.WriteText(&b, TextOptions{MaxDetail: 30, Flag: "--all"})
	for _, want := range []string{
		"  update  2 vpc (vpc/v1): vpc/a, vpc/b\n            ~ tags.owner: \"x\" → \"y\"\n",
		"  update  vpc/c (vpc/v1)\n            ~ tags.owner: \"x\" → \"z\"\n",
		"by kind: vpc 3 to update\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteText lacks %q:\n%s", want, b.String())
		}
	}
	if s := rv.Summary; s.Update != 3 || s.Total != 3 {
		t.Errorf("Summary = %+v, want 3 updates of 3", s)
	}
}

func fmtInts(n []int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
