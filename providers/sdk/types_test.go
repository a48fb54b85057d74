package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/sdk"
)

type vpcSpec struct {
	AccountID string `json:"account_id"`
	CIDR      string `json:"cidr"`
}

type vpcStatus struct {
	VPCID string `json:"vpc_id"`
}

// TestTypedHelpers: Reconciler decodes the spec into a struct and
// returns the handler's struct as the status; a spec that does not
// decode is permanent; Flow and NewChild build what a composer emits.
func TestTypedHelpers(t *testing.T) {
	rec := sdk.Reconciler(func(_ context.Context, r *sdk.Request, s vpcSpec) (vpcStatus, error) {
		return vpcStatus{VPCID: "vpc-" + s.AccountID}, nil
	})
	st, err := rec(context.Background(), &sdk.Request{Kind: "vpc", Name: "a", Spec: json.RawMessage(`{"account_id":"123","cidr":"x"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.(vpcStatus).VPCID; got != "vpc-123" {
		t.Errorf("status %v", st)
	}
	_, err = rec(context.Background(), &sdk.Request{Kind: "vpc", Name: "a", Spec: json.RawMessage(`{"cidr":5}`)})
	if sdk.OutcomeOf(err) != converge.OutcomePermanent {
		t.Errorf("bad spec: err %v, want permanent", err)
	}
	e := sdk.Flow(sdk.NewID("vpc", "a"), sdk.NewID("account", "a"), "account_id", "account_id")
	if e.Consumer != "vpc/a" || len(e.Flows) != 1 || e.Flows[0] != (sdk.ValueFlow{From: "account_id", To: "account_id"}) {
		t.Errorf("Flow = %+v", e)
	}
	c, err := sdk.NewChild("vpc", 1, "a", vpcSpec{CIDR: "10.0.0.0/24"})
	if err != nil || string(c.Spec) != `{"account_id":"","cidr":"10.0.0.0/24"}` {
		t.Errorf("NewChild = %+v, %v", c, err)
	}
	if _, err := sdk.NewChild("vpc", 1, "a", func() {}); !errors.Is(err, err) || sdk.OutcomeOf(err) != converge.OutcomePermanent {
		t.Errorf("NewChild of a func: %v, want permanent", err)
	}
}
