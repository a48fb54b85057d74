package sync

import (
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// guardSnapshot: a root owning 4 accounts, each with a vpc that depends on
// it, plus 2 standalone resources: 11 in all.
func guardSnapshot() *converge.Snapshot {
	snap := &converge.Snapshot{}
	add := func(kind, name string, owner converge.ID) {
		snap.Resources = append(snap.Resources, &converge.Resource{Kind: kind, Name: name, Owner: owner})
	}
	add("bom", "root", "")
	for _, n := range []string{"a", "b", "c", "d"} {
		add("account", n, "bom/root")
		add("vpc", n, "bom/root")
		snap.Edges = append(snap.Edges, converge.Edge{Consumer: converge.NewID("vpc", n), Producer: converge.NewID("account", n)})
	}
	add("tgw", "solo", "")
	add("vpc", "uses-solo", "")
	snap.Edges = append(snap.Edges, converge.Edge{Consumer: "vpc/uses-solo", Producer: "tgw/solo"})
	return snap
}

func TestPruneGuard(t *testing.T) {
	del := func(ids ...converge.ID) *scheduler.Plan {
		p := &scheduler.Plan{}
		for _, id := range ids {
			p.Delete = append(p.Delete, scheduler.PlanItem{ID: id})
		}
		return p
	}
	prune := func(ids ...converge.ID) *scheduler.Plan {
		p := &scheduler.Plan{}
		for _, id := range ids {
			p.Prune = append(p.Prune, scheduler.PlanItem{ID: id, Reason: "pruned by bom/root"})
		}
		return p
	}
	plus := func(a, b *scheduler.Plan) *scheduler.Plan {
		a.Prune = append(a.Prune, b.Prune...)
		return a
	}
	unanswered := func(id converge.ID, why string) *scheduler.Plan {
		return &scheduler.Plan{Unanswered: []scheduler.PlanItem{{ID: id, Reason: why}}}
	}
	tests := []struct {
		name         string
		plan         *scheduler.Plan
		settings     converge.Settings
		wantTornDown int
		wantHeld     string // substring; "" means not held
	}{
		{"nothing deleted", del(), converge.Settings{}, 0, ""},
		{"a dependency takes its dependent", del("tgw/solo"), converge.Settings{}, 2, ""},
		{"an owned child and its dependent", del("account/a"), converge.Settings{}, 2, ""},
		{"the root takes its subtree", del("bom/root"), converge.Settings{}, 9, "would delete 9 of 11 resources (82% > prune_limit 50%)"},
		{"the root under a higher limit", del("bom/root"), converge.Settings{PruneLimit: 0.9}, 9, ""},
		{"everything", del("bom/root", "tgw/solo"), converge.Settings{PruneLimit: 1}, 11, "would delete all 11 resources"},
		{"everything, allowed", del("bom/root", "tgw/solo"), converge.Settings{AllowPruneAll: true}, 11, ""},
		{"an absent resource counts nothing", del("vpc/ghost"), converge.Settings{}, 0, ""},
		{"a recompose pruning every team counts", prune("account/a", "vpc/a", "account/b", "vpc/b", "account/c", "vpc/c", "account/d", "vpc/d"),
			converge.Settings{PruneLimit: 0.6}, 8, "would delete 8 of 11 resources (0 removed from git, 8 pruned by recomposing bom/root) (73% > prune_limit 60%)"},
		{"a pruned account takes its vpc", prune("account/a"), converge.Settings{}, 2, ""},
		{"pruned and removed add up", plus(del("tgw/solo"), prune("account/a", "account/b")), converge.Settings{}, 6,
			"would delete 6 of 11 resources (2 removed from git, 4 pruned by recomposing bom/root) (55% > prune_limit 50%)"},
		{"an unanswered dry run holds", unanswered("bom/root", "no worker serves bom/v1 compose"), converge.Settings{}, 0,
			"cannot count what recomposing bom/root would prune: no worker serves bom/v1 compose"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := guardSnapshot()
			if got, want := Teardown(snap, tt.plan), tt.wantTornDown; got != want {
				t.Errorf("Teardown = %d, want %d", got, want)
			}
			held := PruneGuard(snap, tt.plan, tt.settings)
			if tt.wantHeld == "" && held != "" || tt.wantHeld != "" && !strings.Contains(held, tt.wantHeld) {
				t.Errorf("PruneGuard = %q, want %q", held, tt.wantHeld)
			}
		})
	}
}

func TestChangeGuard(t *testing.T) {
	items := func(n int) []scheduler.PlanItem { return make([]scheduler.PlanItem, n) }
	tests := []struct {
		name     string
		plan     *scheduler.Plan
		w        scheduler.Weight
		limit    int
		wantHeld string // substring; "" means not held
	}{
		{"no limit", &scheduler.Plan{Update: items(5000)}, scheduler.Weight{Total: 5000}, 0, ""},
		{"at the limit", &scheduler.Plan{Create: items(2), Update: items(3)}, scheduler.Weight{Total: 10}, 5, ""},
		{"over it", &scheduler.Plan{Create: items(2), Update: items(3), Flip: items(1)}, scheduler.Weight{Total: 10}, 5,
			"would change 6 resources (2 created, 3 updated, 1 flipped, 0 torn down) > change_limit 5"},
		{"teardowns count whole", &scheduler.Plan{Delete: items(1)}, scheduler.Weight{Total: 10, Removed: 4, TornDown: 4}, 3,
			"would change 4 resources (0 created, 0 updated, 0 flipped, 4 torn down)"},
		{"the override is named", &scheduler.Plan{Update: items(1200)}, scheduler.Weight{Total: 2000}, 1000,
			`1,200 resources (0 created, 1200 updated, 0 flipped, 0 torn down) > change_limit 1,000; raise change_limit in converge.cue, or apply it once with the commit trailer "Converge-Override: change-limit"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ChangeGuard(tt.w, tt.plan, converge.Settings{ChangeLimit: tt.limit})
			if (got == "") != (tt.wantHeld == "") || !strings.Contains(got, tt.wantHeld) {
				t.Errorf("ChangeGuard = %q, want %q", got, tt.wantHeld)
			}
			if got != "" && !strings.HasPrefix(got, "held by the change limit: ") {
				t.Errorf("ChangeGuard = %q: a held verdict starts with \"held by\"", got)
			}
		})
	}
}

func TestOverrides(t *testing.T) {
	tests := []struct {
		name, message string
		want          []string
	}{
		{"a trailer", "retire fd-03\n\nbody\n\nConverge-Override: change-limit\n", []string{"change-limit"}},
		{"among others, any case", "s\n\nSigned-off-by: a <a@b>\nconverge-override: Change-Limit, prune-guard\n", []string{"change-limit", "prune-guard"}},
		{"a subject alone has no trailers", "Converge-Override: change-limit", nil},
		{"only the last paragraph", "s\n\nConverge-Override: change-limit\n\nmore text", nil},
		{"CRLF", "s\r\n\r\nConverge-Override: change-limit\r\n", []string{"change-limit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Overrides(tt.message); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("Overrides = %q, want %q", got, tt.want)
			}
		})
	}
}
