package sdktest_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/convergehq/converge/providers/sdk"
	"github.com/convergehq/converge/providers/sdk/sdktest"
)

// kv is a provider over an in-process map, the smallest "real system" the
// harness can drive: reconcile writes the spec's value, observe reads it,
// teardown deletes it. writes counts the writes (the fingerprint).
type kv struct {
	mu     sync.Mutex // guards m and writes
	m      map[string]string
	writes int
}

type kvSpec struct {
	Value string `json:"value"`
}

func (s *kv) provider() sdk.Provider {
	return sdk.Provider{Kind: "kv", Version: 1,
		Reconcile: sdk.Reconciler(func(_ context.Context, r *sdk.Request, spec kvSpec) (any, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.m[r.Name] != spec.Value {
				s.m[r.Name] = spec.Value
				s.writes++
			}
			return map[string]string{"key": r.Name}, nil
		}),
		Observe: func(_ context.Context, r *sdk.Request) (*sdk.Observation, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			v, ok := s.m[r.Name]
			if !ok {
				return &sdk.Observation{}, nil
			}
			return &sdk.Observation{Exists: true, Managed: true, Actual: kvSpec{Value: v}}, nil
		},
		Teardown: func(_ context.Context, r *sdk.Request) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			delete(s.m, r.Name)
			return nil
		},
	}
}

func TestRunAcceptance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gRPC control plane; skipped with -short")
	}
	s := &kv{m: map[string]string{}}
	sdktest.RunAcceptance(t, sdktest.Acceptance{
		Providers: []sdk.Provider{s.provider()}, Kind: "kv", Version: 1, Name: "k",
		Create: json.RawMessage(`{"value":"a"}`), Update: json.RawMessage(`{"value":"b"}`),
		OutOfBand: func(t *testing.T) {
			s.mu.Lock()
			s.m["k"] = "edited by hand"
			s.mu.Unlock()
		},
		WantDrift: []string{"value"},
		Fingerprint: func(t *testing.T) string {
			s.mu.Lock()
			defer s.mu.Unlock()
			return string(rune('0' + s.writes))
		},
	})
	if _, ok := s.m["k"]; ok {
		t.Error("the key is still there after the run's teardown")
	}
}
