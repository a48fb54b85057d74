package statetest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
)

// The conformance suite's model test: random batches applied to a store
// and to model, the store's documented semantics written independently of
// it, compared after each.

func testAgainstModel(t *testing.T, open Opener) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { testAgainstModelSeed(t, open, seed) })
	}
}

func testAgainstModelSeed(t *testing.T, open Opener, seed uint64) {
	s := open(t, state.Options{})
	rng := rand.New(rand.NewPCG(seed, 11))
	var ids []converge.ID
	for _, k := range []string{"account", "vpc", "route"} {
		for i := range 6 {
			ids = append(ids, converge.NewID(k, fmt.Sprint(i)))
		}
	}
	pick := func() converge.ID { return ids[rng.IntN(len(ids))] }
	flows := [][]converge.ValueFlow{nil, {{From: "a", To: "b"}}, {{From: "c", To: "d"}, {From: "e", To: "f"}}}
	phases := []converge.Phase{converge.PhasePending, converge.PhaseRunning, converge.PhaseReady}
	m := &model{owner: map[converge.ID]converge.ID{}, phase: map[converge.ID]converge.Phase{}, edges: map[[2]converge.ID][]converge.ValueFlow{}}
	accepted, rejected := 0, 0
	for step := range 400 {
		b := &converge.Batch{}
		for range 1 + rng.IntN(8) {
			switch op := rng.IntN(10); {
			case op < 4:
				id := pick()
				r := res(id.Kind(), id.Name(), "")
				r.Phase = phases[rng.IntN(len(phases))]
				if rng.IntN(2) == 0 {
					r.Owner = pick()
				}
				b.Resources = append(b.Resources, r)
			case op < 7:
				b.Edges = append(b.Edges, edge(pick(), pick(), flows[rng.IntN(len(flows))]...))
			case op < 8:
				b.DeletedEdges = append(b.DeletedEdges, edge(pick(), pick()))
			default:
				b.DeletedResources = append(b.DeletedResources, pick())
			}
		}
		want, ok := m.apply(b)
		err := s.Commit(context.Background(), b)
		if ok != (err == nil) {
			t.Fatalf("step %d: Commit error = %v, model accepts = %v\nbatch: %s", step, err, ok, mustJSON(t, b))
		}
		if !ok {
			rejected++
			continue
		}
		accepted++
		m = want
		snap := load(t, s)
		got := &model{owner: map[converge.ID]converge.ID{}, phase: map[converge.ID]converge.Phase{}, edges: map[[2]converge.ID][]converge.ValueFlow{}}
		for _, r := range snap.Resources {
			got.owner[r.ID()], got.phase[r.ID()] = r.Owner, r.Phase
		}
		for _, e := range snap.Edges {
			got.edges[[2]converge.ID{e.Consumer, e.Producer}] = e.Flows
		}
		if fmt.Sprint(got) != fmt.Sprint(m) {
			t.Fatalf("step %d: store\n%v\nmodel\n%v", step, got, m)
		}
		for _, id := range ids {
			children, err := s.Children(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			var wantChildren []converge.ID
			for c, o := range m.owner {
				if o == id {
					wantChildren = append(wantChildren, c)
				}
			}
			slices.Sort(wantChildren)
			if !slices.Equal(children, wantChildren) {
				t.Fatalf("step %d: Children(%s) = %v, want %v", step, id, children, wantChildren)
			}
			_, producedFor, err := s.EdgesOf(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for k := range m.edges {
				if k[1] == id {
					n++
				}
			}
			if len(producedFor) != n {
				t.Fatalf("step %d: EdgesOf(%s) producedFor = %v, want %d edges", step, id, producedFor, n)
			}
		}
		if step%20 == 0 {
			if err := s.Check(context.Background()); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
	}
	if accepted < 100 || rejected < 50 {
		t.Errorf("%d batches accepted, %d rejected: the generator does not exercise both", accepted, rejected)
	}
	t.Logf("%d batches accepted, %d rejected", accepted, rejected)
}

// model is the store's documented semantics, written independently of it:
// TestAgainstModel applies random batches to both and compares.
type model struct {
	owner map[converge.ID]converge.ID // resource → owner ("" for none)
	phase map[converge.ID]converge.Phase
	edges map[[2]converge.ID][]converge.ValueFlow
}

func (m *model) clone() *model {
	return &model{owner: maps.Clone(m.owner), phase: maps.Clone(m.phase), edges: maps.Clone(m.edges)}
}

// apply returns the model after b, or ok false if the store must reject b.
func (m *model) apply(b *converge.Batch) (*model, bool) {
	n := m.clone()
	del := map[converge.ID]bool{}
	for _, id := range b.DeletedResources {
		del[id] = true
	}
	for _, r := range b.Resources {
		if del[r.ID()] || r.Owner == r.ID() {
			return nil, false
		}
		n.owner[r.ID()], n.phase[r.ID()] = r.Owner, r.Phase
	}
	delEdge := map[[2]converge.ID]bool{}
	for _, e := range b.DeletedEdges {
		delEdge[[2]converge.ID{e.Consumer, e.Producer}] = true
	}
	for _, e := range b.Edges {
		k := [2]converge.ID{e.Consumer, e.Producer}
		if delEdge[k] || e.Consumer == e.Producer {
			return nil, false
		}
		if _, ok := n.owner[e.Consumer]; !ok {
			return nil, false
		}
		n.edges[k] = e.Flows
	}
	for k := range delEdge {
		delete(n.edges, k)
	}
	for id := range del {
		delete(n.owner, id)
		delete(n.phase, id)
		for k := range n.edges {
			if k[0] == id {
				delete(n.edges, k)
			}
		}
	}
	for _, o := range n.owner {
		if _, ok := n.owner[o]; o != "" && !ok {
			return nil, false
		}
	}
	return n, true
}

// FullBatch is a batch that touches every bucket a store's Commit
// writes: resources with a lease and an error, edges (one to a producer
// not in the store), events, kinds, a provider config, a binding, a
// delivery, the applied revision and its record.
func FullBatch() *converge.Batch {
	root := res("bom", "classic", "")
	root.Origin = converge.OriginGit
	root.Source = "resources/bom.cue:3"
	acct := res("account", "team-a", "bom/classic")
	vpc := res("vpc", "team-a", "bom/classic")
	vpc.Status = json.RawMessage(`{"vpc_id":"vpc-1"}`)
	vpc.Phase = converge.PhaseRunning
	vpc.Attempts = 2
	vpc.LastError = "throttled"
	vpc.NextAttempt = t0.Add(time.Minute)
	vpc.Lease = &converge.Lease{TaskID: "t1", Reaction: "reconcile", Worker: "w1", Expires: t0.Add(time.Hour)}
	return &converge.Batch{
		Resources: []*converge.Resource{root, acct, vpc},
		Edges: []converge.Edge{
			edge("vpc/team-a", "account/team-a", converge.ValueFlow{From: "account_id", To: "account_id"}),
			edge("account/team-a", "tgw/missing"),
		},
		Events: []converge.Event{
			{Time: t0, Resource: "bom/classic", Type: "Created", Message: "declared"},
			{Time: t0, Resource: "vpc/team-a", Type: "Created", Message: "composed"},
		},
		Kinds: []*converge.Kind{
			{Name: "vpc", Version: 2, Reactions: []string{"reconcile"}, SpecSchema: "{cidr: string}", ResyncInterval: time.Minute},
			{Name: "vpc", Version: 1, Reactions: []string{"reconcile", "teardown"}, Finalizer: true},
		},
		Configs:    []*converge.ProviderConfig{{Name: "aws", Kind: "vpc", KindVersion: 1, IsDefault: true, Config: json.RawMessage(`{"region":"eu"}`)}},
		Bindings:   []*converge.Binding{{Name: "notify", Kind: "vpc", Transition: converge.TransitionSynced, Reactor: "slack", ReactorVersion: 1}},
		Deliveries: []*converge.Delivery{{Key: "notify/uid/1/synced", Binding: "notify", Reactor: converge.KindRef{Kind: "slack", Version: 1}, Subject: converge.Subject{Resource: "vpc/team-a", UID: "u", Generation: 1, Transition: "synced"}, Created: t0}},
		Applied:    &converge.Revision{Ref: "main", Hash: "abc123", Time: t0, Subject: "first"},
		Record: &converge.RevisionRecord{Revision: converge.Revision{Ref: "main", Hash: "abc123", Time: t0, Subject: "first"},
			Statuses: []converge.CommitStatus{{Context: converge.ContextSync, State: converge.StatePending, Description: "applied, converging", Time: t0}},
			Applied:  true, Seen: t0},
	}
}
