package cue

import (
	"testing"
	"testing/fstest"

	"github.com/convergehq/converge/proto/rawjson"
)

// TestDeclaredSpecsHoldNoDuplicateKey: a declared spec reaches the
// scheduler through CUE, which refuses a key written twice with two
// values and unifies one written twice with the same value, so what Load
// declares never holds a duplicate key (proto/rawjson's policy; the
// scheduler refuses one only in what workers send). A repository that
// loads today keeps loading.
func TestDeclaredSpecsHoldNoDuplicateKey(t *testing.T) {
	tests := []struct {
		name, file, doc string
		wantFinding     bool
	}{
		{name: "json, same value twice", file: "r.json", doc: `{"type": "resource", "kind": "bucket", "kind_version": 1, "name": "a", "spec": {"tier": "hot", "tier": "hot"}}`},
		{name: "json, two values", file: "r.json", doc: `{"type": "resource", "kind": "bucket", "kind_version": 1, "name": "a", "spec": {"tier": "hot", "tier": "cold"}}`, wantFinding: true},
		{name: "json, escaped twice", file: "r.json", doc: `{"type": "resource", "kind": "bucket", "kind_version": 1, "name": "a", "spec": {"tier": "hot", "\u0074ier": "cold"}}`, wantFinding: true},
		{name: "yaml, same value twice", file: "r.yaml", doc: "type: resource\nkind: bucket\nkind_version: 1\nname: a\nspec:\n  tier: hot\n  tier: hot\n"},
		{name: "yaml, two values", file: "r.yaml", doc: "type: resource\nkind: bucket\nkind_version: 1\nname: a\nspec:\n  tier: hot\n  tier: cold\n", wantFinding: true},
		{name: "cue, same value twice", file: "r.cue", doc: "type: \"resource\"\nkind: \"bucket\"\nkind_version: 1\nname: \"a\"\nspec: {tier: \"hot\", tier: \"hot\"}\n"},
		{name: "cue, two values", file: "r.cue", doc: "type: \"resource\"\nkind: \"bucket\"\nkind_version: 1\nname: \"a\"\nspec: {tier: \"hot\", tier: \"cold\"}\n", wantFinding: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for p, s := range kindsFS {
				fsys[p] = &fstest.MapFile{Data: []byte(s)}
			}
			fsys[tt.file] = &fstest.MapFile{Data: []byte(tt.doc)}
			res, err := Load(fsys, ".", Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(res.Findings) > 0; got != tt.wantFinding {
				t.Errorf("findings %v, want a finding: %v", res.Findings, tt.wantFinding)
			}
			for _, r := range res.Desired.Resources {
				if err := rawjson.Check(r.Declared); err != nil {
					t.Errorf("%s: declared spec %s: %v", r.ID(), r.Declared, err)
				}
			}
			if !tt.wantFinding && len(res.Desired.Resources) == 0 {
				t.Error("no resource declared")
			}
		})
	}
}
