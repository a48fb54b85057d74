package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
)

// getView is get's JSON: the resource, and the flowed spec fields not
// known yet (known_after_apply, omitted when none); its ages, what it
// depends on and what depends on it (with the values that flow), and its
// newest events.
type getView struct {
	resourceView
	KnownAfter []scheduler.KnownAfter `json:"known_after_apply,omitempty"`
	CreatedAt  *time.Time             `json:"created_at,omitempty"`
	UpdatedAt  *time.Time             `json:"updated_at,omitempty"`
	DependsOn  []edgeView             `json:"depends_on"`
	UsedBy     []edgeView             `json:"used_by"`
	Events     []eventView            `json:"events"`
	// Suspended is the suspension holding it back (converge suspend).
	Suspended *converge.Suspension `json:"suspended,omitempty"`
}

func newGetCommand(g *globals) *cobra.Command {
	var output string
	var limit int
	c := &cobra.Command{
		Use:   "get KIND/NAME... | KIND",
		Short: "Describe a resource (phase, ages, spec, status, dependencies, events); several, or all of a kind, as a table",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			if err := checkOutput(output, "table", "wide", "json", "yaml"); err != nil {
				return err
			}
			if len(args) == 1 && !strings.Contains(args[0], "/") {
				return getKind(ctx, g, c, args[0], output, limit)
			}
			ids := make([]converge.ID, len(args))
			for i, a := range args {
				id, err := converge.ParseID(a)
				if err != nil {
					return err
				}
				ids[i] = id
			}
			rd, done, err := openReader(g, c.ErrOrStderr())
			if err != nil {
				return err
			}
			defer done()
			x, err := newRedactor(ctx, rd)
			if err != nil {
				return err
			}
			views := make([]getView, len(ids))
			leases := make([]*converge.Lease, len(ids))
			for i, id := range ids {
				if views[i], leases[i], err = getOne(ctx, rd, x, id); err != nil {
					return err
				}
			}
			now := time.Now()
			switch {
			case len(ids) == 1 && (output == "json" || output == "yaml"):
				return writeData(c.OutOrStdout(), output, views[0])
			case output == "json" || output == "yaml":
				return writeData(c.OutOrStdout(), output, map[string]any{"resources": views})
			case len(ids) == 1:
				width := describeWidth
				if output == "wide" {
					width = 0
				}
				v := views[0]
				v.Spec = scheduler.ShowKnownAfter(v.Spec, v.KnownAfter)
				return describe(c.OutOrStdout(), v, leases[0], now, width)
			}
			rvs := make([]resourceView, len(views))
			ages := make([]*time.Time, len(views))
			for i, v := range views {
				rvs[i], ages[i] = v.resourceView, v.CreatedAt
			}
			return kindTable(c, rvs, ages, output == "wide", now)
		},
	}
	addOutputFlag(c, &output, "table")
	c.Flags().Lookup("output").Usage = "output format: table|wide|json|yaml (wide: get KIND/NAME cuts no value; a table of several has more columns)"
	c.Flags().IntVar(&limit, "limit", 500, "get KIND: at most this many resources, in name order (0: all)")
	return c
}

// getOne reads id with its edges and newest events, its secrets
// redacted; the lease is its worker's claim (for the table only).
func getOne(ctx context.Context, rd reader, x *redactor, id converge.ID) (getView, *converge.Lease, error) {
	r, err := rd.Resource(ctx, id)
	if errors.Is(err, converge.ErrNotFound) {
		return getView{}, nil, notFound(ctx, rd, id)
	}
	if err != nil {
		return getView{}, nil, err
	}
	consumes, producedFor, err := rd.EdgesOf(ctx, id)
	if err != nil {
		return getView{}, nil, err
	}
	evs, err := rd.Events(ctx, id, describeEvents)
	if err != nil {
		return getView{}, nil, err
	}
	v := getView{
		resourceView: x.view(r, x.flowPaths(consumes)),
		// Flowed fields not known yet: shown, never stored.
		KnownAfter: scheduler.KnownAfterApply(r.Spec, consumes),
		DependsOn:  edgeViews(consumes, func(e converge.Edge) converge.ID { return e.Producer }),
		UsedBy:     edgeViews(producedFor, func(e converge.Edge) converge.ID { return e.Consumer }),
		Events:     make([]eventView, len(evs)),
		Suspended:  heldBy(ctx, rd, r),
	}
	if !r.CreatedAt.IsZero() {
		v.CreatedAt = &r.CreatedAt
	}
	if !r.UpdatedAt.IsZero() {
		v.UpdatedAt = &r.UpdatedAt
	}
	for i, e := range evs {
		v.Events[i] = eventView{e.Time, e.Resource, e.Type, e.Message}
	}
	return v, r.Lease, nil
}

// getKind prints the resources of kind, in name order, at most limit.
func getKind(ctx context.Context, g *globals, c *cobra.Command, kind, output string, limit int) error {
	rd, done, err := openReader(g, c.ErrOrStderr())
	if err != nil {
		return err
	}
	defer done()
	if err := checkKind(ctx, rd, kind); err != nil {
		return err
	}
	table := output == "table" || output == "wide"
	f := state.Filter{Kind: kind, Head: table}
	if limit > 0 {
		f.Limit = limit + 1 // one more: are there more?
	}
	rs, err := rd.Resources(ctx, f)
	if err != nil {
		return err
	}
	more := limit > 0 && len(rs) > limit
	if more {
		rs = rs[:limit]
	}
	x, err := newRedactor(ctx, rd)
	if err != nil {
		return err
	}
	views := make([]resourceView, len(rs))
	ages := make([]*time.Time, len(rs))
	for i, r := range rs {
		views[i] = x.view(r, nil)
		if !table && x.flowsMatter(r) {
			if views[i], err = x.viewWithEdges(ctx, rd, r); err != nil {
				return err
			}
		}
		if !r.CreatedAt.IsZero() {
			ages[i] = &r.CreatedAt
		}
	}
	if more {
		fmt.Fprintf(c.ErrOrStderr(), "note: the first %d %s resources; --limit 0 shows all\n", limit, kind)
	}
	if !table {
		return writeData(c.OutOrStdout(), output, map[string]any{"resources": views})
	}
	return kindTable(c, views, ages, output == "wide", time.Now())
}

// kindTable is get's table of several resources; wide adds the
// generations, attempts, owner and source.
func kindTable(c *cobra.Command, views []resourceView, created []*time.Time, wide bool, now time.Time) error {
	head := []string{"RESOURCE", "VERSION", "PHASE", "AGE", "REASON"}
	if wide {
		head = append(head, "GENERATION", "ATTEMPTS", "OWNER", "SOURCE")
	}
	rows := [][]string{head}
	for i, v := range views {
		a := "-"
		if created[i] != nil {
			a = age(now.Sub(*created[i]))
		}
		row := []string{v.Kind + "/" + v.Name, "v" + strconv.Itoa(v.KindVersion), string(v.Phase), a, orDash(cut(v.Reason, describeWidth))}
		if wide {
			owner := "-"
			if v.Owner != nil {
				owner = *v.Owner
			}
			row = append(row, fmt.Sprintf("%d/%d", v.ObservedGeneration, v.Generation), strconv.Itoa(v.Attempts), owner, orDash(v.Source))
		}
		rows = append(rows, row)
	}
	return table(c.OutOrStdout(), rows)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// driftLine renders a drift for a table: what differs, the policy and
// since when.
func driftLine(d *converge.DriftReport) string {
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

// phaseShown is the phase a table shows: "Ready (drifted)" for a
// resource with a drift recorded.
func phaseShown(phase converge.Phase, d *converge.DriftReport) string {
	if d != nil {
		return string(phase) + " (drifted)"
	}
	return string(phase)
}
