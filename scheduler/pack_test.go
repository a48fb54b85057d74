package scheduler

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/convergehq/converge"
)

// TestPackRoundTrip packs rows with every field a packed row keeps set
// (and with each left empty) and checks the decoded row equals the
// original, field by field, times as instants with their offsets.
func TestPackRoundTrip(t *testing.T) {
	owner := &node{id: "bom/root"}
	at := time.Date(2026, 12, 2, 17, 0, 0, 123456789, time.UTC)
	full := &converge.Resource{
		UID: "4b3c", Kind: "vpc", KindVersion: 2, Name: "fd-00-team-001-vpc",
		Declared: json.RawMessage(`{"cidr":"10.0.0.0/24"}`), Spec: json.RawMessage(`{"cidr":"10.0.0.0/24","account":"a-1"}`),
		Status: json.RawMessage(`{"id":"vpc-1"}`), Phase: converge.PhaseReady, Reason: "why",
		Generation: 7, ObservedGeneration: 7, Owner: owner.id, Origin: converge.OriginComposed,
		ProviderConfigRef: "eu", Attempts: 3, LastError: "boom", NextAttempt: at.Add(time.Second),
		DeletedAt: at.Add(2 * time.Second), Source: "resources/bom.cue:12",
		CreatedAt: at.In(time.FixedZone("", 3600)), UpdatedAt: at.Local(), ComposedBy: "rev cfg", DriftPolicy: converge.DriftPolicyReport,
	}
	same := *full
	same.Spec = same.Declared
	empty := &converge.Resource{Kind: "vpc", Name: "x", Phase: converge.PhaseReady, Origin: converge.OriginGit}
	neg := &converge.Resource{Kind: "vpc", Name: "y", KindVersion: -1, Generation: -3, Attempts: -2, Spec: json.RawMessage{}}
	del := *full
	del.Deleting, del.Phase = true, converge.PhaseDeleting
	// What converge makes: a hex UID (16 bytes packed), times in UTC
	// (nanoseconds, the update's after the creation's), a known phase
	// and origin (a byte each); and what it does not: an uppercase or
	// short UID, an instant before the creation, one beyond 2262, a
	// phase and an origin spelled out.
	usual := &converge.Resource{UID: "7eab53535805d8e8f7747860b9f57077", Kind: "route", Name: "r", KindVersion: 1,
		Declared: json.RawMessage(`{}`), Spec: json.RawMessage(`{"vpc_id":"vpc-1"}`), Status: json.RawMessage(`{"route_id":"rtb-1"}`),
		Phase: converge.PhaseReady, Generation: 1, ObservedGeneration: 1, Owner: owner.id, Origin: converge.OriginComposed,
		CreatedAt: at, UpdatedAt: at.Add(8 * time.Second)}
	odd := *usual
	odd.Name, odd.UID, odd.Phase, odd.Origin = "odd", "7EAB53535805D8E8F7747860B9F57077", "Weird", "elsewhere"
	odd.UpdatedAt, odd.NextAttempt, odd.DeletedAt = at.Add(-time.Hour), time.Date(2300, 1, 1, 0, 0, 0, 5, time.UTC), time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC)
	short := *usual
	short.Name, short.UID = "short", "7eab5353"
	old := *usual // created before the years packed as nanoseconds: updated from the epoch
	old.Name, old.CreatedAt = "old", time.Date(1650, 1, 1, 0, 0, 0, 7, time.UTC)
	if b := packResource(usual, nil); len(b) > 100 {
		t.Errorf("a usual composed row packs into %d bytes, want at most 100", len(b))
	}
	for _, r := range []*converge.Resource{full, &same, empty, neg, &del, usual, &odd, &short, &old} {
		n := &node{id: r.ID(), rs: &refState{ref: r.Ref()}}
		if r.Owner != "" {
			n.owner = owner
		}
		b := packResource(r, nil)
		got := unpackResource(n, string(b))
		sp, st := packedJSON(string(b))
		if string(st) != string(r.Status) || (st == nil) != (r.Status == nil) {
			t.Errorf("%s: packed status %q, want %q", r.ID(), st, r.Status)
		}
		if string(sp) != string(r.Spec) || (sp == nil) != (r.Spec == nil) {
			t.Errorf("%s: packed spec %q, want %q", r.ID(), sp, r.Spec)
		}
		for _, f := range []struct {
			name string
			a, b time.Time
		}{{"NextAttempt", r.NextAttempt, got.NextAttempt}, {"DeletedAt", r.DeletedAt, got.DeletedAt},
			{"CreatedAt", r.CreatedAt, got.CreatedAt}, {"UpdatedAt", r.UpdatedAt, got.UpdatedAt}} {
			_, oa := f.a.Zone()
			_, ob := f.b.Zone()
			if !f.a.Equal(f.b) || oa != ob || f.a.IsZero() != f.b.IsZero() {
				t.Errorf("%s: %s: %v, want %v", r.ID(), f.name, f.b, f.a)
			}
		}
		want := *r
		want.NextAttempt, want.DeletedAt, want.CreatedAt, want.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		got.NextAttempt, got.DeletedAt, got.CreatedAt, got.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", r.ID(), *got, want)
		}
		if (got.Spec == nil) != (r.Spec == nil) || (got.Declared == nil) != (r.Declared == nil) {
			t.Errorf("%s: nil JSON fields changed: spec %v declared %v", r.ID(), got.Spec == nil, got.Declared == nil)
		}
	}
}

// TestPackAtRest checks which rows are packed: a Ready row at its
// generation, a Pending one or one waiting in a teardown with no task
// out is, whether durable, dirty, in a batch, queued or with its reason
// due, and a row with a lease, a drift report, a failed teardown
// attempt, a rollup due, a failure, a new spec not yet run or a subtree
// is not; res
// decodes it back, once, and a packed row's phase is read without
// decoding it.
func TestPackAtRest(t *testing.T) {
	mk := func(change func(n *node)) *node {
		r := &converge.Resource{Kind: "vpc", Name: "a", UID: "u", Phase: converge.PhaseReady, Generation: 1, ObservedGeneration: 1,
			Spec: json.RawMessage(`{}`), Origin: converge.OriginGit}
		n := &node{r: r, id: r.ID(), rs: &refState{ref: r.Ref()}}
		n.set(mStored)
		if change != nil {
			change(n)
		}
		return n
	}
	n := mk(nil)
	n.pack()
	if n.r != nil || n.packed == "" {
		t.Fatal("a settled, durable row was not packed")
	}
	if p := n.peek(); p.Phase != converge.PhaseReady || n.r != nil {
		t.Fatalf("peek: phase %q, decoded kept %v", p.Phase, n.r != nil)
	}
	if n.phase() != converge.PhaseReady || !n.readyAtGeneration() || !settled(n) {
		t.Fatalf("packed Ready row: phase %q, ready at generation %v, settled %v", n.phase(), n.readyAtGeneration(), settled(n))
	}
	r := n.res()
	if r == nil || n.packed != "" || n.res() != r || r.UID != "u" || string(r.Spec) != "{}" {
		t.Fatalf("res did not decode the row once: %+v", r)
	}
	pending := func(n *node) {
		n.r.Phase, n.r.Generation, n.r.ObservedGeneration, n.r.Reason = converge.PhasePending, 2, 1, "waiting"
	}
	for name, change := range map[string]func(n *node){
		"not stored": func(n *node) { n.unset(mStored) },
		"dirty":      func(n *node) { n.set(mDirty) },
		"in a batch": func(n *node) { n.set(mInBatch) },
		"queued":     func(n *node) { n.set(mQueued) },
		"pending":    pending,
		"pending, blocked": func(n *node) {
			pending(n)
			n.state = stateBlocked
		},
		"pending, new": func(n *node) {
			pending(n)
			n.unset(mStored)
			n.set(mDirty | mQueued | mFlowsDirty)
		},
		"tearing down": func(n *node) {
			n.r.Deleting, n.r.Phase, n.r.Reason = true, converge.PhaseDeleting, "deleting: by request"
			n.set(mDirty)
		},
		"tearing down, blocked": func(n *node) {
			n.r.Deleting, n.r.Phase = true, converge.PhaseDeleting
			n.state = stateBlocked
		},
		// Its new reason waits for the next batch, which reads the row
		// again: at 1M one pump step over a wave of a cascade had kept
		// ~190 MB decoded until then.
		"tearing down, reason due": func(n *node) {
			n.r.Deleting, n.r.Phase, n.r.Reason = true, converge.PhaseDeleting, "deleting: its owner is deleted"
			n.set(mReasonDirty)
		},
	} {
		n := mk(change)
		want := *n.r
		n.pack()
		if n.r != nil {
			t.Errorf("%s: not packed", name)
			continue
		}
		pend := want.Phase != converge.PhaseReady
		if got := n.phase(); got != want.Phase || n.readyAtGeneration() == pend || settled(n) == pend || n.deleting() != want.Deleting {
			t.Errorf("%s: packed: phase %q, ready at generation %v, settled %v, deleting %v", name, got, n.readyAtGeneration(), settled(n), n.deleting())
		}
		var into converge.Resource
		n.readInto(&into)
		if got := n.res(); got.Phase != want.Phase || got.Reason != want.Reason || got.Generation != want.Generation ||
			got.Deleting != want.Deleting || into.Reason != want.Reason || into.Generation != want.Generation || into.Deleting != want.Deleting {
			t.Errorf("%s: decoded %+v and read %+v, want %+v", name, got, into, want)
		}
	}
	for name, change := range map[string]func(n *node){
		"leased":   func(n *node) { n.r.Lease = &converge.Lease{TaskID: "t"} },
		"drifted":  func(n *node) { n.r.Drift = &converge.DriftReport{} },
		"deleting": func(n *node) { n.r.Deleting = true },
		"tearing down, failed attempt": func(n *node) {
			n.r.Deleting, n.r.Phase, n.r.Attempts = true, converge.PhaseDeleting, 1
		},
		"tearing down, rollup due": func(n *node) {
			n.r.Deleting, n.r.Phase = true, converge.PhaseDeleting
			n.set(mRollupDirty)
		},
		"tearing down, leased": func(n *node) {
			n.r.Deleting, n.r.Phase, n.r.Lease = true, converge.PhaseDeleting, &converge.Lease{TaskID: "t"}
		},
		"failed":   func(n *node) { n.r.Phase = converge.PhaseFailed },
		"running":  func(n *node) { n.r.Phase = converge.PhaseRunning },
		"new spec": func(n *node) { n.r.Generation = 2 },
		"owner":    func(n *node) { n.sub = &subtree{} },
		"backoff":  func(n *node) { n.state = stateBackoff },
		"pending, backoff": func(n *node) {
			pending(n)
			n.state = stateBackoff
		},
		"ready, flows changed": func(n *node) { n.set(mFlowsDirty) },
	} {
		n := mk(change)
		n.pack()
		if n.r == nil {
			t.Errorf("%s: packed", name)
		}
	}
}

// TestHeadReadsPackedRows: a packed row's head (what a composition is
// checked against) is the decoded row's, read without decoding it,
// whatever precedes its fields: a spec apart from the declared one or
// equal to it, no declared spec, a reason, an unknown phase or origin.
func TestHeadReadsPackedRows(t *testing.T) {
	owner := &node{id: "classicbom/org"}
	rows := []*converge.Resource{
		{UID: "0123456789abcdef0123456789abcdef", KindVersion: 2, Declared: json.RawMessage(`{"cidr":"10.0.0.0/16"}`),
			Spec: json.RawMessage(`{"cidr":"10.0.0.0/16","account_id":"a-1"}`), Status: json.RawMessage(`{"vpc_id":"v-1"}`),
			Phase: converge.PhaseReady, Generation: 3, ObservedGeneration: 3, Origin: converge.OriginComposed,
			ProviderConfigRef: "eu-west", Owner: owner.id},
		{UID: "not-hex", KindVersion: 1, Declared: json.RawMessage(`{}`), Spec: json.RawMessage(`{}`),
			Phase: converge.PhaseDeleting, Reason: "deleting: pruned", Deleting: true, Origin: converge.OriginComposed, Owner: owner.id,
			Attempts: 0, LastError: "", Source: "resources/x.cue"},
		{UID: "u", KindVersion: 1, Phase: "Odd", Origin: "elsewhere", ProviderConfigRef: "p"},
	}
	for i, r := range rows {
		r.Kind, r.Name = "vpc", "t"+strconv.Itoa(i)
		n := &node{id: r.ID(), r: r, rs: &refState{ref: r.Ref()}}
		if r.Owner != "" {
			n.owner = owner
		}
		want := n.head()
		if want.Owner != r.Owner || want.Ref != r.Ref() || string(want.Declared) != string(r.Declared) ||
			want.ProviderConfigRef != r.ProviderConfigRef || want.Deleting != r.Deleting {
			t.Fatalf("row %d: decoded head %+v does not match its row", i, want)
		}
		n.packNow()
		got := n.head()
		if n.r != nil {
			t.Fatalf("row %d: head decoded the packed row", i)
		}
		if got.Owner != want.Owner || got.Ref != want.Ref || string(got.Declared) != string(want.Declared) ||
			(got.Declared == nil) != (want.Declared == nil) || got.ProviderConfigRef != want.ProviderConfigRef || got.Deleting != want.Deleting {
			t.Errorf("row %d: packed head %+v, want %+v", i, got, want)
		}
	}
}

// TestLoadPacksTeardowns: a row loaded at rest is packed as it arrives,
// a waiting teardown too (a cascade resumed after a kill loads up to a
// million of them, and decoded until the load ended they put a 1M
// restart's heap at 923 MB); a teardown backing off stays decoded for
// loadEnd to read its next attempt, and so does one not at rest.
func TestLoadPacksTeardowns(t *testing.T) {
	mk := func(change func(r *converge.Resource)) *node {
		r := &converge.Resource{Kind: "vpc", Name: "a", UID: "u", Phase: converge.PhaseDeleting, Deleting: true,
			Generation: 1, ObservedGeneration: 1, Spec: json.RawMessage(`{}`), Origin: converge.OriginComposed}
		if change != nil {
			change(r)
		}
		return &node{r: r, id: r.ID(), rs: &refState{ref: r.Ref()}}
	}
	if n := mk(nil); !loadPackable(n) {
		t.Error("a waiting teardown is not packed as it loads")
	}
	if n := mk(func(r *converge.Resource) { r.Phase, r.Deleting = converge.PhaseReady, false }); !loadPackable(n) {
		t.Error("a settled row is not packed as it loads")
	}
	for name, change := range map[string]func(r *converge.Resource){
		"backing off": func(r *converge.Resource) { r.NextAttempt = time.Unix(100, 0) },
		"failed once": func(r *converge.Resource) { r.Attempts = 1 },
		"leased":      func(r *converge.Resource) { r.Lease = &converge.Lease{TaskID: "t1", Worker: "w1"} },
	} {
		if loadPackable(mk(change)) {
			t.Errorf("a teardown %s is packed as it loads", name)
		}
	}
}
