package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/etcdstate"
	gitsync "github.com/convergehq/converge/sync"
)

// SyncerOptions configure the Syncers an engine makes (Engine.Syncer)
// and the one that checks a revision before any engine runs (Checker).
type SyncerOptions struct {
	Source *gitsync.Source
	// Path is the repository's sub-directory of documents.
	Path string
	Log  *slog.Logger
	// Signatures, OverrideChangeLimit, OverrideBy, LoadTimeout and
	// Sandbox are the Syncer's (gitsync.Syncer).
	Signatures          *gitsync.SignaturePolicy
	OverrideChangeLimit bool
	OverrideBy          string
	LoadTimeout         time.Duration
	Sandbox             *cue.Sandbox
	// Records, when set, wraps the engine's store as the Syncer records
	// verdicts in it (Statuses.Records: every record also to its git
	// note and the forge).
	Records func(gitsync.Records) gitsync.Records
}

// Checker returns a Syncer that can only check revisions (CheckContext,
// CheckWorkTree): it has no store and no engine. sync checks the revision
// it will apply with it before it starts the engine, which starts the
// workers the revision declares.
func (o SyncerOptions) Checker() *gitsync.Syncer {
	s := &gitsync.Syncer{Source: o.Source, Path: o.Path, Log: o.Log}
	o.configure(s)
	return s
}

// configure sets what every Syncer of o shares.
func (o SyncerOptions) configure(s *gitsync.Syncer) {
	s.Signatures = o.Signatures
	s.OverrideChangeLimit, s.OverrideBy = o.OverrideChangeLimit, o.OverrideBy
	s.LoadTimeout, s.Sandbox = o.LoadTimeout, o.Sandbox
}

// Syncer returns a Syncer bound to e, with everything it needs up front:
// it records verdicts in e's store (through o.Records), applies through
// e's scheduler, lints revisions against the kinds in the store
// (cue.LintTrees), dry-runs the composes a revision changes on e's
// workers, and reads the pin from e's control.
func (e *Engine) Syncer(o SyncerOptions) *gitsync.Syncer {
	var records gitsync.Records = e.store
	if o.Records != nil {
		records = o.Records(records)
	}
	s := &gitsync.Syncer{Source: o.Source, Path: o.Path, Log: o.Log, Records: records, Engine: e.sched,
		Lint: cue.LintTrees, Compose: e.sched.DryCompose, Control: e}
	o.configure(s)
	return s
}

// FollowEvents hear what Follow does, for the daemon's output, readiness
// and metrics. Follow calls them from its own goroutine, one at a time.
type FollowEvents interface {
	// Pinned says the pin changed: pin is the revision applied instead of
	// the branch head, nil once unpinned.
	Pinned(pin *converge.Pin)
	// Failed says a step (a fetch and the verdicts of what is new)
	// failed; evaluated says an earlier step went through.
	Failed(err error, evaluated bool)
	// Evaluated says the first step went through.
	Evaluated()
	// Pass is a new commit's verdict; when p.Applied it is the revision
	// now converging.
	Pass(p *gitsync.Pass)
	// Converged and Stuck are an applied revision's converge/sync
	// verdict: summary says what is Ready, desc what is not and why.
	Converged(p *gitsync.Pass, summary string)
	Stuck(p *gitsync.Pass, desc string)
	// Error is a verdict that could not be recorded.
	Error(err error)
}

// FollowOptions are what Follow needs besides its engine.
type FollowOptions struct {
	// Syncer follows the repository (Engine.Syncer).
	Syncer *gitsync.Syncer
	// Poll is the fetch interval, jittered by up to 10%.
	Poll time.Duration
	// Trigger asks for a step now (a webhook delivery, a sync request).
	Trigger <-chan struct{}
	// Health is told what the loop sees, for GET /healthz.
	Health *gitsync.Health
	// Events hears what happens.
	Events FollowEvents
	// HowToStart is the hint a stuck verdict gives for a kind no worker
	// serves (gitsync.UnservedHint).
	HowToStart string
	// StuckGrace is how long the engine must stay stuck before the
	// applied revision's verdict is failure (0: DefaultStuckGrace).
	StuckGrace time.Duration
	// WorkersGrace is how long after Follow starts the engine's external
	// workers may take to (re)connect (WorkerReconnectWindow for a
	// daemon with --workers-listen; 0: none): until it has passed, a
	// graph stuck on a kind no worker serves gets no verdict. A new
	// leader's workers come from the old one, and a freshly started
	// daemon's from wherever they run.
	WorkersGrace time.Duration
}

// WorkerReconnectWindow is how long an external worker may take to reach
// a control plane that has just started leading: the SDK pauses at most
// 1.5 s between rounds of a list of addresses (7.5 s with a single one)
// and gRPC's connect backoff at most 2 s (providers/sdk).
const WorkerReconnectWindow = 10 * time.Second

// DefaultStuckGrace is how long a daemon's engine must stay stuck before
// the applied revision's converge/sync verdict is failure.
const DefaultStuckGrace = 5 * time.Second

// Follow runs the sync loop on e until ctx is done: it fetches on start,
// every poll interval and on every trigger, gives each new commit its
// verdict, applies the newest good one and judges its convergence. While
// it runs, the admin API's reconcile of the repository (`converge
// reconcile`, and sync beside a daemon) is a step now, answered with the
// head it followed.
func (e *Engine) Follow(ctx context.Context, o FollowOptions) {
	syncer, src, ev, health := o.Syncer, o.Syncer.Source, o.Events, o.Health
	grace := o.StuckGrace
	if grace <= 0 {
		grace = DefaultStuckGrace
	}
	// current is the applied pass awaiting its converge/sync verdict; only
	// this loop touches it. A revision applied before a restart (or by the
	// last leader) and never judged is picked up again: resume reads it
	// until a read succeeds, and no step runs before, since a step that
	// applied a newer revision first would leave the older one pending
	// for good.
	var current *gitsync.Pass
	resumed := false
	resume := func() error {
		if resumed {
			return nil
		}
		p, err := PendingPass(ctx, e.store)
		if err != nil {
			return fmt.Errorf("resume pending verdict: %w", err)
		}
		current, resumed = p, true
		return nil
	}
	if err := resume(); err != nil {
		e.log.Error("resume pending verdict; read again at the next step", "err", err)
	}
	// unwritten are verdicts whose write failed other than by the term's
	// end (a member restarting, a leader change): written again at every
	// look until they land, so a store error never leaves a revision
	// pending for good. record reports false once the term is lost
	// (fenced): its verdicts are the next leader's.
	type verdict struct {
		p           *gitsync.Pass
		state, desc string
		told        bool // its write's failure was said (once is enough)
	}
	var unwritten []verdict
	record := func(v verdict) bool {
		err := syncer.SetSyncStatus(ctx, v.p, v.state, v.desc)
		if err == nil {
			return true
		}
		fenced := errors.Is(err, etcdstate.ErrFenced)
		if !v.told || fenced {
			ev.Error(err)
		}
		if fenced {
			return false
		}
		v.told = true
		unwritten = append(unwritten, v)
		return true
	}
	retry := func() bool {
		owed := unwritten
		unwritten = nil
		for i, v := range owed {
			if !record(v) {
				unwritten = append(unwritten, owed[i+1:]...)
				return false
			}
		}
		return true
	}
	// Failing commits get the same grace as a stuck graph: a daemon
	// judges the revision, then goes on retrying them.
	settle := gitsync.Settle{Grace: grace, CommitGrace: grace}
	started := time.Now()
	evaluated := false
	pinnedTo := ""
	step := func() {
		if err := resume(); err != nil {
			if ctx.Err() == nil {
				ev.Failed(err, evaluated)
			}
			return
		}
		passes, err := syncer.Advance(ctx)
		if pin := syncer.Pinned(ctx); pin == nil && pinnedTo != "" {
			pinnedTo = ""
			ev.Pinned(nil)
		} else if pin != nil && pin.Revision.Hash != pinnedTo {
			pinnedTo = pin.Revision.Hash
			ev.Pinned(pin)
		}
		if err != nil && ctx.Err() == nil {
			ev.Failed(err, evaluated)
		}
		if err == nil && !evaluated {
			evaluated = true
			ev.Evaluated()
		}
		for _, p := range passes {
			ev.Pass(p)
			if p.Applied {
				// A verdict still owed to the revision applied again is
				// no longer its verdict.
				unwritten = slices.DeleteFunc(unwritten, func(v verdict) bool { return v.p.Revision.Hash == p.Revision.Hash })
				if current != nil && current.Revision.Hash != p.Revision.Hash {
					// Never leave a verdict pending: the older revision
					// was replaced before it converged.
					record(verdict{p: current, state: converge.StateSuccess, desc: fmt.Sprintf("superseded by %.7s before it converged", p.Revision.Hash)})
				}
				current = p
				settle.Reset()
				health.Stuck("")
			}
		}
	}
	poll := time.NewTimer(0)
	defer poll.Stop()
	watch := time.NewTicker(100 * time.Millisecond)
	defer watch.Stop()
	type fetched struct {
		rev converge.Revision
		err error
	}
	reconcile := make(chan chan fetched)
	e.setFetchNow(func(rctx context.Context) (converge.Revision, error) {
		reply := make(chan fetched, 1)
		select {
		case reconcile <- reply:
		case <-rctx.Done():
			return converge.Revision{}, rctx.Err()
		case <-ctx.Done():
			return converge.Revision{}, errors.New("serve is shutting down")
		}
		select {
		case f := <-reply:
			return f.rev, f.err
		case <-rctx.Done():
			return converge.Revision{}, rctx.Err()
		}
	})
	defer e.setFetchNow(nil)
	for {
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
			step()
			poll.Reset(jitter(o.Poll))
		case reply := <-reconcile:
			step()
			var c *converge.Control
			if pin := syncer.Pinned(ctx); pin != nil {
				c = &converge.Control{Pin: pin}
			}
			rev, _, err := gitsync.Target(src, c)
			reply <- fetched{rev, err}
		case <-o.Trigger:
			step()
		case <-watch.C:
			if ctx.Err() != nil {
				return // a lost term's engine gives no verdict
			}
			if !retry() {
				return // deposed: the verdicts are the next leader's
			}
			pr := e.sched.Progress()
			health.Observe(time.Now(), pr)
			p := current
			if p == nil {
				continue
			}
			summary := gitsync.Summary(pr)
			due, failedWorkers := e.Workers()
			if pr.Settled == scheduler.Stuck && time.Since(started) < o.WorkersGrace &&
				gitsync.UnservedHint(e.sched.Problems(), nil, "") != "" {
				due = max(due, 1) // an external worker may still come
			}
			switch settle.Observe(time.Now(), pr, due) {
			case gitsync.Converged:
				if !record(verdict{p: p, state: converge.StateSuccess, desc: summary}) {
					return // deposed: the verdict is the next leader's
				}
				ev.Converged(p, summary)
				current = nil
			case gitsync.Stuck, gitsync.Undurable:
				why := "stuck"
				if gitsync.NotDurable(pr) {
					why = "state not durable"
				}
				desc := gitsync.Verdict(why, pr, gitsync.UnservedHint(e.sched.Problems(), failedWorkers, o.HowToStart))
				if !record(verdict{p: p, state: converge.StateFailure, desc: desc}) {
					return
				}
				// GET /healthz says it before anyone hears of it.
				health.Stuck(p.Revision.String() + " " + desc)
				ev.Stuck(p, desc)
				current = nil
			}
		}
	}
}

// PendingPass returns the applied revision whose converge/sync verdict is
// still pending (a daemon stopped before judging it), or nil. The store
// names it applied, so it is, whatever its record says (a failed apply's
// pending record, written after its batch landed after all).
func PendingPass(ctx context.Context, st state.Backend) (*gitsync.Pass, error) {
	rev, err := st.Applied(ctx)
	if err != nil || rev == nil || rev.Dirty {
		return nil, err
	}
	rec, err := st.Revision(ctx, rev.Hash)
	if errors.Is(err, converge.ErrNotFound) {
		return nil, nil // applied by an older converge that kept no record
	}
	if err != nil {
		return nil, err
	}
	if s, ok := rec.Status(converge.ContextSync); ok && s.State == converge.StatePending {
		rec.Applied = true
		return &gitsync.Pass{Revision: rec.Revision, Record: rec, Applied: true}, nil
	}
	return nil, nil
}

// jitter returns d ± up to 10%.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d))
}
