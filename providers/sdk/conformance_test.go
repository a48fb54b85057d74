package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/sdk"
	"github.com/convergehq/converge/providers/sdk/sdktest"
)

// vpc is a small provider written the way authors write them.
func vpc(version int) sdk.Provider {
	return sdk.Provider{
		Kind: "vpc", Version: version,
		Reconcile: func(ctx context.Context, r *sdk.Request) (any, error) {
			var spec struct {
				CIDR   string `json:"cidr"`
				Region string `json:"region"`
			}
			if err := r.DecodeSpec(&spec); err != nil {
				return nil, err
			}
			if spec.CIDR == "" {
				return nil, sdk.Permanent(errors.New("spec.cidr: required"))
			}
			st := map[string]string{"vpc_id": "vpc-" + r.UID}
			if version == 2 {
				st["region"] = spec.Region
			}
			return st, nil
		},
		Teardown: func(ctx context.Context, r *sdk.Request) error { return nil },
		Verbs: map[string]func(ctx context.Context, r *sdk.Request) (any, error){
			"enable_flow_logs": func(ctx context.Context, r *sdk.Request) (any, error) {
				return map[string]bool{"flow_logs": true}, nil
			},
		},
	}
}

func TestConformance(t *testing.T) {
	sdktest.Run(t, []sdk.Provider{vpc(1), vpc(2)},
		sdktest.Case{
			Name:       "v2 echoes region",
			Task:       converge.Task{Kind: "vpc", KindVersion: 2, Reaction: "reconcile", UID: "u1", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16","region":"eu"}`)},
			WantStatus: json.RawMessage(`{"vpc_id":"vpc-u1","region":"eu"}`),
		},
		sdktest.Case{
			Name:        "missing cidr is permanent",
			Task:        converge.Task{Kind: "vpc", KindVersion: 1, Reaction: "reconcile", Spec: json.RawMessage(`{}`)},
			WantOutcome: converge.OutcomePermanent,
			Check: func(t *testing.T, r *converge.Result) {
				if got, want := r.Message, "spec.cidr: required"; got != want {
					t.Errorf("message = %q, want %q", got, want)
				}
			},
		},
		sdktest.Case{
			Name:        "malformed spec is permanent",
			Task:        converge.Task{Kind: "vpc", KindVersion: 1, Reaction: "reconcile", Spec: json.RawMessage(`{"cidr":1}`)},
			WantOutcome: converge.OutcomePermanent,
		},
	)
}
