package sync

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/convergehq/converge"
)

// Group is changes alike: of one action, kind version and reason, with
// the same fields changed. Same says whether their values are the same
// too ("1,176 vpc: ~ tags.owner: "a" → "b""); when not, Fields are the
// first one's.
type Group struct {
	Action   string           `json:"action"`
	From, To converge.KindRef `json:"-"`
	Reason   string           `json:"reason,omitempty"`
	Count    int              `json:"count"`
	// IDs are the group's resources, in the plan's order.
	IDs    []converge.ID `json:"ids"`
	Fields []FieldChange `json:"fields"`
	Same   bool          `json:"same"`
	// First is the index in Review.Changes of the group's first change.
	First int `json:"-"`
}

// Groups returns the review's changes grouped: changes with the very same
// field changes (values included) form a group. When that makes more
// than max groups (max > 0), changes with the same fields changed form
// one, whatever their values.
func (rv *Review) Groups(max int) []Group {
	gs := rv.group(true)
	if max > 0 && len(gs) > max {
		gs = rv.group(false)
	}
	return gs
}

func (rv *Review) group(values bool) []Group {
	var out []Group
	at := map[string]int{}
	for i, c := range rv.Changes {
		var key strings.Builder
		fmt.Fprintf(&key, "%s\x00%s\x00%s\x00%s", c.Action, c.From, c.To, c.Reason)
		for _, f := range c.Fields {
			fmt.Fprintf(&key, "\x00%s%s", f.Op, f.Path)
			if values {
				fmt.Fprintf(&key, "\x01%s\x01%s", f.Old, f.New)
			}
		}
		for _, k := range c.KnownAfter {
			fmt.Fprintf(&key, "\x00=%s", k.Field)
		}
		k := key.String()
		if j, ok := at[k]; ok {
			g := &out[j]
			g.Count++
			g.IDs = append(g.IDs, c.ID)
			if g.Same && !sameFields(g.Fields, c.Fields) {
				g.Same = false
			}
			continue
		}
		at[k] = len(out)
		out = append(out, Group{Action: c.Action, From: c.From, To: c.To, Reason: c.Reason, Count: 1,
			IDs: []converge.ID{c.ID}, Fields: c.Fields, Same: true, First: i})
	}
	return out
}

func sameFields(a, b []FieldChange) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Op != b[i].Op || a[i].Path != b[i].Path || string(a[i].Old) != string(b[i].Old) || string(a[i].New) != string(b[i].New) {
			return false
		}
	}
	return true
}

// TextOptions say how much of a review WriteText prints.
type TextOptions struct {
	// MaxDetail is how many groups of changes, and teardown steps, are
	// shown with their fields (0: all). Beyond it a group shows its
	// line alone.
	MaxDetail int
	// Flag is what to say to see everything ("--all").
	Flag string
}

// WriteText prints the review as converge plan does.
func (rv *Review) WriteText(w io.Writer, o TextOptions) {
	fmt.Fprintf(w, "plan for %s:\n", rv.Revision)
	groups := rv.Groups(o.MaxDetail)
	hidden := 0
	for i, g := range groups {
		c := rv.Changes[g.First]
		writeGroupLine(w, g, c)
		if o.MaxDetail > 0 && i >= o.MaxDetail {
			if len(g.Fields) > 0 || len(c.KnownAfter) > 0 {
				hidden++
			}
			continue
		}
		if g.Count > 1 && !g.Same && len(g.Fields) > 0 {
			fmt.Fprintf(w, "            (values differ; %s:)\n", c.ID)
		}
		for _, f := range g.Fields {
			fmt.Fprintf(w, "            %s\n", f)
		}
		for _, k := range c.KnownAfter {
			fmt.Fprintf(w, "            %s = %s\n", k.Field, k.Placeholder())
		}
	}
	if hidden > 0 {
		fmt.Fprintf(w, "  (the fields of %d more groups are not shown: %s shows them)\n", hidden, o.Flag)
	}
	for _, it := range rv.Refused {
		fmt.Fprintf(w, "  refused %s: %s\n", it.ID, it.Reason)
	}
	for _, it := range rv.Unanswered {
		fmt.Fprintf(w, "  unknown %s: %s\n", it.ID, it.Reason)
	}
	for _, d := range rv.Definitions {
		fmt.Fprintf(w, "  %s\n", d)
	}
	for _, f := range rv.Breaking {
		fmt.Fprintf(w, "  breaking %s\n", f)
	}
	rv.writeTeardown(w, o)
	s := rv.Summary
	if len(s.ByKind) > 0 {
		parts := make([]string, len(s.ByKind))
		for i, k := range s.ByKind {
			parts[i] = k.Kind + " " + k.ChangeCounts.String()
		}
		fmt.Fprintf(w, "by kind: %s\n", strings.Join(parts, "; "))
	}
	for _, line := range rv.rowLines(o) {
		fmt.Fprintln(w, line)
	}
	for _, line := range rv.waveLines() {
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "%d to create, %d to update, %d to flip, %d to delete, %d to prune (tearing down %d of %d resources)\n",
		s.Create, s.Update, s.Flip, s.Delete, s.Prune, s.TornDown, s.Total)
	if rv.Held != "" {
		fmt.Fprintln(w, rv.Held)
	}
	if rv.Override != "" {
		fmt.Fprintln(w, "sync would apply it: "+rv.Override)
	}
}

// writeGroupLine prints a group's first line: the resource, or the count
// of the kind and the first few.
func writeGroupLine(w io.Writer, g Group, c Change) {
	by := ""
	if g.Reason != "" {
		by = ", " + g.Reason
	}
	who, list := string(c.ID), ""
	if g.Count > 1 {
		const show = 3
		ids := make([]string, 0, show)
		for _, id := range g.IDs[:min(show, len(g.IDs))] {
			ids = append(ids, string(id))
		}
		more := ""
		if g.Count > show {
			more = fmt.Sprintf(" (+%s more)", Thousands(g.Count-show))
		}
		who = fmt.Sprintf("%s %s", Thousands(g.Count), c.ID.Kind())
		list = ": " + strings.Join(ids, ", ") + more
	}
	switch g.Action {
	case "create":
		fmt.Fprintf(w, "  create  %s (%s%s)%s\n", who, g.To, by, list)
	case "update":
		fmt.Fprintf(w, "  update  %s (%s%s)%s\n", who, g.To, by, list)
	case "flip":
		fmt.Fprintf(w, "  flip    %s %s → %s%s%s\n", who, g.From, g.To, by, list)
	case "delete":
		fmt.Fprintf(w, "  delete  %s (%s%s)%s\n", who, g.From, by, list)
	case "prune":
		fmt.Fprintf(w, "  prune   %s (%s%s)%s\n", who, g.From, by, list)
	}
}

// writeTeardown prints the teardown in the order it runs: each resource,
// or per step the count of each kind when there are more than
// o.MaxDetail.
func (rv *Review) writeTeardown(w io.Writer, o TextOptions) {
	t := rv.Teardown
	if len(t) == 0 {
		return
	}
	noun := "resources"
	if len(t) == 1 {
		noun = "resource"
	}
	fmt.Fprintf(w, "teardown, in the order it runs (%s %s; each goes once those it waits for are gone):\n", Thousands(len(t)), noun)
	what := func(s TeardownStep) string {
		if s.Finalizer != "" {
			return "finalizer " + s.Finalizer
		}
		return "no finalizer: the row is removed"
	}
	if o.MaxDetail <= 0 || len(t) <= o.MaxDetail {
		for _, s := range t {
			wait := ""
			if len(s.After) > 0 {
				const show = 3
				ids := make([]string, 0, show)
				for _, id := range s.After[:min(show, len(s.After))] {
					ids = append(ids, string(id))
				}
				wait = "; after " + strings.Join(ids, ", ")
				if len(s.After) > show {
					wait += fmt.Sprintf(" (+%s more)", Thousands(len(s.After)-show))
				}
			}
			fmt.Fprintf(w, "  %d. %s (%s; %s%s)\n", s.Step, s.ID, what(s), s.Because, wait)
		}
		return
	}
	type key struct {
		step int
		ref  converge.KindRef
		fin  string
	}
	var order []key
	count := map[key]int{}
	first := map[key]converge.ID{}
	for _, s := range t {
		k := key{s.Step, s.KindVersion, s.Finalizer}
		if count[k] == 0 {
			order = append(order, k)
			first[k] = s.ID
		}
		count[k]++
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].step < order[j].step })
	for _, k := range order {
		s := TeardownStep{Finalizer: k.fin}
		if count[k] == 1 {
			fmt.Fprintf(w, "  %d. %s (%s)\n", k.step, first[k], what(s))
			continue
		}
		fmt.Fprintf(w, "  %d. %s %s, e.g. %s (%s)\n", k.step, Thousands(count[k]), k.ref.Kind, first[k], what(s))
	}
	fmt.Fprintf(w, "  (grouped by step and kind: %s lists every resource)\n", o.Flag)
}

// waveLines say how a composer's rollout spreads the changes: "waves of
// classicbom/classic: 1/2 canary 3 to create; 2/2 rest 6 to create".
func (rv *Review) waveLines() []string {
	var out []string
	ws := rv.Summary.Waves
	for i := 0; i < len(ws); {
		owner := ws[i].Owner
		var parts []string
		for ; i < len(ws) && ws[i].Owner == owner; i++ {
			parts = append(parts, fmt.Sprintf("%d/%d %s %s", ws[i].Wave, ws[i].Waves, ws[i].Name, ws[i].ChangeCounts.String()))
		}
		out = append(out, fmt.Sprintf("waves of %s: %s", owner, strings.Join(parts, "; ")))
	}
	return out
}

// rowLines are the per-row counts: one line per composer, rows with the
// same counts at the same level together ("40 service_teams, 3 to create
// each: fd-00/team-0, …"), then how many rows of each level.
func (rv *Review) rowLines(o TextOptions) []string {
	s := rv.Summary
	if len(s.Rows) == 0 {
		return nil
	}
	type bucket struct {
		level, counts string
		rows          []string
	}
	var out []string
	for i := 0; i < len(s.Rows); {
		owner := s.Rows[i].Owner
		var buckets []*bucket
		at := map[[2]string]*bucket{}
		for ; i < len(s.Rows) && s.Rows[i].Owner == owner; i++ {
			r := s.Rows[i]
			k := [2]string{r.Level, r.ChangeCounts.String()}
			if at[k] == nil {
				at[k] = &bucket{level: k[0], counts: k[1]}
				buckets = append(buckets, at[k])
			}
			at[k].rows = append(at[k].rows, r.Row)
		}
		var parts []string
		shown := 0
		for _, b := range buckets {
			if o.MaxDetail > 0 && shown >= o.MaxDetail {
				parts = append(parts, fmt.Sprintf("+%s more (%s lists them)", Thousands(len(buckets)-shown), o.Flag))
				break
			}
			shown++
			if len(b.rows) == 1 {
				parts = append(parts, b.rows[0]+" "+b.counts)
				continue
			}
			const show = 3
			names := strings.Join(b.rows[:min(show, len(b.rows))], ", ")
			if len(b.rows) > show {
				names += fmt.Sprintf(" (+%s more)", Thousands(len(b.rows)-show))
			}
			if o.MaxDetail <= 0 {
				names = strings.Join(b.rows, ", ")
			}
			parts = append(parts, fmt.Sprintf("%s %s, %s each: %s", Thousands(len(b.rows)), b.level, b.counts, names))
		}
		var levels []string
		for _, l := range s.Levels {
			if l.Owner == owner {
				levels = append(levels, Thousands(l.Rows)+" "+l.Level)
			}
		}
		out = append(out, fmt.Sprintf("by row of %s: %s", owner, strings.Join(parts, "; ")),
			fmt.Sprintf("blast radius of %s: %s", owner, strings.Join(levels, ", ")))
	}
	return out
}
