package sync

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// ErrBaseUnknown is Plan's error when a composer of the base revision
// gave its dry run no answer: the graph the head would be priced against
// is unknown.
var ErrBaseUnknown = errors.New("its graph is unknown")

// PlanOptions say what Plan prices a revision against.
type PlanOptions struct {
	// Stored is the state the revision is priced against: the store's
	// (or the admin API's) snapshot. Ignored with Base.
	Stored *converge.Snapshot
	// Base, when set, is a pull request's base revision (a valid pass):
	// with no store (CI), the revision is priced against the graph
	// Base's documents and its composers' dry runs make on an empty
	// store (BaseSnapshot), and linted field by field against Base's
	// tree.
	Base *Pass
	// Composer returns where the dry-run composes of the composers a
	// worker runs go (a kind that composes in CUE is dry-run in
	// process); called at most when such a composer changes. Nil: such
	// composes get no answer, and their children are unknown.
	Composer func() (scheduler.ComposeFunc, error)
	// Lint is the breaking-change linter (cue.LintTrees); nil skips the
	// breaking-change check.
	Lint LintFunc
	// OverrideBy names who asks to apply the revision past the change
	// limit (Syncer.ChangeOverride), or "".
	OverrideBy string
}

// Plan prices head, a valid pass, as `converge plan` shows it: the plan
// of its desired state against the stored graph (or Base's), every
// changed composer dry-run for the children it would make, the breaking
// schema changes, and the guards sync would hold it by. It returns the
// review, the snapshot it was priced against and the plan.
func Plan(ctx context.Context, head *Pass, o PlanOptions) (*Review, *converge.Snapshot, *scheduler.Plan, error) {
	d := head.Loaded.Desired
	d.Revision = head.Revision
	snap := o.Stored
	if o.Base != nil {
		var err error
		if snap, err = BaseSnapshot(ctx, o.Base, o.Composer); err != nil {
			return nil, nil, nil, err
		}
	}
	if snap == nil {
		snap = &converge.Snapshot{}
	}
	p := scheduler.Diff(snap, &d)
	stored := scheduler.SnapshotGraph(snap)
	composed, err := dryCompose(ctx, stored, &d, p, head, o.Composer)
	if err != nil {
		return nil, nil, nil, err
	}
	in := ReviewInput{Revision: head.Revision.String(), Plan: p, Desired: &d, Graph: stored, StoredKinds: snap.Kinds,
		Composed: composed, Settings: d.Settings, OverrideBy: o.OverrideBy}
	if o.Lint != nil {
		var oldTree fs.FS
		if o.Base != nil {
			oldTree = o.Base.Tree // the range's lint: field-level positions on both sides
		}
		in.Breaking = o.Lint(snap.Kinds, d.Kinds, oldTree, head.Tree)
	}
	rv, err := NewReview(ctx, in)
	if err != nil {
		return nil, nil, nil, err
	}
	return rv, snap, p, nil
}

// BaseSnapshot is the graph of a pull request's base revision when there
// is no store (CI): its documents, and the children its composers' dry
// runs answer against an empty graph (Composed.Snapshot). A composer of
// the base that does not answer is an error: the base's graph is then
// unknown.
func BaseSnapshot(ctx context.Context, base *Pass, composer func() (scheduler.ComposeFunc, error)) (*converge.Snapshot, error) {
	bd := base.Loaded.Desired
	bd.Revision = base.Revision
	empty := &converge.Snapshot{}
	bp := scheduler.Diff(empty, &bd)
	composed, err := dryCompose(ctx, scheduler.SnapshotGraph(empty), &bd, bp, base, composer)
	if err != nil {
		return nil, err
	}
	if len(bp.Unanswered) > 0 {
		return nil, fmt.Errorf("plan: the base revision %s's composers did not answer their dry runs (%s: %s): %w",
			base.Revision, bp.Unanswered[0].ID, bp.Unanswered[0].Reason, ErrBaseUnknown)
	}
	return composed.Snapshot(&bd), nil
}

// dryCompose dry-runs the composers p changes (scheduler.Fanout), in
// CUE in process or through composer's workers, and returns their
// children.
func dryCompose(ctx context.Context, g scheduler.Graph, d *converge.Desired, p *scheduler.Plan, pass *Pass, composer func() (scheduler.ComposeFunc, error)) (*Composed, error) {
	composed := &Composed{}
	if !changesComposer(p, d, false) {
		return composed, nil
	}
	var cf scheduler.ComposeFunc
	if composer != nil && changesComposer(p, d, true) {
		var err error
		if cf, err = composer(); err != nil {
			return nil, err
		}
	}
	scheduler.Fanout(ctx, g, d, p, composed.Validator(pass.Loaded.Schemas), composed.Func(cf))
	return composed, nil
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
