package classic

import (
	"encoding/json"
	"testing"

	"github.com/convergehq/converge/providers/sdk"
)

// find returns the provider for kind/vN from ps, failing the test if it is
// missing.
func find(t *testing.T, ps []sdk.Provider, kind string, version int) sdk.Provider {
	t.Helper()
	for _, p := range ps {
		if p.Kind == kind && p.Version == version {
			return p
		}
	}
	t.Fatalf("no provider for %s/v%d", kind, version)
	return sdk.Provider{}
}

// request builds a task request the way the SDK hands it to a handler.
func request(t *testing.T, kind string, version int, name string, spec any) *sdk.Request {
	t.Helper()
	return &sdk.Request{
		TaskID: "task-1", Key: "uid-" + name + "/1/reconcile", Reaction: "reconcile",
		UID: "uid-" + name, Kind: kind, KindVersion: version, Name: name, Generation: 1,
		Spec: mustJSON(t, spec),
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// roundTrip marshals a handler's status and decodes it into T, as the
// control plane would see it.
func roundTrip[T any](t *testing.T, status any) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(mustJSON(t, status), &v); err != nil {
		t.Fatal(err)
	}
	return v
}
