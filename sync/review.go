package sync

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// Review is a plan as a reviewer reads it (converge plan, the pull
// request's comment): every change with its values, identical changes
// grouped, counts per kind and per BOM row, and the teardown in the order
// it runs. NewReview builds it from a scheduler.Plan (after
// scheduler.Fanout) and the graph it was priced against.
type Review struct {
	Revision string
	// Changes are the plan's Create, Update, Flip, Delete and Prune
	// items, in that order, each with its fields.
	Changes []Change
	// Refused, Unanswered and Definitions are the plan's own.
	Refused, Unanswered []scheduler.PlanItem
	Definitions         []string
	Summary             PlanSummary
	// Teardown is what the deletes and prunes tear down, in the order
	// the engine runs it (TeardownOrder).
	Teardown []TeardownStep
	// Held is why sync would not apply the revision (PruneGuardWeight),
	// Breaking the breaking schema changes against the store.
	Held     string
	Breaking []converge.Finding
	// Override says which guard sync would apply the revision past, and
	// who asked (ReviewInput.OverrideBy), or "".
	Override string
}

// Change is one resource a plan changes.
type Change struct {
	// Action is create, update, flip, delete or prune.
	Action   string
	ID       converge.ID
	From, To converge.KindRef
	// Owner is the composer of a composed or pruned child.
	Owner  converge.ID
	Reason string
	// Row is the row of Owner's spec (a BOM's domain and team,
	// "fd-00/team-002") the child comes from; empty when none matches.
	Row Row
	// Wave is the wave (1-based) of Owner's rollout the change comes
	// in, by its row; 0 when Owner declares no rollout, or composes for
	// the first time.
	Wave int
	// Fields are the changed fields (update, flip), the spec a created
	// resource gets ("+"), or what a deleted one loses ("-").
	Fields     []FieldChange
	KnownAfter []scheduler.KnownAfter
	// TopFields are the plan item's own: the top-level spec fields an
	// update or flip changes, and "provider_config_ref".
	TopFields []string
}

// PlanSummary counts a plan: in all, per kind and per BOM row.
type PlanSummary struct {
	Create int `json:"create"`
	Update int `json:"update"`
	Flip   int `json:"flip"`
	Delete int `json:"delete"`
	Prune  int `json:"prune"`
	// TornDown counts the resources the deletes and prunes remove (their
	// teardown trees), Total those stored now.
	TornDown int         `json:"torn_down"`
	Total    int         `json:"total"`
	ByKind   []KindCount `json:"by_kind"`
	// Rows counts the composed changes per row of their composer's spec
	// they come from; Levels how many rows of each level that is.
	Rows   []RowCount   `json:"by_row"`
	Levels []LevelCount `json:"row_levels"`
	// Waves counts the composed changes per wave of their composer's
	// rollout (converge.Rollout), for composers that declare one and
	// were composed before (a first composition has no waves).
	Waves []WaveCount `json:"by_wave"`
}

// WaveCount is a PlanSummary's count of one wave of a composer's rollout.
type WaveCount struct {
	Owner converge.ID `json:"owner"`
	// Wave is 1-based, of Waves; Name is the wave's.
	Wave  int    `json:"wave"`
	Waves int    `json:"waves"`
	Name  string `json:"name"`
	ChangeCounts
}

// ChangeCounts are a plan's changes of one kind or row.
type ChangeCounts struct {
	Create int `json:"create"`
	Update int `json:"update"`
	Flip   int `json:"flip"`
	Delete int `json:"delete"`
	Prune  int `json:"prune"`
}

func (c *ChangeCounts) add(action string) {
	switch action {
	case "create":
		c.Create++
	case "update":
		c.Update++
	case "flip":
		c.Flip++
	case "delete":
		c.Delete++
	case "prune":
		c.Prune++
	}
}

// String is "3 to create, 1 to update", leaving out what is zero.
func (c ChangeCounts) String() string {
	var parts []string
	for _, p := range []struct {
		n    int
		verb string
	}{{c.Create, "create"}, {c.Update, "update"}, {c.Flip, "flip"}, {c.Delete, "delete"}, {c.Prune, "prune"}} {
		if p.n > 0 {
			parts = append(parts, Thousands(p.n)+" to "+p.verb)
		}
	}
	return strings.Join(parts, ", ")
}

// KindCount is a PlanSummary's count of one kind.
type KindCount struct {
	Kind string `json:"kind"`
	ChangeCounts
}

// RowCount is a PlanSummary's count of one row of a composer's spec.
type RowCount struct {
	Owner converge.ID `json:"owner"`
	// Row names the row by the names along its path: "fd-00/team-002".
	Row string `json:"row"`
	// Level is the list the row is in: "service_teams".
	Level string `json:"level"`
	ChangeCounts
}

// LevelCount is how many rows of one level of a composer's spec a plan
// changes: "2 service_teams".
type LevelCount struct {
	Owner converge.ID `json:"owner"`
	Level string      `json:"level"`
	Rows  int         `json:"rows"`
}

// Totals returns the PlanSummary's counts in all.
func (s PlanSummary) Totals() ChangeCounts {
	return ChangeCounts{s.Create, s.Update, s.Flip, s.Delete, s.Prune}
}

// Summarize counts plan alone (no rows): what sync reports it applied.
func Summarize(plan *scheduler.Plan) PlanSummary {
	var changes []Change
	for _, l := range []struct {
		action string
		items  []scheduler.PlanItem
	}{{"create", plan.Create}, {"update", plan.Update}, {"flip", plan.Flip}, {"delete", plan.Delete}, {"prune", plan.Prune}} {
		for _, it := range l.items {
			changes = append(changes, Change{Action: l.action, ID: it.ID})
		}
	}
	return summarize(changes, nil)
}

func summarize(changes []Change, declared map[converge.ID]*converge.Resource) PlanSummary {
	var s PlanSummary
	type waveKey struct {
		owner converge.ID
		wave  int
	}
	waves := map[waveKey]*WaveCount{}
	kinds := map[string]*ChangeCounts{}
	type rowKey struct {
		owner converge.ID
		row   string
	}
	rows := map[rowKey]*RowCount{}
	type levelKey struct {
		owner converge.ID
		level string
	}
	levelRows := map[levelKey]map[string]bool{}
	var levelOrder []levelKey
	for _, c := range changes {
		t := ChangeCounts{}
		t.add(c.Action)
		s.Create, s.Update, s.Flip, s.Delete, s.Prune = s.Create+t.Create, s.Update+t.Update, s.Flip+t.Flip, s.Delete+t.Delete, s.Prune+t.Prune
		k := c.ID.Kind()
		if kinds[k] == nil {
			kinds[k] = &ChangeCounts{}
		}
		kinds[k].add(c.Action)
		if c.Wave > 0 {
			wk := waveKey{c.Owner, c.Wave}
			if waves[wk] == nil {
				pol := declared[c.Owner].Rollout
				waves[wk] = &WaveCount{Owner: c.Owner, Wave: c.Wave, Waves: pol.Count(), Name: pol.Name(c.Wave - 1)}
			}
			waves[wk].add(c.Action)
		}
		if len(c.Row.Names) == 0 {
			continue
		}
		key := rowKey{c.Owner, c.Row.Label()}
		if rows[key] == nil {
			rows[key] = &RowCount{Owner: c.Owner, Row: c.Row.Label(), Level: c.Row.Levels[len(c.Row.Levels)-1]}
		}
		rows[key].add(c.Action)
		// A team's change touches its domain too: every prefix of the
		// row's path counts at its level.
		for i, level := range c.Row.Levels {
			lk := levelKey{c.Owner, level}
			if levelRows[lk] == nil {
				levelRows[lk] = map[string]bool{}
				levelOrder = append(levelOrder, lk)
			}
			levelRows[lk][strings.Join(c.Row.Names[:i+1], "/")] = true
		}
	}
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	s.ByKind = []KindCount{}
	for _, k := range names {
		s.ByKind = append(s.ByKind, KindCount{Kind: k, ChangeCounts: *kinds[k]})
	}
	s.Rows, s.Levels = []RowCount{}, []LevelCount{}
	for _, r := range rows {
		s.Rows = append(s.Rows, *r)
	}
	sort.Slice(s.Rows, func(i, j int) bool {
		if s.Rows[i].Owner != s.Rows[j].Owner {
			return s.Rows[i].Owner < s.Rows[j].Owner
		}
		return s.Rows[i].Row < s.Rows[j].Row
	})
	for _, lk := range levelOrder {
		s.Levels = append(s.Levels, LevelCount{Owner: lk.owner, Level: lk.level, Rows: len(levelRows[lk])})
	}
	s.Waves = []WaveCount{}
	for _, w := range waves {
		s.Waves = append(s.Waves, *w)
	}
	sort.Slice(s.Waves, func(i, j int) bool {
		if s.Waves[i].Owner != s.Waves[j].Owner {
			return s.Waves[i].Owner < s.Waves[j].Owner
		}
		return s.Waves[i].Wave < s.Waves[j].Wave
	})
	return s
}

// Row is where in its composer's spec a composed child comes from
// (scheduler.Row): "fd-00/team-002".
type Row = scheduler.Row

// ReviewInput is what NewReview reads besides the plan.
type ReviewInput struct {
	Revision string
	Plan     *scheduler.Plan
	// Desired is the revision's desired state: its documents' specs
	// and its kinds (secret paths, finalizers).
	Desired *converge.Desired
	// Graph is what the plan was priced against: the stored state, or
	// the engine's graph.
	Graph scheduler.Graph
	// StoredKinds are the kinds in the store, for resources whose kind
	// the revision no longer declares.
	StoredKinds []*converge.Kind
	// Composed holds the dry runs' children (nil: a composed child's
	// spec is unknown, and it is listed without fields).
	Composed *Composed
	// Settings decide Held (the prune guard and the change limit).
	Settings converge.Settings
	Breaking []converge.Finding
	// OverrideBy names who asks to apply the revision past the change
	// limit (Syncer.ChangeOverride), or "".
	OverrideBy string
}

// NewReview builds the review of in.Plan: it reads in.Graph once for the
// old specs, the teardown order and the guard's weight.
func NewReview(ctx context.Context, in ReviewInput) (*Review, error) {
	p := in.Plan
	rv := &Review{Revision: in.Revision, Refused: p.Refused, Unanswered: p.Unanswered, Definitions: p.Definitions,
		Breaking: in.Breaking}
	kinds := map[converge.KindRef]*converge.Kind{}
	for _, k := range in.StoredKinds {
		kinds[k.Ref()] = k
	}
	for _, k := range in.Desired.Kinds {
		kinds[k.Ref()] = k // what Apply makes them before it deletes
	}
	secret := func(ref converge.KindRef) [][]string {
		if k := kinds[ref]; k != nil {
			return k.SecretPaths().Spec
		}
		return nil
	}
	declared := make(map[converge.ID]*converge.Resource, len(in.Desired.Resources))
	for _, r := range in.Desired.Resources {
		declared[r.ID()] = r
	}
	newSpec := func(id converge.ID) (json.RawMessage, bool) {
		if r := declared[id]; r != nil {
			return r.Declared, true
		}
		if in.Composed != nil {
			if ch, ok := in.Composed.Child(id); ok {
				return ch.Spec, true
			}
		}
		return nil, false
	}
	var w scheduler.Weight
	err := in.Graph.Read(ctx, func(v scheduler.GraphView) {
		rows := map[converge.ID]*scheduler.RowIndex{} // composer → rows of its new and old spec
		rowsOf := func(owner converge.ID) *scheduler.RowIndex {
			if r, ok := rows[owner]; ok {
				return r
			}
			var rs []Row
			if spec, ok := newSpec(owner); ok {
				rs = append(rs, scheduler.SpecRows(spec)...)
			}
			if old := v.Get(owner); old != nil {
				rs = append(rs, scheduler.SpecRows(old.Declared)...)
			}
			rows[owner] = scheduler.NewRowIndex(rs)
			return rows[owner]
		}
		add := func(action string, it scheduler.PlanItem) {
			c := Change{Action: action, ID: it.ID, From: it.From, To: it.To, Reason: it.Reason, KnownAfter: it.KnownAfter,
				TopFields: it.Fields}
			if o, ok := strings.CutPrefix(it.Reason, "composed by "); ok {
				o, _, _ = strings.Cut(o, ",")
				c.Owner = converge.ID(o)
			} else if o, ok := strings.CutPrefix(it.Reason, "pruned by "); ok {
				c.Owner = converge.ID(o)
			}
			old := v.Get(it.ID)
			switch action {
			case "create":
				if spec, ok := newSpec(it.ID); ok {
					c.Fields = SpecFields("+", spec, secret(it.To))
				}
			case "update", "flip":
				if spec, ok := newSpec(it.ID); ok && old != nil {
					ref := it.To
					c.Fields = DiffSpecs(old.Declared, spec, mergeSecret(secret(it.From), secret(ref)))
					if old.ProviderConfigRef != providerRef(declared[it.ID], in.Composed, it.ID) {
						c.Fields = append(c.Fields, FieldChange{Op: "~", Path: "(provider_config_ref)",
							Old: jsonString(old.ProviderConfigRef), New: jsonString(providerRef(declared[it.ID], in.Composed, it.ID))})
					}
				}
			case "delete", "prune":
				if old != nil {
					c.Fields = SpecFields("-", old.Declared, secret(it.From))
				}
			}
			if c.Owner != "" {
				if r, ok := rowsOf(c.Owner).Of(it.ID.Name()); ok {
					c.Row = r
				}
				if o := declared[c.Owner]; o != nil && o.Rollout != nil && composedBefore(v, c.Owner) {
					c.Wave = o.Rollout.WaveOf(c.Row.Label(), string(it.ID)) + 1
				}
			}
			rv.Changes = append(rv.Changes, c)
		}
		for _, l := range []struct {
			action string
			items  []scheduler.PlanItem
		}{{"create", p.Create}, {"update", p.Update}, {"flip", p.Flip}, {"delete", p.Delete}, {"prune", p.Prune}} {
			for _, it := range l.items {
				add(l.action, it)
			}
		}
		rv.Teardown = TeardownOrder(v, append(append([]scheduler.PlanItem(nil), p.Delete...), p.Prune...), kinds)
	})
	if err != nil {
		return nil, fmt.Errorf("read graph: %w", err)
	}
	if w, err = scheduler.Weigh(ctx, in.Graph, p); err != nil {
		return nil, fmt.Errorf("weigh plan: %w", err)
	}
	rv.Summary = summarize(rv.Changes, declared)
	rv.Summary.TornDown, rv.Summary.Total = w.TornDown, w.Total
	rv.Held = PruneGuardWeight(w, p, in.Settings)
	if held := ChangeGuard(w, p, in.Settings); rv.Held == "" && held != "" {
		if in.OverrideBy == "" {
			rv.Held = held
		} else {
			rv.Override = overrideText(in.OverrideBy, Changed(w, p), in.Settings.ChangeLimit)
		}
	}
	return rv, nil
}

// composedBefore reports whether the composer id has children in the
// graph: its next composition is rolled out in waves.
func composedBefore(v scheduler.GraphView, id converge.ID) bool {
	found := false
	v.ChildIDs(id, func(converge.ID) { found = true })
	return found
}

func providerRef(r *converge.Resource, c *Composed, id converge.ID) string {
	if r != nil {
		return r.ProviderConfigRef
	}
	if c != nil {
		if ch, ok := c.Child(id); ok {
			return ch.ProviderConfigRef
		}
	}
	return ""
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string always encodes
	return b
}

func mergeSecret(a, b [][]string) [][]string {
	return append(append([][]string(nil), a...), b...)
}

// Thousands formats n with commas: 1,176.
func Thousands(n int) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}

// AppliedSummary counts what Apply applied as converge plan counts it,
// composed children included: the priced plan (Pass.Priced), or, when
// the engine held nothing before (Pass.Fresh), every resource g holds
// now as created, which is what a plan against the empty store lists
// once the revision has settled. It is the zero PlanSummary for a pass
// that was not applied.
func (p *Pass) AppliedSummary(ctx context.Context, g scheduler.Graph) (PlanSummary, error) {
	if !p.Applied || p.Priced == nil {
		return summarize(nil, nil), nil
	}
	if !p.Fresh {
		return Summarize(p.Priced), nil
	}
	kinds := map[string]int{}
	var total int
	if err := g.Read(ctx, func(v scheduler.GraphView) {
		total = v.Len()
		for _, r := range p.Loaded.Desired.Resources {
			countTree(v, r.ID(), kinds)
		}
	}); err != nil {
		return PlanSummary{}, fmt.Errorf("read graph: %w", err)
	}
	s := summarize(nil, nil)
	for k, n := range kinds {
		s.Create += n
		s.ByKind = append(s.ByKind, KindCount{Kind: k, ChangeCounts: ChangeCounts{Create: n}})
	}
	sort.Slice(s.ByKind, func(i, j int) bool { return s.ByKind[i].Kind < s.ByKind[j].Kind })
	s.Total = total
	return s, nil
}

// countTree counts id and everything it owns, transitively, by kind.
func countTree(v scheduler.GraphView, id converge.ID, kinds map[string]int) {
	stack := []converge.ID{id}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if !v.Has(id) {
			continue
		}
		kinds[id.Kind()]++
		v.ChildIDs(id, func(c converge.ID) { stack = append(stack, c) })
	}
}

// AppliedText is the summary as sync reports it, in plan's words:
// "3 created, 1 updated, 0 flipped, 0 deleted, 3 pruned".
func (s PlanSummary) AppliedText() string {
	return fmt.Sprintf("%d created, %d updated, %d flipped, %d deleted, %d pruned", s.Create, s.Update, s.Flip, s.Delete, s.Prune)
}
