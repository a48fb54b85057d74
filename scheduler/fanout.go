package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/convergehq/converge"
)

// ComposeFunc runs t, a compose task, as a dry run on a worker and returns
// the worker's answer. It sets t's ID and DryRun; nothing of the answer is
// applied. It waits for a worker serving t's KindRef until ctx is done.
type ComposeFunc func(ctx context.Context, t *converge.Task) (*converge.Result, error)

// dryRunTTL bounds a dry-run compose whose kind sets no task_deadline: as
// long as a real compose's lease (Config.ComposeLeaseTTL), since a
// million-child answer takes as long.
const dryRunTTL = 2 * time.Minute

// DryCompose is a ComposeFunc over the running scheduler's workers: the
// answer comes back to the caller only; no state, event or lease changes.
// Until ctx is done it waits for Run to run and for a worker to serve the
// compose.
func (s *Scheduler) DryCompose(ctx context.Context, t *converge.Task) (*converge.Result, error) {
	return s.awaitServed(ctx, fmt.Sprintf("dry-run compose %s/%s", t.Kind, t.Name), func(s *Scheduler) (chan verbOutcome, error) {
		return s.startDry(t)
	})
}

// awaitServed runs start on the loop and waits for the answer on the
// channel it returns. Until ctx is done it starts again, backing off up
// to 250ms, while Run is not running yet or no worker serves the
// reaction (workers, or Run itself, may still be starting); what names
// the wait in its errors.
func (s *Scheduler) awaitServed(ctx context.Context, what string, start func(*Scheduler) (chan verbOutcome, error)) (*converge.Result, error) {
	wait := 20 * time.Millisecond
	for {
		var ch chan verbOutcome
		var err error
		if e := s.exec(ctx, func(s *Scheduler) {
			if s.inline {
				err = ErrNotRunning
				return
			}
			ch, err = start(s)
		}); e != nil {
			return nil, e
		}
		if errors.Is(err, converge.ErrNoWorker) || errors.Is(err, ErrNotRunning) {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("%s: %w", what, err)
			case <-time.After(wait):
			}
			wait = min(2*wait, 250*time.Millisecond)
			continue
		}
		if err != nil {
			return nil, err
		}
		select {
		case o := <-ch:
			return o.res, o.err
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: %w", what, ctx.Err())
		}
	}
}

// startDry dispatches t as a dry-run compose; its result goes to the
// returned channel (verbResult), or a timeout when its lease expires.
func (s *Scheduler) startDry(t *converge.Task) (chan verbOutcome, error) {
	ref := t.Ref()
	if s.localServes(ref, converge.ReactionCompose) {
		return s.dryLocal(t), nil
	}
	if !s.disp.Serves(ref, converge.ReactionCompose) {
		return nil, fmt.Errorf("dry-run compose %s/%s: %w serves %s compose", t.Kind, t.Name, converge.ErrNoWorker, ref)
	}
	dt := *t
	dt.ID, dt.DryRun, dt.Reaction = s.lease.newTaskID(), true, converge.ReactionCompose
	if dt.Deadline.IsZero() {
		dt.Deadline = s.now.Add(s.leaseTTL(ref))
	}
	if err := s.disp.Dispatch(s.ctx, &dt); err != nil {
		return nil, fmt.Errorf("dry-run compose %s/%s: %w", t.Kind, t.Name, err)
	}
	s.lease.dispatched++
	ch := make(chan verbOutcome, 1)
	id := converge.NewID(t.Kind, t.Name)
	s.track(dt.ID, &taskRec{kind: taskVerb, id: id, ref: ref, reaction: converge.ReactionCompose, verb: ch, dry: true})
	s.lease.addTimer(dt.Deadline, timerLease, id, dt.ID)
	return ch, nil
}

// DryRunner is a ComposeFunc over a dispatcher whose results nobody else
// reads (converge plan's own workers): results of other tasks are dropped.
// Calls must not overlap.
func DryRunner(d Dispatcher) ComposeFunc {
	var seq atomic.Uint64
	return func(ctx context.Context, t *converge.Task) (*converge.Result, error) {
		dt := *t
		dt.ID, dt.DryRun, dt.Reaction = "dry-"+strconv.FormatUint(seq.Add(1), 10), true, converge.ReactionCompose
		if dt.Deadline.IsZero() {
			dt.Deadline = time.Now().Add(dryRunTTL)
		}
		for {
			err := d.Dispatch(ctx, &dt)
			if err == nil {
				break
			}
			if !errors.Is(err, converge.ErrNoWorker) {
				return nil, fmt.Errorf("dry-run compose %s/%s: %w", t.Kind, t.Name, err)
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("dry-run compose %s/%s: %w", t.Kind, t.Name, err)
			case <-d.Changed():
			case <-time.After(250 * time.Millisecond):
			}
		}
		for {
			select {
			case r, ok := <-d.Results():
				if !ok {
					return nil, fmt.Errorf("dry-run compose %s/%s: dispatcher closed", t.Kind, t.Name)
				}
				if r.TaskID == dt.ID {
					return r, nil
				}
			case <-ctx.Done():
				return nil, fmt.Errorf("dry-run compose %s/%s: %w", t.Kind, t.Name, ctx.Err())
			}
		}
	}
}

// maxFanoutDepth bounds how deep Fanout follows composers that composers
// create or change.
const maxFanoutDepth = 8

// Fanout completes p (a Diff of g against d) with what recomposing
// changes: every composer p creates, updates or flips, and every composer
// those fan out into, is dry-run through compose (a compose task marked
// DryRun; its answer is checked like a real one and changes nothing). The
// children it would create, update and flip are added to p's Create,
// Update and Flip with Reason "composed by OWNER", those it would prune to
// p.Prune. A compose the engine would refuse (a permanent failure, a child
// that does not validate under v, a name owned by someone else) applies
// nothing and is listed in p.Refused; one that gives no answer, or whose
// answer g could not be read to check, is listed in p.Unanswered.
// Composers whose provider config changed are not dry-run. g is read twice
// per composer (before and after its dry run), never while a dry run is
// under way.
func Fanout(ctx context.Context, g Graph, d *converge.Desired, p *Plan, v Validator, compose ComposeFunc) {
	kinds := make(map[converge.KindRef]*converge.Kind, len(d.Kinds))
	for _, k := range d.Kinds {
		kinds[k.Ref()] = k
	}
	configs := make(map[string]*converge.ProviderConfig, len(d.Configs))
	defaults := make(map[converge.KindRef]*converge.ProviderConfig)
	for _, c := range d.Configs {
		configs[c.Name] = c
		if c.IsDefault {
			defaults[c.Ref()] = c
		}
	}
	composes := func(ref converge.KindRef) bool {
		k := kinds[ref]
		return k != nil && k.Has(converge.ReactionCompose)
	}
	type job struct {
		r     *converge.Resource // the composer as it would be: kind, version, name, declared spec, config ref
		depth int
	}
	var queue []job
	declared := make(map[converge.ID]*converge.Resource, len(d.Resources))
	for _, r := range d.Resources {
		declared[r.ID()] = r
	}
	for _, l := range [][]PlanItem{p.Create, p.Update, p.Flip} {
		for _, it := range l {
			if r := declared[it.ID]; r != nil && composes(r.Ref()) {
				queue = append(queue, job{r: r})
			}
		}
	}
	for len(queue) > 0 {
		j := queue[0]
		queue = queue[1:]
		r, id := j.r, j.r.ID()
		t := &converge.Task{Reaction: converge.ReactionCompose, Kind: r.Kind, KindVersion: r.KindVersion,
			Name: r.Name, Generation: 1, Spec: r.Declared}
		// live: the composer is stored and not being torn down, so what
		// it owns now is what its recompose changes.
		var live bool
		var composedBy string
		var composedSpec json.RawMessage
		if err := g.Read(ctx, func(gv GraphView) {
			if ex := gv.Get(id); ex != nil && !ex.Deleting {
				live = true
				t.UID, t.Generation, t.Status = ex.UID, ex.Generation+1, converge.CloneJSON(ex.Status)
				if ex.ObservedGeneration == ex.Generation && ex.KindVersion == r.KindVersion {
					// Its children are the composition of its spec now:
					// the base of a delta (composeBase).
					composedBy, composedSpec = ex.ComposedBy, ex.Spec
				}
			}
		}); err != nil {
			p.Unanswered = append(p.Unanswered, PlanItem{ID: id, To: r.Ref(), Reason: "read graph: " + err.Error()})
			continue
		}
		t.Key = "dry-run/" + string(id) + "/" + itoa(t.Generation) + "/" + converge.ReactionCompose
		if r.ProviderConfigRef != "" {
			if c := configs[r.ProviderConfigRef]; c != nil {
				t.Config = c.Config
			}
		} else if c := defaults[r.Ref()]; c != nil {
			t.Config = c.Config
		}
		ttl := dryRunTTL
		if k := kinds[r.Ref()]; k != nil && k.TaskDeadline > 0 {
			ttl = k.TaskDeadline
		}
		if k := kinds[r.Ref()]; k != nil {
			t.MaxChildren = k.MaxChildren
		}
		t.Deadline = time.Now().Add(ttl)
		if rev, cfg, ok := strings.Cut(composedBy, " "); ok && rev != "" && cfg == composeContext(t.KindVersion, t.Config) {
			t.BaseSpec, t.BaseRevision = composedSpec, rev
		}
		var res *converge.Result
		var err error
		if lc, ok := v.(LocalComposer); ok && lc.Composes(r.Ref()) {
			res = lc.Compose(t) // a CUE composer: no worker
		} else if compose == nil {
			err = fmt.Errorf("dry-run compose %s: no worker to ask", id)
		} else {
			res, err = compose(ctx, t)
		}
		if err != nil {
			p.Unanswered = append(p.Unanswered, PlanItem{ID: id, To: r.Ref(), Reason: err.Error()})
			continue
		}
		switch res.Outcome {
		case converge.OutcomeOK:
		case converge.OutcomePermanent:
			p.Refused = append(p.Refused, PlanItem{ID: id, To: r.Ref(), Reason: "compose fails, nothing of it is applied: " + res.Message})
			continue
		default:
			p.Unanswered = append(p.Unanswered, PlanItem{ID: id, To: r.Ref(), Reason: "dry-run compose: " + res.Outcome.String() + ": " + res.Message})
			continue
		}
		if res.Delta && t.BaseSpec == nil {
			p.Unanswered = append(p.Unanswered, PlanItem{ID: id, To: r.Ref(), Reason: "dry-run compose: a delta answer to a compose without a base spec"})
			continue
		}
		var next []*converge.Resource // changed children that compose
		if err := g.Read(ctx, func(gv GraphView) {
			var ids []converge.ID
			var seen *childIndex // the emitted children, for a full compose
			var err error
			if res.Delta {
				live := func() int {
					c := 0
					gv.ChildIDs(id, func(cid converge.ID) {
						if h, ok := gv.Head(cid); ok && !h.Deleting {
							c++
						}
					})
					return c
				}
				ids, _, err = checkDelta(id, res, gv.Head, live, func(c converge.ID) []converge.ID {
					var out []converge.ID
					gv.Producers(c, func(p converge.ID) { out = append(out, p) })
					return out
				}, kinds[r.Ref()], v)
			} else {
				ids, seen, err = checkComposition(id, res, gv.Head, kinds[r.Ref()], v)
			}
			if err != nil {
				p.Refused = append(p.Refused, PlanItem{ID: id, To: r.Ref(), Reason: "compose refused, nothing of it is applied: " + err.Error()})
				return
			}
			by := "composed by " + string(id)
			// What the flows fill ("known after apply") is worked out
			// once the children to create are known: a recompose of a
			// million creates a handful, and a map of every consumer's
			// edges had been 130 MB of a 1M recompose's dry run.
			type created struct{ item, child int }
			var creates []created
			for i, cid := range ids {
				c := &res.Children[i]
				// The planned row, made only for a child that changes
				// (most of a recompose's million do not).
				ref := converge.KindRef{Kind: c.Kind, Version: c.KindVersion}
				row := func() *converge.Resource {
					return &converge.Resource{Kind: c.Kind, KindVersion: c.KindVersion, Name: c.Name, Declared: c.Spec,
						ProviderConfigRef: c.ProviderConfigRef, Owner: id, Origin: converge.OriginComposed}
				}
				var old ChildHead
				var exists bool
				if live {
					old, exists = gv.Head(cid) // a new composer owns nothing yet
				}
				changed := true
				switch {
				case !exists:
					creates = append(creates, created{len(p.Create), i})
					p.Create = append(p.Create, PlanItem{ID: cid, To: ref, Reason: by})
				case old.Deleting:
					creates = append(creates, created{len(p.Create), i})
					p.Create = append(p.Create, PlanItem{ID: cid, To: ref, Reason: by + ", once its teardown finishes"})
				case old.Ref.Version != c.KindVersion:
					p.Flip = append(p.Flip, PlanItem{ID: cid, From: old.Ref, To: ref, Fields: changedFields(gv.Get(cid), row()), Reason: by})
				case !jsonEqual(old.Declared, c.Spec) || old.ProviderConfigRef != c.ProviderConfigRef:
					p.Update = append(p.Update, PlanItem{ID: cid, From: old.Ref, To: ref, Fields: changedFields(gv.Get(cid), row()), Reason: by})
				default:
					changed = false
				}
				if changed && composes(ref) && j.depth+1 < maxFanoutDepth {
					next = append(next, row())
				}
			}
			if len(creates) > 0 {
				want := make(map[converge.ID]bool, len(creates))
				for _, x := range creates {
					want[ids[x.child]] = true
				}
				consumes := make(map[converge.ID][]converge.Edge)
				for _, e := range res.Edges {
					if len(e.Flows) > 0 && want[e.Consumer] {
						consumes[e.Consumer] = append(consumes[e.Consumer], e)
					}
				}
				for _, x := range creates {
					p.Create[x.item].KnownAfter = KnownAfterApply(res.Children[x.child].Spec, consumes[ids[x.child]])
				}
			}
			if !live {
				return
			}
			if res.Delta {
				// Only what the delta removes goes; the children it
				// leaves out stay.
				for _, cid := range res.Removed {
					if c, ok := gv.Head(cid); ok && c.Owner == id && !c.Deleting {
						p.Prune = append(p.Prune, PlanItem{ID: cid, From: c.Ref, Reason: "pruned by " + string(id)})
					}
				}
				return
			}
			gv.ChildIDs(id, func(cid converge.ID) {
				if _, emitted := seen.find(cid); emitted {
					return
				}
				if c, ok := gv.Head(cid); ok && !c.Deleting {
					p.Prune = append(p.Prune, PlanItem{ID: cid, From: c.Ref, Reason: "pruned by " + string(id)})
				}
			})
		}); err != nil {
			p.Unanswered = append(p.Unanswered, PlanItem{ID: id, To: r.Ref(), Reason: "read graph: " + err.Error()})
			continue
		}
		for _, cr := range next {
			queue = append(queue, job{r: cr, depth: j.depth + 1})
		}
	}
	for _, l := range []*[]PlanItem{&p.Create, &p.Update, &p.Flip, &p.Prune, &p.Refused, &p.Unanswered} {
		sort.SliceStable(*l, func(i, j int) bool { return (*l)[i].ID < (*l)[j].ID })
	}
}
