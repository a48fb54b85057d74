package view

import (
	"fmt"
	"io"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
	gitsync "github.com/convergehq/converge/sync"
)

// PlanItem is a plan item as plan -o json|yaml prints it: stable
// snake_case keys, kind versions as "kind/vN" (null when not set).
type PlanItem struct {
	ID     converge.ID `json:"id"`
	From   *string     `json:"from"`
	To     *string     `json:"to"`
	Fields []string    `json:"fields"`
	Reason string      `json:"reason,omitempty"`
	// KnownAfter are the spec fields value flows fill once their
	// producers are Ready.
	KnownAfter []scheduler.KnownAfter `json:"known_after_apply"`
	// Changes are the fields with their old and new values (a created
	// resource's spec, a deleted one's), secret ones "(secret)".
	Changes []gitsync.FieldChange `json:"changes"`
	// Owner and Row say which composer, and which row of its spec, a
	// composed child comes from.
	Owner converge.ID `json:"owner,omitempty"`
	Row   string      `json:"row,omitempty"`
}

// Plan is the review as plan -o json|yaml prints it, every list []
// rather than null. Summary is the schema sync -o json reports too.
type Plan struct {
	Revision    string             `json:"revision"`
	Create      []PlanItem         `json:"create"`
	Update      []PlanItem         `json:"update"`
	Flip        []PlanItem         `json:"flip"`
	Delete      []PlanItem         `json:"delete"`
	Refused     []PlanItem         `json:"refused"`
	Prune       []PlanItem         `json:"prune"`
	Unanswered  []PlanItem         `json:"unanswered"`
	Definitions []string           `json:"definitions"`
	TornDown    int                `json:"torn_down"`
	Total       int                `json:"total"`
	Held        string             `json:"held,omitempty"`
	Override    string             `json:"override,omitempty"`
	Breaking    []converge.Finding `json:"breaking"`
	Summary     Summary            `json:"summary"`
	Groups      []PlanGroup        `json:"groups"`
	Teardown    []PlanTeardown     `json:"teardown"`
	Refresh     *Refresh           `json:"refresh,omitempty"`
}

// Summary is a gitsync.PlanSummary with its kind versions as text:
// what plan would change, and what sync applied.
type Summary struct {
	gitsync.PlanSummary
}

// PlanGroup is a group of identical changes as plan -o json lists it.
type PlanGroup struct {
	gitsync.Group
	From *string `json:"from"`
	To   *string `json:"to"`
}

// PlanTeardown is a teardown step as plan -o json lists it.
type PlanTeardown struct {
	gitsync.TeardownStep
	KindVersion string `json:"kind_version"`
}

func refData(r converge.KindRef) *string {
	if r.Kind == "" {
		return nil
	}
	s := r.String()
	return &s
}

func planItemOf(it scheduler.PlanItem) PlanItem {
	fields := it.Fields
	if fields == nil {
		fields = []string{}
	}
	known := it.KnownAfter
	if known == nil {
		known = []scheduler.KnownAfter{}
	}
	return PlanItem{ID: it.ID, From: refData(it.From), To: refData(it.To), Fields: fields, Reason: it.Reason,
		KnownAfter: known, Changes: []gitsync.FieldChange{}}
}

// PlanOf is rv as plan -o json|yaml prints it.
func PlanOf(rv *gitsync.Review) Plan {
	items := func(its []scheduler.PlanItem) []PlanItem {
		out := make([]PlanItem, len(its))
		for i, it := range its {
			out[i] = planItemOf(it)
		}
		return out
	}
	v := Plan{Revision: rv.Revision, Refused: items(rv.Refused), Unanswered: items(rv.Unanswered),
		Definitions: rv.Definitions, TornDown: rv.Summary.TornDown, Total: rv.Summary.Total, Held: rv.Held, Override: rv.Override,
		Breaking: rv.Breaking, Summary: Summary{rv.Summary}, Groups: []PlanGroup{}, Teardown: []PlanTeardown{}}
	lists := map[string]*[]PlanItem{"create": &v.Create, "update": &v.Update, "flip": &v.Flip, "delete": &v.Delete, "prune": &v.Prune}
	for _, l := range lists {
		*l = []PlanItem{}
	}
	for _, c := range rv.Changes {
		it := planItemOf(scheduler.PlanItem{ID: c.ID, From: c.From, To: c.To, Reason: c.Reason, KnownAfter: c.KnownAfter})
		if c.TopFields != nil {
			it.Fields = c.TopFields
		}
		if c.Fields != nil {
			it.Changes = c.Fields
		}
		it.Owner, it.Row = c.Owner, c.Row.Label()
		*lists[c.Action] = append(*lists[c.Action], it)
	}
	for _, g := range rv.Groups(0) {
		v.Groups = append(v.Groups, PlanGroup{Group: g, From: refData(g.From), To: refData(g.To)})
	}
	for _, t := range rv.Teardown {
		v.Teardown = append(v.Teardown, PlanTeardown{TeardownStep: t, KindVersion: t.KindVersion.String()})
	}
	if v.Definitions == nil {
		v.Definitions = []string{}
	}
	if v.Breaking == nil {
		v.Breaking = []converge.Finding{}
	}
	return v
}

// Refresh is what plan --refresh found on the real systems: the
// resources observed, the drifted ones (what the workers read differs
// from the stored spec) and those that could not be observed.
type Refresh struct {
	Observed int                   `json:"observed"`
	Drift    []scheduler.DriftItem `json:"drift"`
	Failed   []scheduler.DriftItem `json:"failed"`
}

// WriteRefresh writes the drift section of plan's table.
func WriteRefresh(w io.Writer, r *Refresh) {
	if r == nil {
		return
	}
	for _, d := range r.Drift {
		what := "a sync heals it (drift_policy heal)"
		if d.Policy == converge.DriftPolicyReport {
			what = "left as found (drift_policy report)"
		}
		fmt.Fprintf(w, "  drift   %s: %s; %s\n", d.ID, d.Summary(), what)
	}
	for _, d := range r.Failed {
		fmt.Fprintf(w, "  unobserved %s: %s\n", d.ID, d.Error)
	}
	fmt.Fprintf(w, "refreshed: %d observed, %d drifted, %d not observed\n", r.Observed, len(r.Drift), len(r.Failed))
}

// RefreshChanges reports whether r found drift a sync would heal.
func RefreshChanges(r *Refresh) bool {
	if r == nil {
		return false
	}
	for _, d := range r.Drift {
		if d.Policy != converge.DriftPolicyReport {
			return true
		}
	}
	return false
}
