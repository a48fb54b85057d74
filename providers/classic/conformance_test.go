package classic

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/sdk/sdktest"
)

// TestConformance runs the SDK's conformance suite over the classic
// providers: a real control plane on a unix socket, the providers served by
// the production SDK client, every case answered the same way twice with
// one idempotency key.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gRPC control plane; skipped with -short")
	}
	bucket := t.TempDir()
	acct := AccountID("payments-ledger")
	vpcV1 := VPCSpec{AccountID: acct, CIDR: "10.0.0.0/24"}
	vpcV2 := VPCSpec{AccountID: acct, CIDR: "10.0.0.0/24", Region: "us-west-2"}
	vpcID := "vpc-" + shortHash(17, "payments-ledger", acct)
	tgwID := "tgw-" + shortHash(17, "payments-tgw")
	raw := func(v any) json.RawMessage { return mustJSON(t, v) }
	task := func(kind string, version int, reaction, name string, spec any) converge.Task {
		return converge.Task{Kind: kind, KindVersion: version, Reaction: reaction, Name: name, Spec: raw(spec)}
	}
	flowLogs := task("vpc", 1, "enable_flow_logs", "payments-ledger", vpcV1)
	flowLogs.Config = json.RawMessage(`{"flow_logs_bucket":"flow-logs-default"}`)
	unflowed := task("route", 1, converge.ReactionReconcile, "payments-ledger", RouteSpec{})
	react := converge.Task{Kind: "statussink", KindVersion: 1, Reaction: converge.ReactionReact, Name: "sink",
		Config: raw(StatusSinkConfig{BucketDir: "."}),
		Subject: &converge.Subject{Resource: "classicbom/classic", UID: "uid-classic", Generation: 3,
			Transition: converge.TransitionSynced, Status: json.RawMessage(`{"rollup":{"total":10,"ready":10}}`)}}

	sdktest.Run(t, Providers(Options{StateDir: bucket}),
		sdktest.Case{Name: "classicbom composes", Task: task("classicbom", 1, converge.ReactionCompose, "org", smallBOM),
			Check: func(t *testing.T, r *converge.Result) {
				if got, want := len(r.Children), 10; got != want {
					t.Errorf("children = %d, want %d", got, want)
				}
				if got, want := len(r.Edges), 8; got != want {
					t.Errorf("edges = %d, want %d", got, want)
				}
			}},
		sdktest.Case{Name: "account", Task: task("account", 1, converge.ReactionReconcile, "payments-ledger", AccountSpec{TeamName: "payments-ledger"}),
			WantStatus: raw(AccountStatus{AccountID: acct})},
		sdktest.Case{Name: "vpc v1", Task: task("vpc", 1, converge.ReactionReconcile, "payments-ledger", vpcV1),
			WantStatus: raw(map[string]string{"vpc_id": vpcID})},
		sdktest.Case{Name: "vpc v2 echoes region", Task: task("vpc", 2, converge.ReactionReconcile, "payments-ledger", vpcV2),
			WantStatus: raw(map[string]string{"vpc_id": vpcID, "region": "us-west-2"})},
		sdktest.Case{Name: "vpc enable_flow_logs", Task: flowLogs,
			WantStatus: json.RawMessage(`{"vpc_id":"` + vpcID + `","flow_logs":{"enabled":true,"bucket":"flow-logs-default"}}`)},
		sdktest.Case{Name: "tgw", Task: task("tgw", 1, converge.ReactionReconcile, "payments-tgw", TGWSpec{Name: "payments-tgw"}),
			WantStatus: raw(TGWStatus{TGWID: tgwID})},
		sdktest.Case{Name: "route", Task: task("route", 1, converge.ReactionReconcile, "payments-ledger", RouteSpec{VPCID: vpcID, TGWID: tgwID}),
			WantStatus: raw(RouteStatus{RouteID: "rtb-" + shortHash(17, vpcID, tgwID)})},
		sdktest.Case{Name: "route refuses a spec without its flowed ids", Task: unflowed, WantOutcome: converge.OutcomePermanent,
			Check: func(t *testing.T, r *converge.Result) {
				if !strings.Contains(r.Message, "vpc_id: empty") {
					t.Errorf("message = %q, want it to say vpc_id: empty", r.Message)
				}
			}},
		sdktest.Case{Name: "statussink uploads once per key", Task: react,
			Check: func(t *testing.T, r *converge.Result) {
				entries, err := os.ReadDir(filepath.Join(bucket, "classicbom", "classic"))
				if err != nil {
					t.Fatal(err)
				}
				if len(entries) != 1 || entries[0].Name() != "3-synced.json" {
					t.Errorf("bucket holds %v, want only 3-synced.json", entries)
				}
			}},
	)
}
