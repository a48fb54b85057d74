package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	gitsync "github.com/convergehq/converge/sync"
)

func newPlanCommand(g *globals) *cobra.Command {
	var (
		output   string
		rev      string
		exitCode bool
	)
	c := &cobra.Command{
		Use:   "plan",
		Short: "Show what syncing a revision would create, update, flip and delete, changing nothing",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			return runPlan(c.Context(), c.OutOrStdout(), c.ErrOrStderr(), g, rev, output, exitCode)
		},
	}
	f := c.Flags()
	f.StringVar(&rev, "rev", "", "revision to plan (default: the head of the followed branch)")
	f.BoolVar(&exitCode, "exit-code", false, "exit 1 when the plan has changes")
	addOutputFlag(c, &output, "table")
	return c
}

type planView struct {
	Revision    string               `json:"revision"`
	Create      []scheduler.PlanItem `json:"create"`
	Update      []scheduler.PlanItem `json:"update"`
	Flip        []scheduler.PlanItem `json:"flip"`
	Delete      []scheduler.PlanItem `json:"delete"`
	Refused     []scheduler.PlanItem `json:"refused"`
	Definitions []string             `json:"definitions"`
	// TornDown counts the resources the deletes remove (their teardown
	// trees), Total the resources stored now.
	TornDown int                `json:"torn_down"`
	Total    int                `json:"total"`
	Held     string             `json:"held,omitempty"`
	Breaking []converge.Finding `json:"breaking,omitempty"`
}

func runPlan(ctx context.Context, out, errOut io.Writer, g *globals, rev, output string, exitCode bool) error {
	if err := resolveSource(g); err != nil {
		return err
	}
	dir, err := stateDir(g)
	if err != nil {
		return err
	}
	src, err := openSource(ctx, g, dir)
	if err != nil {
		return err
	}
	var r converge.Revision
	if rev == "" {
		r, err = src.Head()
	} else {
		r, err = src.Revision(rev)
	}
	if err != nil {
		return err
	}
	syncer := &gitsync.Syncer{Source: src, Path: g.path}
	pass, err := syncer.Check(r)
	if err != nil {
		return err
	}
	if !pass.Valid() {
		for _, f := range pass.Record.Errors {
			fmt.Fprintln(errOut, f)
		}
		return failed("revision %s is invalid (%d errors)", r, len(pass.Record.Errors))
	}
	snap, err := loadSnapshot(dir)
	if err != nil {
		return err
	}
	d := pass.Loaded.Desired
	d.Revision = r
	p := scheduler.Diff(snap, &d)
	v := planView{Revision: r.String(), Create: p.Create, Update: p.Update, Flip: p.Flip, Delete: p.Delete,
		Refused: p.Refused, Definitions: p.Definitions, TornDown: gitsync.Teardown(snap, p), Total: len(snap.Resources),
		Held: gitsync.PruneGuard(snap, p, d.Settings)}
	if lint := lintFunc(); lint != nil {
		v.Breaking = lint(snap.Kinds, d.Kinds, nil, pass.Tree)
	}
	if output != "table" {
		if err := writeData(out, output, v); err != nil {
			return err
		}
	} else {
		printPlan(out, v)
	}
	if exitCode && !p.Empty() {
		return failed("plan has changes")
	}
	return nil
}

func printPlan(w io.Writer, v planView) {
	fmt.Fprintf(w, "plan for %s:\n", v.Revision)
	for _, it := range v.Create {
		fmt.Fprintf(w, "  create  %s (%s)\n", it.ID, it.To)
	}
	for _, it := range v.Update {
		fmt.Fprintf(w, "  update  %s: %v\n", it.ID, it.Fields)
	}
	for _, it := range v.Flip {
		fmt.Fprintf(w, "  flip    %s %s → %s\n", it.ID, it.From, it.To)
	}
	for _, it := range v.Delete {
		fmt.Fprintf(w, "  delete  %s (%s)\n", it.ID, it.From)
	}
	for _, it := range v.Refused {
		fmt.Fprintf(w, "  refused %s: %s\n", it.ID, it.Reason)
	}
	for _, d := range v.Definitions {
		fmt.Fprintf(w, "  %s\n", d)
	}
	for _, f := range v.Breaking {
		fmt.Fprintf(w, "  breaking %s\n", f)
	}
	fmt.Fprintf(w, "%d to create, %d to update, %d to flip, %d to delete (tearing down %d of %d resources)\n",
		len(v.Create), len(v.Update), len(v.Flip), len(v.Delete), v.TornDown, v.Total)
	if v.Held != "" {
		fmt.Fprintln(w, v.Held)
	}
}

// loadSnapshot reads the whole stored state: from the store, or from the
// admin API of the converge holding it. An absent store is empty.
func loadSnapshot(dir string) (*converge.Snapshot, error) {
	if ok, _ := exists(filepath.Join(dir, "state.db")); !ok {
		return &converge.Snapshot{}, nil
	}
	st, err := state.Open(dir, state.Options{LockTimeout: 200 * time.Millisecond})
	if errors.Is(err, state.ErrLocked) {
		c, cerr := dialAdmin(dir)
		if cerr != nil {
			return nil, fmt.Errorf("open state: %w (a running converge holds it)", err)
		}
		return c.Snapshot()
	}
	if err != nil {
		return nil, fmt.Errorf("open state: %w", err)
	}
	defer st.Close()
	return st.Load()
}

// lintFunc returns the breaking-change linter sync and plan use.
func lintFunc() gitsync.LintFunc { return cue.LintTrees }
