package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// getView is get's JSON: the resource, and the flowed spec fields not
// known yet (known_after_apply, omitted when none).
type getView struct {
	resourceView
	KnownAfter []scheduler.KnownAfter `json:"known_after_apply,omitempty"`
	// Suspended is the suspension holding it back (converge suspend).
	Suspended *converge.Suspension `json:"suspended,omitempty"`
}

func newGetCommand(g *globals) *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "get KIND/NAME",
		Short: "Show one resource: phase, reason, spec, status, owner",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return withResource(g, c.ErrOrStderr(), output, args[0], func(rd reader, id converge.ID) error {
				r, err := rd.Resource(id)
				if errors.Is(err, converge.ErrNotFound) {
					return notFound(rd, id)
				}
				if err != nil {
					return err
				}
				x, err := newRedactor(rd)
				if err != nil {
					return err
				}
				consumes, _, err := rd.EdgesOf(id)
				if err != nil {
					return err
				}
				v := x.view(r, x.flowPaths(consumes))
				// Flowed fields not known yet: shown, never stored.
				known := scheduler.KnownAfterApply(r.Spec, consumes)
				if output != "table" {
					return writeData(c.OutOrStdout(), output, getView{resourceView: v, KnownAfter: known, Suspended: heldBy(rd, r)})
				}
				v.Spec = scheduler.ShowKnownAfter(v.Spec, known)
				owner := "-"
				if v.Owner != nil {
					owner = *v.Owner
				}
				rows := [][]string{
					{"RESOURCE", string(id)},
					{"VERSION", "v" + strconv.Itoa(r.KindVersion)},
					{"UID", r.UID},
					{"PHASE", phaseShown(r)},
					{"REASON", orDash(v.Reason)},
					{"GENERATION", fmt.Sprintf("%d (observed %d)", r.Generation, r.ObservedGeneration)},
					{"ATTEMPTS", strconv.Itoa(r.Attempts)},
					{"OWNER", owner},
					{"SPEC", string(v.Spec)},
					{"STATUS", string(v.Status)},
				}
				if d := r.Drift; d != nil {
					rows = append(rows, []string{"DRIFT", driftLine(d)})
				}
				if s := heldBy(rd, r); s != nil {
					rows = append(rows, []string{"SUSPENDED", suspendedText(s)})
				}
				return table(c.OutOrStdout(), rows)
			})
		},
	}
	addOutputFlag(c, &output, "table")
	return c
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
func phaseShown(r *converge.Resource) string {
	if r.Drift != nil {
		return string(r.Phase) + " (drifted)"
	}
	return string(r.Phase)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
