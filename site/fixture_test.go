package site

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
)

// nasty is text that must render as text, never as markup.
const nasty = `<script>alert(1)</script>`

// epoch is the fixed clock of the fixtures.
var epoch = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func secretOf(name string) string { return "pw-" + name + "-S3CRET" }

// classicBatch returns a classic-like graph: the root classicbom/classic
// composing, per domain, a tgw and its host account and, per team, an
// account, a vpc (flow account_id) and a route (flows vpc_id, tgw_id);
// plus db/orders (secret status.password) and app/shop, which consumes its
// password through a flow into spec.db_password. Accounts carry a secret
// status.root_password. Phases vary; failed resources carry nasty text in
// their reason and events. It has 1 + domains×(2+3×teams) + 2 resources.
func classicBatch(domains, teams int) *converge.Batch {
	b := &converge.Batch{
		Kinds: []*converge.Kind{
			{Name: "classicbom", Version: 1, Reactions: []string{"compose"}},
			{Name: "account", Version: 1, Reactions: []string{"reconcile"}, Secret: []string{"status.root_password"}},
			{Name: "vpc", Version: 1, Reactions: []string{"reconcile"}},
			{Name: "tgw", Version: 1, Reactions: []string{"reconcile"}},
			{Name: "route", Version: 1, Reactions: []string{"reconcile"}},
			{Name: "db", Version: 1, Reactions: []string{"reconcile"}, Secret: []string{"password"}},
			{Name: "app", Version: 1, Reactions: []string{"reconcile"}},
		},
		Applied: &converge.Revision{Ref: "main", Hash: "c0ffee0000000000000000000000000000000001", Subject: "add teams"},
	}
	n := 0
	add := func(kind, name string, owner converge.ID, spec, status any) *converge.Resource {
		n++
		r := &converge.Resource{UID: fmt.Sprintf("uid-%d", n), Kind: kind, KindVersion: 1, Name: name,
			Owner: owner, Origin: converge.OriginComposed, Phase: converge.PhaseReady,
			Generation: 1, ObservedGeneration: 1, CreatedAt: epoch, UpdatedAt: epoch.Add(time.Duration(n) * time.Second)}
		switch {
		case n%23 == 0:
			r.Phase, r.Reason, r.LastError = converge.PhaseFailed, "reconcile: "+nasty+" & broken", "api said "+nasty
		case n%19 == 0:
			r.Phase, r.Reason = converge.PhasePending, "waiting for producers"
		case n%17 == 0:
			r.Phase = converge.PhaseRunning
			r.Lease = &converge.Lease{TaskID: "t1", Reaction: "reconcile", Worker: "w1", Expires: epoch.Add(time.Minute)}
		case n%29 == 0:
			r.Phase, r.Deleting, r.DeletedAt = converge.PhaseDeleting, true, epoch
		}
		r.Spec, _ = json.Marshal(spec)
		r.Declared = r.Spec
		if status != nil && r.Phase == converge.PhaseReady {
			r.Status, _ = json.Marshal(status)
		}
		b.Resources = append(b.Resources, r)
		msg := "reconciled"
		if r.Phase == converge.PhaseFailed {
			msg = "failed: " + nasty
		}
		b.Events = append(b.Events,
			converge.Event{Time: epoch, Resource: r.ID(), Type: "Created", Message: "created by " + string(owner)},
			converge.Event{Time: epoch.Add(time.Second), Resource: r.ID(), Type: string(r.Phase), Message: msg})
		return r
	}
	var doms []map[string]any
	for d := range domains {
		doms = append(doms, map[string]any{"name": fmt.Sprintf("fd%d", d), "networking": true})
	}
	root := add("classicbom", "classic", "", map[string]any{"functional_domains": doms}, nil)
	root.Origin, root.Source = converge.OriginGit, "resources/bom.cue:1"
	rid := root.ID()
	for d := range domains {
		fd := fmt.Sprintf("fd%d", d)
		tgw := add("tgw", fd+"-tgw", rid, map[string]any{"name": fd + "-tgw"}, map[string]any{"tgw_id": "tgw-" + fd})
		host := add("account", fd+"-tgw-host", rid, map[string]any{"team_name": fd + "-tgw-host"},
			map[string]any{"account_id": "111111111111", "root_password": secretOf(fd + "-tgw-host")})
		b.Edges = append(b.Edges, converge.Edge{Consumer: tgw.ID(), Producer: host.ID()})
		for t := range teams {
			name := fmt.Sprintf("%s-team%d", fd, t)
			acct := add("account", name, rid, map[string]any{"team_name": name},
				map[string]any{"account_id": fmt.Sprintf("%012d", n), "root_password": secretOf(name)})
			vpc := add("vpc", name, rid, map[string]any{"account_id": fmt.Sprintf("%012d", n-1), "cidr": "10.0.0.0/24"},
				map[string]any{"vpc_id": "vpc-" + name})
			route := add("route", name, rid, map[string]any{"vpc_id": "vpc-" + name, "tgw_id": "tgw-" + fd},
				map[string]any{"route_id": "rt-" + name})
			b.Edges = append(b.Edges,
				converge.Edge{Consumer: vpc.ID(), Producer: acct.ID(), Flows: []converge.ValueFlow{{From: "account_id", To: "account_id"}}},
				converge.Edge{Consumer: route.ID(), Producer: vpc.ID(), Flows: []converge.ValueFlow{{From: "vpc_id", To: "vpc_id"}}},
				converge.Edge{Consumer: route.ID(), Producer: tgw.ID(), Flows: []converge.ValueFlow{{From: "tgw_id", To: "tgw_id"}}})
		}
	}
	db := add("db", "orders", "", map[string]any{"engine": "pg"}, map[string]any{"password": secretOf("orders-db")})
	db.Phase, db.Status = converge.PhaseReady, json.RawMessage(`{"password":"`+secretOf("orders-db")+`","host":"db.local"}`)
	db.Origin = converge.OriginGit
	app := add("app", "shop", "", map[string]any{"db_password": secretOf("orders-db"), "replicas": 2}, nil)
	app.Origin = converge.OriginGit
	b.Edges = append(b.Edges, converge.Edge{Consumer: app.ID(), Producer: db.ID(),
		Flows: []converge.ValueFlow{{From: "password", To: "db_password"}}})
	// An event that leaks a secret into free text must be scrubbed.
	b.Events = append(b.Events, converge.Event{Time: epoch, Resource: app.ID(), Type: "Debug",
		Message: "connected with " + secretOf("orders-db")})
	return b
}

// secrets returns every secret value the fixture holds.
func fixtureSecrets(domains, teams int) []string {
	out := []string{secretOf("orders-db")}
	for d := range domains {
		fd := fmt.Sprintf("fd%d", d)
		out = append(out, secretOf(fd+"-tgw-host"))
		for t := range teams {
			out = append(out, secretOf(fmt.Sprintf("%s-team%d", fd, t)))
		}
	}
	return out
}

// revisions puts two revision records: the applied one, all green, and a
// newer breaking one held with a lint finding holding nasty text.
func putRevisions(t testing.TB, s *state.Store) {
	t.Helper()
	good := &converge.RevisionRecord{
		Revision: converge.Revision{Ref: "main", Hash: "c0ffee0000000000000000000000000000000001", Subject: "add teams"},
		Applied:  true, Seen: epoch,
		Statuses: []converge.CommitStatus{
			{Context: converge.ContextValidate, State: converge.StateSuccess, Description: "valid", Time: epoch},
			{Context: converge.ContextLint, State: converge.StateSuccess, Description: "no findings", Time: epoch},
			{Context: converge.ContextSync, State: converge.StateSuccess, Description: "3645/3645 Ready", Time: epoch},
		},
	}
	bad := &converge.RevisionRecord{
		Revision: converge.Revision{Ref: "main", Hash: "badbad0000000000000000000000000000000002", Subject: "break " + nasty},
		Parent:   good.Revision.Hash, Seen: epoch.Add(time.Minute), Held: "not applied: breaking change",
		Statuses: []converge.CommitStatus{
			{Context: converge.ContextValidate, State: converge.StateSuccess, Description: "valid", Time: epoch},
			{Context: converge.ContextLint, State: converge.StateFailure, Description: "not applied: vpc/v1 spec.region: field added as required", Time: epoch},
		},
		Findings: []converge.Finding{{File: "kinds/vpc.cue", Line: 3, Column: 2, Path: "spec.region", Rule: "required-added", Message: "field added as required " + nasty}},
	}
	for _, r := range []*converge.RevisionRecord{good, bad} {
		if err := s.PutRevision(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
}

// fill commits the fixture into s: in one batch up to 100,000 resources,
// else in batches of 5,000 resources (with the edges they consume and
// their events), as the scheduler's group commit would.
func fill(t testing.TB, s *state.Store, domains, teams int) {
	t.Helper()
	b := classicBatch(domains, teams)
	if len(b.Resources) <= 100_000 {
		if err := s.Commit(context.Background(), b); err != nil {
			t.Fatalf("commit fixture: %v", err)
		}
		putRevisions(t, s)
		return
	}
	edges := make(map[converge.ID][]converge.Edge)
	for _, e := range b.Edges {
		edges[e.Consumer] = append(edges[e.Consumer], e)
	}
	events := make(map[converge.ID][]converge.Event)
	for _, ev := range b.Events {
		events[ev.Resource] = append(events[ev.Resource], ev)
	}
	const size = 5000
	for i := 0; i < len(b.Resources); i += size {
		part := &converge.Batch{Resources: b.Resources[i:min(i+size, len(b.Resources))]}
		if i == 0 {
			part.Kinds, part.Applied = b.Kinds, b.Applied
		}
		for _, r := range part.Resources { // producers come before consumers
			part.Edges = append(part.Edges, edges[r.ID()]...)
			part.Events = append(part.Events, events[r.ID()]...)
		}
		if err := s.Commit(context.Background(), part); err != nil {
			t.Fatalf("commit fixture part %d: %v", i/size, err)
		}
	}
	putRevisions(t, s)
}

func fixedNow() time.Time { return epoch.Add(time.Hour) }
