package site

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/statetest"
)

// TestResourcePageShowsDrift: a drifted resource's page says it is
// drifted, which fields differ and that its policy leaves it unhealed;
// no value is shown.
func TestResourcePageShowsDrift(t *testing.T) {
	s := statetest.Open(t)
	kind := &converge.Kind{Name: "pgrole", Version: 1, Reactions: []string{"reconcile", "observe"}, DriftPolicy: "report"}
	r := &converge.Resource{UID: "u1", Kind: "pgrole", KindVersion: 1, Name: "a", Origin: converge.OriginGit,
		Phase: converge.PhaseReady, Generation: 1, ObservedGeneration: 1,
		Spec: json.RawMessage(`{"connection_limit":5}`), Declared: json.RawMessage(`{"connection_limit":5}`),
		Drift: &converge.DriftReport{Fields: []string{"connection_limit"}, Policy: "report", Generation: 1,
			Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}
	if err := s.Commit(context.Background(), &converge.Batch{Kinds: []*converge.Kind{kind}, Resources: []*converge.Resource{r}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := NewBuilder(s, dir, Options{Now: fixedNow}).Build(context.Background()); err != nil {
		t.Fatal(err)
	}
	page := readSite(t, dir)[pageOf("pgrole/a")]
	for _, want := range []string{`<span class="drifted">drifted</span>`, "connection_limit differs", "not healed (drift_policy report)"} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("pgrole/a's page lacks %q:\n%s", want, page)
		}
	}
}
