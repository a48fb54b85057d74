package classic

import (
	"encoding/json"
	"testing"

	"github.com/convergehq/converge/providers/sdk/sdktest"
)

// TestAcceptance runs the SDK's acceptance harness over the classic leaves:
// they make up their ids and read nothing (no observe), so only the steps
// that need no reading apply: create, a no-op second reconcile, update,
// delete and a second delete.
func TestAcceptance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gRPC control plane; skipped with -short")
	}
	acct := AccountID("payments-ledger")
	for _, a := range []sdktest.Acceptance{
		{Kind: "account", Version: 1, Create: json.RawMessage(`{"team_name":"payments-ledger"}`),
			Update: json.RawMessage(`{"team_name":"payments-ledger-2"}`)},
		{Kind: "vpc", Version: 2, Create: json.RawMessage(`{"account_id":"` + acct + `","cidr":"10.0.0.0/24","region":"eu-west-1"}`),
			Update: json.RawMessage(`{"account_id":"` + acct + `","cidr":"10.0.0.0/24","region":"us-west-2"}`)},
		{Kind: "tgw", Version: 1, Create: json.RawMessage(`{"name":"payments-tgw"}`), Update: json.RawMessage(`{"name":"payments-tgw-2"}`)},
	} {
		t.Run(a.Kind, func(t *testing.T) {
			a.Providers = Providers(Options{StateDir: t.TempDir()})
			sdktest.RunAcceptance(t, a)
		})
	}
}
