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
					{"PHASE", string(r.Phase)},
					{"REASON", orDash(v.Reason)},
					{"GENERATION", fmt.Sprintf("%d (observed %d)", r.Generation, r.ObservedGeneration)},
					{"ATTEMPTS", strconv.Itoa(r.Attempts)},
					{"OWNER", owner},
					{"SPEC", string(v.Spec)},
					{"STATUS", string(v.Status)},
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

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
