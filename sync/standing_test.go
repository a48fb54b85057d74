package sync

import (
	"encoding/json"
	"testing"

	"github.com/convergehq/converge"
)

func TestAlreadyConverged(t *testing.T) {
	head := converge.Revision{Ref: "main", Hash: "abc"}
	root := func(phase converge.Phase, rollup string) *converge.Resource {
		r := &converge.Resource{Kind: "bom", Name: "r", Phase: phase, Generation: 2, ObservedGeneration: 2, Origin: converge.OriginGit}
		if rollup != "" {
			r.Status = json.RawMessage(`{"rollup":` + rollup + `}`)
		}
		return r
	}
	ready := root(converge.PhaseReady, `{"total":3,"ready":3}`)
	tests := []struct {
		name      string
		applied   *converge.Revision
		roots     []*converge.Resource
		owed      int
		declared  int
		wantTotal int
		wantOK    bool
	}{
		{name: "converged", applied: &head, declared: 2, roots: []*converge.Resource{ready, root(converge.PhaseReady, "")}, wantTotal: 5, wantOK: true},
		{name: "a declared root deleted", applied: &head, declared: 3, roots: []*converge.Resource{ready, root(converge.PhaseReady, "")}},
		{name: "nothing applied", applied: nil, roots: []*converge.Resource{ready}},
		{name: "another revision applied", applied: &converge.Revision{Ref: "main", Hash: "old"}, roots: []*converge.Resource{ready}},
		{name: "a work tree applied", applied: &converge.Revision{Ref: "main", Hash: "abc", Dirty: true}, roots: []*converge.Resource{ready}},
		{name: "a root pending", applied: &head, roots: []*converge.Resource{ready, root(converge.PhasePending, `{"total":3,"ready":2}`)}},
		{name: "a root at an unobserved generation", applied: &head, roots: []*converge.Resource{{Kind: "bom", Name: "x", Phase: converge.PhaseReady, Generation: 3, ObservedGeneration: 2}}},
		{name: "a rollup not ready", applied: &head, roots: []*converge.Resource{root(converge.PhaseReady, `{"total":3,"ready":2}`)}},
		{name: "a delivery owed", applied: &head, roots: []*converge.Resource{ready}, owed: 1},
		{name: "no roots", applied: &head},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			declared := tt.declared
			if declared == 0 {
				declared = len(tt.roots)
			}
			total, ok := AlreadyConverged(tt.applied, head, declared, tt.roots, tt.owed)
			if ok != tt.wantOK || total != tt.wantTotal {
				t.Errorf("AlreadyConverged = %d, %v; want %d, %v", total, ok, tt.wantTotal, tt.wantOK)
			}
		})
	}
}
