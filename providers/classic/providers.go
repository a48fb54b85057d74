package classic

import (
	"context"

	"github.com/convergehq/converge/providers/sdk"
)

// Providers returns the example's provider set, one sdk.Provider per
// (kind, kind_version): classicbom v1, account v1, vpc v1 and v2, tgw v1,
// route v1 and statussink v1. All of them share one set of chaos knobs.
func Providers(o Options) []sdk.Provider {
	c := newChaos(o)
	s := &sink{stateDir: o.StateDir}
	return []sdk.Provider{
		{Kind: "classicbom", Version: 1, ComposeStream: composeBOM, Parts: bomParts, ComposePart: composeBOMPart, Teardown: c.teardown},
		{Kind: "account", Version: 1, Reconcile: c.reconcile(c.reconcileAccount), Teardown: c.teardown},
		{Kind: "vpc", Version: 1, Reconcile: c.reconcile(c.reconcileVPC(1)), Teardown: c.teardown,
			Verbs: map[string]func(ctx context.Context, r *sdk.Request) (any, error){"enable_flow_logs": enableFlowLogs(1)}},
		{Kind: "vpc", Version: 2, Reconcile: c.reconcile(c.reconcileVPC(2)), Teardown: c.teardown,
			Verbs: map[string]func(ctx context.Context, r *sdk.Request) (any, error){"enable_flow_logs": enableFlowLogs(2)}},
		{Kind: "tgw", Version: 1, Reconcile: c.reconcile(c.reconcileTGW), Teardown: c.teardown},
		{Kind: "route", Version: 1, Reconcile: c.reconcile(c.reconcileRoute), Teardown: c.teardown},
		{Kind: "statussink", Version: 1, React: s.react},
	}
}
