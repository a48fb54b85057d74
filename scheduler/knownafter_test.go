package scheduler_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// accountIDValidator is a PendingValidator whose vpc schema requires an
// account_id of exactly 12 characters (the classic example's rule).
type accountIDValidator struct{ validatorFunc }

func (v accountIDValidator) ValidateSpec(ref converge.KindRef, spec json.RawMessage) error {
	return v.ValidateSpecPending(ref, spec, nil)
}

func (accountIDValidator) ValidateSpecPending(ref converge.KindRef, spec json.RawMessage, pending []string) error {
	var m map[string]any
	if err := json.Unmarshal(spec, &m); err != nil {
		return fmt.Errorf("spec: %v", err)
	}
	if ref.Kind != "vpc" {
		return nil
	}
	id, ok := m["account_id"].(string)
	switch {
	case !ok && len(pending) == 1 && pending[0] == "account_id":
		return nil
	case !ok:
		return errors.New("spec.account_id: field is required but not present")
	case len(id) != 12:
		return fmt.Errorf(`spec.account_id: invalid value %q (out of bound =~"^.{12}$")`, id)
	}
	return nil
}

// TestFlowedFieldKnownAfterApply: a composed vpc leaves out account_id,
// which a value flow fills. It is accepted without the field (no
// placeholder), and the flowed value is checked when the flow writes it:
// a bad one fails the vpc naming the producer, the field and the rule.
func TestFlowedFieldKnownAfterApply(t *testing.T) {
	v := accountIDValidator{validatorFunc: classicValidator}
	acctID := func(name string) string {
		if name == "fd-01-team-002" {
			return "short" // breaks the vpc schema's rule
		}
		return fmt.Sprintf("%012d", len(name))
	}
	store := newMemStore()
	disp := newFakeDisp(func(tk *converge.Task) *converge.Result {
		if tk.Kind == "account" && tk.Reaction == converge.ReactionReconcile {
			return &converge.Result{Outcome: converge.OutcomeOK, Status: mustJSON(map[string]string{"account_id": acctID(tk.Name)})}
		}
		return classicHandler(tk)
	}, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	h.apply(classicDesired(makeBOM(1, 2), "c1"), v)
	waitFor(t, 5*time.Second, "the vpcs settle", func() bool {
		p := h.s.Progress()
		return p.Settled != scheduler.Working
	})
	h.flush()
	bom := store.get("classicbom/org")
	if bom.Phase == converge.PhaseFailed {
		t.Fatalf("composer failed: %s", bom.Reason)
	}
	good := store.get("vpc/fd-01-team-001")
	if good == nil || good.Phase != converge.PhaseReady {
		t.Fatalf("vpc/fd-01-team-001 = %+v, want Ready", good)
	}
	if strings.Contains(string(good.Declared), "account_id") {
		t.Errorf("declared spec %s holds account_id: a composer need not write it", good.Declared)
	}
	if got := statusField(t, good.Spec, "account_id"); got != acctID("fd-01-team-001") {
		t.Errorf("flowed account_id = %v", got)
	}
	bad := store.get("vpc/fd-01-team-002")
	if bad == nil || bad.Phase != converge.PhaseFailed {
		t.Fatalf("vpc/fd-01-team-002 = %+v, want Failed", bad)
	}
	for _, want := range []string{"account/fd-01-team-002", "status.account_id", "spec.account_id", `=~"^.{12}$"`} {
		if !strings.Contains(bad.Reason, want) {
			t.Errorf("reason %q does not name %s", bad.Reason, want)
		}
	}
	for _, tk := range disp.tasks() {
		if tk.Kind == "vpc" && tk.Name == "fd-01-team-002" {
			t.Errorf("the vpc with a bad flowed value was dispatched: %s", tk.Spec)
		}
	}
}

// TestGitDependsOn: resources declared in git with depends_on are gated
// like composed children (the vpc runs once its account is Ready) and
// get their flowed field, which the document left out.
func TestGitDependsOn(t *testing.T) {
	v := accountIDValidator{validatorFunc: classicValidator}
	store := newMemStore()
	disp := newFakeDisp(func(tk *converge.Task) *converge.Result {
		if tk.Kind == "account" && tk.Reaction == converge.ReactionReconcile {
			return &converge.Result{Outcome: converge.OutcomeOK, Status: mustJSON(map[string]string{"account_id": "123456789012"})}
		}
		return classicHandler(tk)
	}, &fakeWorker{name: "w1"})
	h := start(t, store, disp, testConfig())
	d := &converge.Desired{
		Revision: converge.Revision{Ref: "main", Hash: "g1"},
		Kinds:    classicKinds(),
		Resources: []*converge.Resource{
			{Kind: "account", KindVersion: 1, Name: "sample-account", Origin: converge.OriginGit, Declared: mustJSON(map[string]string{"team_name": "t"})},
			{Kind: "vpc", KindVersion: 1, Name: "sample-vpc", Origin: converge.OriginGit, Declared: mustJSON(map[string]string{"cidr": "10.0.0.0/16"})},
		},
		Edges: []converge.Edge{{Consumer: "vpc/sample-vpc", Producer: "account/sample-account",
			Flows: []converge.ValueFlow{{From: "account_id", To: "account_id"}}}},
	}
	plan := h.apply(d, v)
	var known []string
	for _, it := range plan.Create {
		for _, k := range it.KnownAfter {
			known = append(known, string(it.ID)+" "+k.String())
		}
	}
	if got, want := strings.Join(known, "; "), "vpc/sample-vpc spec.account_id (known after apply: account/sample-account status.account_id)"; got != want {
		t.Errorf("plan known after apply %q, want %q", got, want)
	}
	h.waitSettled(scheduler.Converged, 5*time.Second)
	h.flush()
	vpc := store.get("vpc/sample-vpc")
	if got := statusField(t, vpc.Spec, "account_id"); got != "123456789012" {
		t.Errorf("vpc spec account_id = %v, want the account's", got)
	}
	if got, want := strings.Join(reactionsOf(disp.tasks()), "; "), "reconcile account/sample-account; reconcile vpc/sample-vpc"; got != want {
		t.Errorf("dispatched %q, want %q", got, want)
	}
	if store.edgeCount() != 1 {
		t.Errorf("stored edges = %d, want 1", store.edgeCount())
	}

	// Dropping the depends_on drops the edge; the spec loses the flowed
	// field, which the schema then wants.
	d2 := *d
	d2.Revision.Hash = "g2"
	d2.Edges = nil
	h.apply(&d2, v)
	h.waitSettled(scheduler.Stuck, 5*time.Second)
	h.flush()
	if store.edgeCount() != 0 {
		t.Errorf("stored edges = %d after the depends_on went, want 0", store.edgeCount())
	}
	if r := store.get("vpc/sample-vpc"); r.Phase != converge.PhaseFailed || !strings.Contains(r.Reason, "spec.account_id: field is required but not present") {
		t.Errorf("vpc %s %q, want Failed for its missing account_id", r.Phase, r.Reason)
	}
}
