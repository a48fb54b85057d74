package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/stateapi"
	gitsync "github.com/convergehq/converge/sync"
)

func newPlanCommand(g *globals) *cobra.Command {
	var (
		output   string
		rev      string
		exitCode bool
		refresh  bool
	)
	c := &cobra.Command{
		Use:   "plan",
		Short: "Show what syncing a revision would create, update, flip, delete and prune, changing nothing",
		Long: `plan diffs a revision's documents against the stored state and dry-runs
the compose of every composer the revision creates or changes, listing the
children the recompose would create, update and prune ("composed by" and
"pruned by" the composer). The dry runs go to the workers of the converge
daemon holding the state, or else to the workers a local repository
declares, started for the plan; a remote repository's are never started.
The prune guard is applied to the sum, as sync applies it.

With --refresh, every stored resource whose kind declares the observe
reaction is observed through the same workers, changing nothing, and the
drift found (the fields that differ from git, never their values; an
object gone or without converge's mark) is listed beside the git changes,
with what a sync would do about it (heal, or leave it under drift_policy
report).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			return runPlan(c.Context(), c.OutOrStdout(), c.ErrOrStderr(), g, rev, output, exitCode, refresh)
		},
	}
	f := c.Flags()
	f.StringVar(&rev, "rev", "", "revision to plan (default: the head of the followed branch)")
	f.BoolVar(&exitCode, "exit-code", false, "exit 1 when the plan has changes")
	f.BoolVar(&refresh, "refresh", false, "also observe every stored resource through the workers and show its drift from git (changes nothing)")
	addOutputFlag(c, &output, "table")
	return c
}

type planView struct {
	Revision string               `json:"revision"`
	Create   []scheduler.PlanItem `json:"create"`
	Update   []scheduler.PlanItem `json:"update"`
	Flip     []scheduler.PlanItem `json:"flip"`
	Delete   []scheduler.PlanItem `json:"delete"`
	Refused  []scheduler.PlanItem `json:"refused"`
	Prune    []scheduler.PlanItem `json:"prune"`
	// Unanswered lists changed composers whose dry run gave no answer.
	Unanswered  []scheduler.PlanItem `json:"unanswered,omitempty"`
	Definitions []string             `json:"definitions"`
	// TornDown counts the resources the deletes remove (their teardown
	// trees), Total the resources stored now.
	TornDown int                `json:"torn_down"`
	Total    int                `json:"total"`
	Held     string             `json:"held,omitempty"`
	Breaking []converge.Finding `json:"breaking,omitempty"`
	Refresh  *refreshView       `json:"refresh,omitempty"`
}

func runPlan(ctx context.Context, out, errOut io.Writer, g *globals, rev, output string, exitCode, refresh bool) error {
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
		noteUncommitted(errOut, src, g.path, "plan")
		r, err = src.Head()
	} else {
		r, err = src.Revision(rev)
	}
	if err != nil {
		return err
	}
	syncer := &gitsync.Syncer{Source: src, Path: g.path}
	setTimeouts(g, nil, syncer, g.headSettings)
	pass, err := syncer.CheckContext(ctx, r)
	if err != nil {
		return err
	}
	if !pass.Valid() {
		for _, f := range pass.Record.Errors {
			fmt.Fprintln(errOut, f)
		}
		return failed("revision %s is invalid (%d errors)", r, len(pass.Record.Errors))
	}
	snap, admin, err := planSnapshot(g, dir)
	if err != nil {
		return err
	}
	d := pass.Loaded.Desired
	d.Revision = r
	p := scheduler.Diff(snap, &d)
	stored := scheduler.SnapshotGraph(snap)
	if changesComposer(p, &d, false) {
		// A kind that composes in CUE is dry-run here (Fanout asks
		// the Schemas): workers are started only for the others.
		compose, stop := scheduler.ComposeFunc(nil), func() {}
		if changesComposer(p, &d, true) {
			compose, stop, err = planComposer(ctx, admin, src, d.Settings.Workers)
			if err != nil {
				return err
			}
		}
		scheduler.Fanout(ctx, stored, &d, p, pass.Loaded.Schemas, compose)
		stop()
	}
	w, err := scheduler.Weigh(ctx, stored, p)
	if err != nil {
		return err
	}
	v := planView{Revision: r.String(), Create: p.Create, Update: p.Update, Flip: p.Flip, Delete: p.Delete,
		Refused: p.Refused, Prune: p.Prune, Unanswered: p.Unanswered, Definitions: p.Definitions,
		TornDown: w.TornDown, Total: w.Total, Held: gitsync.PruneGuardWeight(w, p, d.Settings)}
	if lint := lintFunc(); lint != nil {
		v.Breaking = lint(snap.Kinds, d.Kinds, nil, pass.Tree)
	}
	if refresh {
		if v.Refresh, err = planRefresh(ctx, admin, src, d.Settings.Workers, snap); err != nil {
			return err
		}
	}
	if output != "table" {
		if err := writeData(out, output, v.data()); err != nil {
			return err
		}
	} else {
		printPlan(out, v)
	}
	if exitCode && (!p.Empty() || refreshChanges(v.Refresh)) {
		return failed("plan has changes")
	}
	return nil
}

func printPlan(w io.Writer, v planView) {
	fmt.Fprintf(w, "plan for %s:\n", v.Revision)
	by := func(it scheduler.PlanItem) string {
		if it.Reason == "" {
			return ""
		}
		return ", " + it.Reason
	}
	known := func(it scheduler.PlanItem) {
		for _, k := range it.KnownAfter {
			fmt.Fprintf(w, "            %s = %s\n", k.Field, k.Placeholder())
		}
	}
	for _, it := range v.Create {
		fmt.Fprintf(w, "  create  %s (%s%s)\n", it.ID, it.To, by(it))
		known(it)
	}
	for _, it := range v.Update {
		fmt.Fprintf(w, "  update  %s: %v%s\n", it.ID, it.Fields, by(it))
		known(it)
	}
	for _, it := range v.Flip {
		fmt.Fprintf(w, "  flip    %s %s → %s%s\n", it.ID, it.From, it.To, by(it))
	}
	for _, it := range v.Delete {
		fmt.Fprintf(w, "  delete  %s (%s)\n", it.ID, it.From)
	}
	for _, it := range v.Prune {
		fmt.Fprintf(w, "  prune   %s (%s%s)\n", it.ID, it.From, by(it))
	}
	for _, it := range v.Refused {
		fmt.Fprintf(w, "  refused %s: %s\n", it.ID, it.Reason)
	}
	for _, it := range v.Unanswered {
		fmt.Fprintf(w, "  unknown %s: %s\n", it.ID, it.Reason)
	}
	for _, d := range v.Definitions {
		fmt.Fprintf(w, "  %s\n", d)
	}
	for _, f := range v.Breaking {
		fmt.Fprintf(w, "  breaking %s\n", f)
	}
	printRefresh(w, v.Refresh)
	fmt.Fprintf(w, "%d to create, %d to update, %d to flip, %d to delete, %d to prune (tearing down %d of %d resources)\n",
		len(v.Create), len(v.Update), len(v.Flip), len(v.Delete), len(v.Prune), v.TornDown, v.Total)
	if v.Held != "" {
		fmt.Fprintln(w, v.Held)
	}
}

// loadSnapshot reads the whole stored state: from the store, or from the
// admin API of the converge holding it. An absent store is empty.
func loadSnapshot(dir string) (*converge.Snapshot, error) {
	if ok, err := stateFileExists(dir); err != nil || !ok {
		return &converge.Snapshot{}, err
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
		return nil, openStateErr(err)
	}
	defer st.Close() // read only: a failed close loses nothing
	return st.Load()
}

// lintFunc returns the breaking-change linter sync and plan use.
func lintFunc() gitsync.LintFunc { return cue.LintTrees }

// planSnapshot reads the whole stored state like loadSnapshot, and
// returns the admin API client when a running converge holds the state.
func planSnapshot(g *globals, dir string) (*converge.Snapshot, *stateapi.Client, error) {
	if g.etcd != nil {
		// etcd serves readers beside the writer: no daemon to ask.
		st, err := openEtcd(g.etcd, true, 0)
		if err != nil {
			return nil, nil, openStateErr(err)
		}
		defer st.Close() // read only: a failed close loses nothing
		snap, err := st.Load()
		return snap, nil, err
	}
	if ok, _ := stateFileExists(dir); ok {
		if c, err := dialAdmin(dir); err == nil {
			snap, err := c.Snapshot()
			return snap, c, err
		}
	}
	snap, err := loadSnapshot(dir)
	return snap, nil, err
}

// changesComposer reports whether p creates, updates or flips a resource
// whose kind (in d) composes; with worker, one whose compose a worker
// runs (not CUE).
func changesComposer(p *scheduler.Plan, d *converge.Desired, worker bool) bool {
	composes := map[converge.KindRef]bool{}
	for _, k := range d.Kinds {
		composes[k.Ref()] = k.Has(converge.ReactionCompose) && (!worker || k.Compose == "")
	}
	for _, l := range [][]scheduler.PlanItem{p.Create, p.Update, p.Flip} {
		for _, it := range l {
			if composes[it.To] {
				return true
			}
		}
	}
	return false
}

// planComposer returns where plan's dry-run composes go: the workers of
// the daemon holding the state, or else those a local repository
// declares, started until stop. A remote repository's are never started.
func planComposer(ctx context.Context, admin *stateapi.Client, src *gitsync.Source, workers []converge.WorkerSpec) (scheduler.ComposeFunc, func(), error) {
	if admin != nil {
		return admin.DryCompose, func() {}, nil
	}
	if src.Remote() || len(workers) == 0 {
		why := "the repository declares no workers"
		if src.Remote() {
			why = "plan starts no worker for a remote repository"
		}
		return func(context.Context, *converge.Task) (*converge.Result, error) {
			return nil, fmt.Errorf("no worker: %s", why)
		}, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", "converge-plan-")
	if err != nil {
		return nil, nil, fmt.Errorf("create plan directory: %w", err)
	}
	var b [16]byte
	rand.Read(b[:]) // crypto/rand never fails (it crashes the program instead)
	token := hex.EncodeToString(b[:])
	srv := providers.NewServer(providers.ServerOptions{Token: token})
	sock := filepath.Join(tmp, "worker.sock")
	l, err := providers.ListenUnix(sock)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, nil, fmt.Errorf("listen for workers: %w", err)
	}
	// Serve returns when stop closes srv; a worker service that failed
	// before shows as dry runs with no answer, which hold the revision.
	go srv.Serve(l)
	self, err := os.Executable()
	if err != nil {
		srv.Close()
		os.RemoveAll(tmp)
		return nil, nil, fmt.Errorf("locate converge binary: %w", err)
	}
	sup, err := providers.StartWorkers(ctx, workers, providers.SupervisorOptions{
		Addr: "unix://" + sock, Token: token, Dir: src.Root(), Self: self, Stdout: io.Discard, Stderr: io.Discard,
		BuiltinEnv: builtinWorkerEnv,
	})
	if err != nil {
		srv.Close()
		os.RemoveAll(tmp)
		return nil, nil, fmt.Errorf("start workers: %w", err)
	}
	stop := func() {
		sup.Stop()
		srv.Close()
		os.RemoveAll(tmp)
	}
	return scheduler.DryRunner(srv), stop, nil
}

// planItemData is a plan item as plan -o json|yaml prints it: stable
// snake_case keys, kind versions as "kind/vN" (null when not set).
type planItemData struct {
	ID     converge.ID `json:"id"`
	From   *string     `json:"from"`
	To     *string     `json:"to"`
	Fields []string    `json:"fields"`
	Reason string      `json:"reason,omitempty"`
	// KnownAfter are the spec fields value flows fill once their
	// producers are Ready.
	KnownAfter []scheduler.KnownAfter `json:"known_after_apply"`
}

// planData is planView with every list [] rather than null.
type planData struct {
	Revision    string             `json:"revision"`
	Create      []planItemData     `json:"create"`
	Update      []planItemData     `json:"update"`
	Flip        []planItemData     `json:"flip"`
	Delete      []planItemData     `json:"delete"`
	Refused     []planItemData     `json:"refused"`
	Prune       []planItemData     `json:"prune"`
	Unanswered  []planItemData     `json:"unanswered"`
	Definitions []string           `json:"definitions"`
	TornDown    int                `json:"torn_down"`
	Total       int                `json:"total"`
	Held        string             `json:"held,omitempty"`
	Breaking    []converge.Finding `json:"breaking"`
	Refresh     *refreshView       `json:"refresh,omitempty"`
}

func (v planView) data() planData {
	items := func(its []scheduler.PlanItem) []planItemData {
		out := make([]planItemData, len(its))
		for i, it := range its {
			ref := func(r converge.KindRef) *string {
				if r.Kind == "" {
					return nil
				}
				s := r.String()
				return &s
			}
			fields := it.Fields
			if fields == nil {
				fields = []string{}
			}
			known := it.KnownAfter
			if known == nil {
				known = []scheduler.KnownAfter{}
			}
			out[i] = planItemData{ID: it.ID, From: ref(it.From), To: ref(it.To), Fields: fields, Reason: it.Reason, KnownAfter: known}
		}
		return out
	}
	defs, breaking := v.Definitions, v.Breaking
	if defs == nil {
		defs = []string{}
	}
	if breaking == nil {
		breaking = []converge.Finding{}
	}
	return planData{Revision: v.Revision, Create: items(v.Create), Update: items(v.Update), Flip: items(v.Flip),
		Delete: items(v.Delete), Refused: items(v.Refused), Prune: items(v.Prune), Unanswered: items(v.Unanswered),
		Definitions: defs, TornDown: v.TornDown, Total: v.Total, Held: v.Held, Breaking: breaking, Refresh: v.Refresh}
}
