package controlplane

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/stateapi"
	gitsync "github.com/convergehq/converge/sync"
)

// Settled is how a wait for convergence ended (Engine.WaitSettled), and
// then what Engine.FinishSync made of it.
type Settled int

const (
	SettledConverged Settled = iota
	SettledStuck
	SettledTimeout
	SettledInterrupted
	// SettledUndurable: commits of state kept failing (gitsync.Undurable).
	SettledUndurable
	SettledSuspended
)

// String is the verdict's word in sync -o json: converged, stuck,
// timed_out, interrupted, not_durable or suspended.
func (s Settled) String() string {
	return [...]string{SettledConverged: "converged", SettledStuck: "stuck", SettledTimeout: "timed_out",
		SettledInterrupted: "interrupted", SettledUndurable: "not_durable", SettledSuspended: "suspended"}[s]
}

// CommitGrace is how long a one-shot command (sync, delete, do) lets
// every commit of state fail before it stops: a store that cannot commit
// (a full disk) does not heal by waiting, and nothing the run does
// meanwhile is kept.
const CommitGrace = 2 * time.Second

// WaitOptions say how long Engine.WaitSettled waits and what it shows.
type WaitOptions struct {
	// Wait is how long it waits at most (then SettledTimeout).
	Wait time.Duration
	// Grace is how long nothing must progress before the engine is
	// stuck (gitsync.Settle.Grace).
	Grace time.Duration
	// Progress, when set, is shown every look (50 ms).
	Progress func(scheduler.Progress)
}

// WaitSettled looks at the engine every 50 ms until its graph converges,
// is stuck (gitsync.Settle decides; a suspension holding resources back
// ends it too), o.Wait passes or ctx ends (SettledTimeout when ctx's
// deadline passed, SettledInterrupted otherwise).
func (e *Engine) WaitSettled(ctx context.Context, o WaitOptions) Settled {
	deadline := time.NewTimer(o.Wait)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	settle := gitsync.Settle{Grace: o.Grace, CommitGrace: CommitGrace, StopWhenHeld: true}
	for {
		p := e.Scheduler().Progress()
		if o.Progress != nil {
			o.Progress(p)
		}
		due, _ := e.Workers()
		switch settle.Observe(time.Now(), p, due) {
		case gitsync.Converged:
			return SettledConverged
		case gitsync.Stuck:
			return SettledStuck
		case gitsync.Undurable:
			return SettledUndurable
		case gitsync.Suspended:
			return SettledSuspended
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return SettledTimeout // the command's own --timeout
			}
			return SettledInterrupted
		case <-deadline.C:
			return SettledTimeout
		case <-tick.C:
		}
	}
}

// LastFlushTimeout bounds the flush that makes a converged sync durable
// (FinishSync).
const LastFlushTimeout = 10 * time.Minute

// SyncVerdict is what FinishSync found once a wait on a revision ended.
type SyncVerdict struct {
	// Settled is how the wait ended; a last flush that failed makes it
	// SettledUndurable, and one that went through after commits had
	// failed for the grace SettledStuck.
	Settled Settled
	// Progress is the engine's then, its CommitError the failed flush's
	// when the flush failed; Summary is gitsync.Summary of it.
	Progress scheduler.Progress
	Summary  string
	// State and Description are the converge/sync status recorded for
	// the revision; RecordErr says why recording it failed.
	State, Description string
	RecordErr          error
	// Groups are what is not Ready, by cause (at most maxListed
	// resources each), when the wait did not converge.
	Groups []scheduler.ProblemGroup
	// Problems, Hint and CommitProblem say why a stuck, timed-out or
	// undurable wait did not converge: the resources, a hint for kinds
	// no worker serves, a failing commit of state.
	Problems      []scheduler.Problem
	Hint          string
	CommitProblem string
}

// FinishSync makes what e did for pass durable (the last flush, then
// state.Backend.Verify: where readers look), judges the wait that ended
// as res, and records the verdict in the store as pass's converge/sync
// status (the caller reports it to the git note). howToStart is the hint
// for kinds no worker serves when no declared worker failed. It runs
// under LastFlushTimeout of its own: the command's context may be done
// (a timeout, an interrupt). Nothing is converged until it is durable.
func (e *Engine) FinishSync(syncer *gitsync.Syncer, pass *gitsync.Pass, res Settled, howToStart string, maxListed int) SyncVerdict {
	// The store may be well behind the graph: a million-child
	// composition's rows drain 6,144 a commit while the work goes on, so
	// the last flush can take minutes (not the seconds it takes at demo
	// size). It is bounded all the same: a store that cannot keep up for
	// that long is failing.
	ctx, cancel := context.WithTimeout(context.Background(), LastFlushTimeout)
	defer cancel()
	ferr := e.Scheduler().Flush(ctx)
	if ferr == nil {
		ferr = e.Store().Verify(ctx)
	}
	p := e.Scheduler().Progress()
	if ferr != nil {
		if p.CommitError == "" {
			p.CommitError = ferr.Error()
		}
		res = SettledUndurable
	} else if res == SettledUndurable {
		// The commits failed for the grace and then one went through:
		// durable now, but the wait was cut short.
		res = SettledStuck
	}
	v := SyncVerdict{Settled: res, Progress: p, Summary: gitsync.Summary(p), State: converge.StateSuccess}
	v.Description = v.Summary
	if res != SettledConverged {
		v.Groups = e.Scheduler().ProblemGroups(maxListed)
	}
	switch res {
	case SettledConverged:
	case SettledInterrupted:
		v.State, v.Description = converge.StatePending, gitsync.Verdict("interrupted", p, "")
	case SettledSuspended:
		// Applied, and held back by the operator's own act: pending
		// until converge resume, as serve leaves it.
		var held []string
		if ctl, cerr := e.Control(ctx); cerr == nil && ctl != nil {
			for _, s := range ctl.Suspended {
				held = append(held, s.String())
			}
		}
		hint := strings.Join(held, "; ")
		if hint == "" {
			hint = "converge resume"
		}
		v.State, v.Description = converge.StatePending, gitsync.Verdict("suspended", p, fmt.Sprintf("%d waiting for a resume: %s", p.Held, hint))
	default:
		v.Problems = e.Scheduler().Problems()
		_, failedWorkers := e.Workers()
		v.Hint = gitsync.UnservedHint(v.Problems, failedWorkers, howToStart)
		v.State, v.Description = converge.StateFailure, gitsync.Verdict(v.Why(), p, v.Hint)
		v.CommitProblem = gitsync.CommitProblem(p)
	}
	v.RecordErr = syncer.SetSyncStatus(ctx, pass, v.State, v.Description)
	return v
}

// Why is a wait that did not converge in a word: stuck, timed out or
// state not durable.
func (v SyncVerdict) Why() string {
	switch v.Settled {
	case SettledTimeout:
		return "timed out"
	case SettledUndurable:
		return "state not durable"
	}
	return "stuck"
}

// Standing reports what gitsync.AlreadyConverged says of st for rev,
// reading only the applied revision, the roots and the owed deliveries:
// the total of resources, and whether rev is applied and converged.
func Standing(ctx context.Context, st state.Backend, rev converge.Revision) (total int, ok bool) {
	applied, err := st.Applied(ctx)
	if err != nil || applied == nil || applied.Hash != rev.Hash {
		return 0, false
	}
	src, err := st.Source(ctx)
	if err != nil || src == nil || src.Revision.Hash != rev.Hash {
		return 0, false
	}
	roots, err := st.Resources(ctx, state.Filter{RootsOnly: true})
	if err != nil {
		return 0, false
	}
	ds, err := st.Deliveries(ctx)
	if err != nil {
		return 0, false
	}
	owed := 0
	for _, d := range ds {
		if !d.Done {
			owed++
		}
	}
	return gitsync.AlreadyConverged(applied, rev, src.Declared, roots, owed)
}

// StartForCommand starts an engine for one teardown or verb (delete,
// do) on the state o names, with the loaded resources' overdue resyncs
// postponed, and gives the workers it starts up to 30 s to connect (not
// those that failed). When a daemon took the state while it started
// (state.ErrLocked), it returns that daemon's admin client instead, once
// its socket answers (within 5 s), and a nil engine.
func StartForCommand(ctx context.Context, o Options) (*Engine, *stateapi.Client, error) {
	o.Scheduler.PostponeLoadedResyncs = true // it runs for one teardown or verb
	e, err := Start(ctx, o)
	if errors.Is(err, state.ErrLocked) {
		// A daemon took the state while we started: it answers on its
		// admin socket once it is up.
		for i := 0; i < 50; i++ {
			if c, derr := stateapi.Dial(filepath.Join(o.StateDir, stateapi.SocketName)); derr == nil {
				return nil, c, nil
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	// Verbs and teardowns need the workers: give them time to connect,
	// but not to those that failed.
	for until := time.Now().Add(30 * time.Second); time.Now().Before(until); time.Sleep(10 * time.Millisecond) {
		if due, _ := e.Workers(); due == 0 {
			break
		}
	}
	return e, nil, nil
}

// Stuck reports whether nothing can progress any more on e (settle
// decides: stuck, or commits of state failing), with the hint for kinds
// no worker serves ("" if none; howToStart when no declared worker
// failed).
func (e *Engine) Stuck(settle *gitsync.Settle, howToStart string) (bool, string) {
	due, failedWorkers := e.Workers()
	if o := settle.Observe(time.Now(), e.Scheduler().Progress(), due); o != gitsync.Stuck && o != gitsync.Undurable {
		return false, ""
	}
	return true, gitsync.UnservedHint(e.Scheduler().Problems(), failedWorkers, howToStart)
}
