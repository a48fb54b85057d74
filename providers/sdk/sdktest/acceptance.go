package sdktest

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/sdk"
)

// Acceptance is one acceptance run of a provider against the real system
// it manages, as Terraform's acceptance tests are: a resource's whole life
// driven through a real control plane and the production SDK, with the
// test's own client looking at the system behind converge's back.
type Acceptance struct {
	// Providers are served by one worker: the kind under test and any
	// other it needs.
	Providers []sdk.Provider
	// Kind and Version select the provider under test.
	Kind    string
	Version int
	// Name is the resource's name; empty gets a unique one.
	Name string
	// Config is the resolved provider config every task carries.
	Config json.RawMessage
	// Create is the spec the resource is created with; Update the spec
	// it is changed to (nil skips the update step).
	Create, Update json.RawMessage
	// OutOfBand changes the real object by other means than converge
	// (an operator's edit); nil skips the drift step. WantDrift are the
	// fields observe must then name (converge.Drift of the spec and the
	// actual object); nil accepts any non-empty drift.
	OutOfBand func(t *testing.T)
	WantDrift []string
	// Fingerprint returns something of the real system that every write
	// changes (a zone's SOA serial, the xmin of a catalog row): a second
	// reconcile of an unchanged spec must leave it as it was. Nil
	// compares statuses only.
	Fingerprint func(t *testing.T) string
	// CheckStatus, if set, inspects each status a reconcile returns.
	CheckStatus func(t *testing.T, status json.RawMessage)
	// Deadline bounds each task (default 30s).
	Deadline time.Duration
}

var acceptanceRuns atomic.Uint64

// RunAcceptance runs a's steps in order, each a subtest, stopping at the
// first that fails:
//
//	create        reconcile the Create spec: OK, with a status
//	read          observe: exists, carries converge's mark, no drift
//	noop          reconcile again: the same status, and the Fingerprint unchanged
//	update        reconcile the Update spec; observe: no drift from it
//	drift         OutOfBand; observe names the drift (WantDrift); reconcile; observe: healed
//	delete        teardown: OK
//	gone          observe: does not exist
//	delete_again  teardown of what is already gone: OK
//
// A provider without Observe (a stub that reads nothing) runs only the
// steps that need no reading: create, noop, update, delete, delete_again.
func RunAcceptance(t *testing.T, a Acceptance) {
	t.Helper()
	var p *sdk.Provider
	for i := range a.Providers {
		if a.Providers[i].Kind == a.Kind && a.Providers[i].Version == a.Version {
			p = &a.Providers[i]
		}
	}
	if p == nil {
		t.Fatalf("acceptance: no provider for %s/v%d", a.Kind, a.Version)
	}
	if p.Reconcile == nil || p.Teardown == nil {
		t.Fatalf("acceptance: %s/v%d needs reconcile and teardown", a.Kind, a.Version)
	}
	n := strconv.FormatUint(acceptanceRuns.Add(1), 10)
	if a.Name == "" {
		a.Name = "acc-" + n
	}
	if a.Deadline == 0 {
		a.Deadline = 30 * time.Second
	}
	reads := p.Observe != nil
	h := Start(t)
	h.Connect(t, "acceptance", 4, a.Providers...)

	r := &accRun{h: h, a: a, uid: "acc-uid-" + n + "-" + a.Name, gen: 1, spec: a.Create}
	steps := []struct {
		name  string
		reads bool
		run   func(t *testing.T)
	}{
		{"create", false, r.create},
		{"read", true, func(t *testing.T) { r.wantNoDrift(t) }},
		{"noop", false, r.noop},
		{"update", false, r.update},
		{"drift", true, r.drift},
		{"delete", false, func(t *testing.T) { r.teardown(t) }},
		{"gone", true, r.gone},
		{"delete_again", false, func(t *testing.T) { r.teardown(t) }},
	}
	for _, s := range steps {
		if s.reads && !reads {
			t.Logf("%s: skipped, %s/v%d has no observe", s.name, a.Kind, a.Version)
			continue
		}
		if !t.Run(s.name, s.run) {
			return
		}
	}
}

// accRun is one resource's life in RunAcceptance.
type accRun struct {
	h            *Harness
	a            Acceptance
	uid          string
	gen          int64
	spec, status json.RawMessage
}

func (r *accRun) task(reaction string) converge.Task {
	return converge.Task{Reaction: reaction, UID: r.uid, Kind: r.a.Kind, KindVersion: r.a.Version, Name: r.a.Name,
		Generation: r.gen, Spec: r.spec, Status: r.status, Config: r.a.Config, Deadline: time.Now().Add(r.a.Deadline)}
}

// reconcile runs a reconcile and records the status it returns.
func (r *accRun) reconcile(t *testing.T) {
	t.Helper()
	res := r.h.Do(t, r.task(converge.ReactionReconcile))
	if res.Outcome != converge.OutcomeOK {
		t.Fatalf("reconcile %s/%s: %s: %s", r.a.Kind, r.a.Name, res.Outcome, res.Message)
	}
	if res.Status != nil {
		r.status = res.Status
	}
	if r.a.CheckStatus != nil {
		r.a.CheckStatus(t, r.status)
	}
}

func (r *accRun) observe(t *testing.T) *converge.Observation {
	t.Helper()
	res := r.h.Do(t, r.task(converge.ReactionObserve))
	if res.Outcome != converge.OutcomeOK {
		t.Fatalf("observe %s/%s: %s: %s", r.a.Kind, r.a.Name, res.Outcome, res.Message)
	}
	if res.Observed == nil {
		t.Fatalf("observe %s/%s: OK without an observation", r.a.Kind, r.a.Name)
	}
	return res.Observed
}

func (r *accRun) wantNoDrift(t *testing.T) {
	t.Helper()
	o := r.observe(t)
	if !o.Exists || !o.Managed {
		t.Fatalf("observe: exists %v, managed %v; want both", o.Exists, o.Managed)
	}
	if d := converge.Drift(r.spec, o.Actual); len(d) > 0 {
		t.Fatalf("observe: drift in %q (spec %s, actual %s)", d, r.spec, o.Actual)
	}
}

func (r *accRun) create(t *testing.T) {
	r.reconcile(t)
	if len(r.status) == 0 {
		t.Fatal("create returned no status")
	}
}

func (r *accRun) noop(t *testing.T) {
	var before string
	if r.a.Fingerprint != nil {
		before = r.a.Fingerprint(t)
	}
	was := r.status
	r.reconcile(t)
	if !jsonEqualRaw(was, r.status) {
		t.Errorf("a second reconcile changed the status\n was %s\n now %s", was, r.status)
	}
	if r.a.Fingerprint != nil {
		if after := r.a.Fingerprint(t); after != before {
			t.Errorf("a second reconcile wrote to the real system: fingerprint %q, then %q", before, after)
		}
	}
}

func (r *accRun) update(t *testing.T) {
	if r.a.Update == nil {
		t.Skip("no Update spec")
	}
	r.gen++
	r.spec = r.a.Update
	r.reconcile(t)
	if p := r.provider(); p.Observe != nil {
		r.wantNoDrift(t)
	}
}

func (r *accRun) drift(t *testing.T) {
	if r.a.OutOfBand == nil {
		t.Skip("no OutOfBand change")
	}
	r.a.OutOfBand(t)
	o := r.observe(t)
	var d []string
	if o.Exists {
		d = converge.Drift(r.spec, o.Actual)
		if len(d) == 0 {
			t.Fatalf("after the out-of-band change observe reports no drift (actual %s)", o.Actual)
		}
	}
	if r.a.WantDrift != nil && !slices.Equal(d, r.a.WantDrift) {
		t.Errorf("drift = %q (exists %v), want %q", d, o.Exists, r.a.WantDrift)
	}
	r.reconcile(t)
	r.wantNoDrift(t)
}

func (r *accRun) teardown(t *testing.T) {
	t.Helper()
	res := r.h.Do(t, r.task(converge.ReactionTeardown))
	if res.Outcome != converge.OutcomeOK {
		t.Fatalf("teardown %s/%s: %s: %s", r.a.Kind, r.a.Name, res.Outcome, res.Message)
	}
}

func (r *accRun) gone(t *testing.T) {
	if o := r.observe(t); o.Exists {
		t.Fatalf("after teardown observe says it exists (actual %s)", o.Actual)
	}
}

func (r *accRun) provider() *sdk.Provider {
	for i := range r.a.Providers {
		if r.a.Providers[i].Kind == r.a.Kind && r.a.Providers[i].Version == r.a.Version {
			return &r.a.Providers[i]
		}
	}
	return nil
}

func jsonEqualRaw(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}
