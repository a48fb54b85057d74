package view

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// Get is get's JSON: the resource, and the flowed spec fields not
// known yet (known_after_apply, omitted when none); its ages, what it
// depends on and what depends on it (with the values that flow), and its
// newest events.
type Get struct {
	Resource
	KnownAfter []scheduler.KnownAfter `json:"known_after_apply,omitempty"`
	CreatedAt  *time.Time             `json:"created_at,omitempty"`
	UpdatedAt  *time.Time             `json:"updated_at,omitempty"`
	DependsOn  []Edge                 `json:"depends_on"`
	UsedBy     []Edge                 `json:"used_by"`
	Events     []Event                `json:"events"`
	// Suspended is the suspension holding it back (converge suspend).
	Suspended *converge.Suspension `json:"suspended,omitempty"`
}

// KindTable is get's table of several resources; wide adds the
// generations, attempts, owner and source.
func KindTable(w io.Writer, views []Resource, created []*time.Time, wide bool, now time.Time) error {
	head := []string{"RESOURCE", "VERSION", "PHASE", "AGE", "REASON"}
	if wide {
		head = append(head, "GENERATION", "ATTEMPTS", "OWNER", "SOURCE")
	}
	rows := [][]string{head}
	for i, v := range views {
		a := "-"
		if created[i] != nil {
			a = Age(now.Sub(*created[i]))
		}
		row := []string{v.Kind + "/" + v.Name, "v" + strconv.Itoa(v.KindVersion), string(v.Phase), a, OrDash(Cut(v.Reason, DescribeWidth))}
		if wide {
			owner := "-"
			if v.Owner != nil {
				owner = *v.Owner
			}
			row = append(row, fmt.Sprintf("%d/%d", v.ObservedGeneration, v.Generation), strconv.Itoa(v.Attempts), owner, OrDash(v.Source))
		}
		rows = append(rows, row)
	}
	return Table(w, rows)
}

// OrDash is s, or "-" for an empty s (a table's empty cell).
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// DriftLine renders a drift for a table: what differs, the policy and
// since when.
func DriftLine(d *converge.DriftReport) string {
	s := d.Summary() + " (drift_policy " + d.Policy
	if d.Policy == converge.DriftPolicyReport {
		s += ", not healed"
	} else {
		s += ", healing"
	}
	if !d.Since.IsZero() {
		s += ", since " + d.Since.UTC().Format("2006-01-02T15:04:05Z")
	}
	return s + ")"
}

// PhaseShown is the phase a table shows: "Ready (drifted)" for a
// resource with a drift recorded.
func PhaseShown(phase converge.Phase, d *converge.DriftReport) string {
	if d != nil {
		return string(phase) + " (drifted)"
	}
	return string(phase)
}

// SuspensionText is a suspension as get prints it.
func SuspensionText(s *converge.Suspension) string {
	var b strings.Builder
	if s.Root == "" {
		b.WriteString("everything")
	} else {
		b.WriteString(string(s.Root))
	}
	fmt.Fprintf(&b, " by %s at %s (converge resume", OrDash(s.By), s.At.UTC().Format("2006-01-02T15:04:05Z"))
	if s.Root != "" {
		b.WriteString(" " + string(s.Root))
	}
	b.WriteString(")")
	return b.String()
}

// WriteList is list's table: the applied revision and the pin and
// suspensions (when known) above it, then the resources with their child
// counts (when counted) and ages.
func WriteList(w io.Writer, applied *converge.AppliedSource, ctl *converge.Control, views []Resource, created []time.Time, now time.Time) error {
	if applied != nil && applied.Revision.Hash != "" {
		fmt.Fprintf(w, "applied %s\n", RevisionLine(applied.Revision, now))
	}
	if ctl != nil {
		if ctl.Pin != nil {
			fmt.Fprintln(w, ctl.Pin.String())
		}
		for _, s := range ctl.Suspended {
			fmt.Fprintln(w, s.String())
		}
	}
	rows := [][]string{{"RESOURCE", "VERSION", "PHASE", "CHILDREN", "AGE", "REASON"}}
	for i, v := range views {
		kids := "-"
		if v.Children != nil {
			kids = strconv.Itoa(*v.Children)
		}
		a := "-"
		if t := created[i]; !t.IsZero() {
			a = Age(now.Sub(t))
		}
		rows = append(rows, []string{v.Kind + "/" + v.Name, "v" + strconv.Itoa(v.KindVersion), PhaseShown(v.Phase, v.Drift), kids, a, OrDash(v.Reason)})
	}
	return Table(w, rows)
}
