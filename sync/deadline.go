package sync

import (
	"context"
	"errors"
	"fmt"
	gosync "sync"
	"time"
)

// ErrTimeout is returned, wrapped in an error naming the operation, the
// remote or the revision and the timeout, when a fetch, a push or a
// load of documents did not finish in time. The operation was
// abandoned: nothing it would have changed was applied, and whatever was
// applied before stays applied.
var ErrTimeout = errors.New("timed out")

// The timeouts used when none is set (RemoteOptions.Timeout,
// Source.SetTimeout, Syncer.LoadTimeout).
const (
	// DefaultGitTimeout bounds one fetch (ls-remote and fetch, or the
	// first clone) or one push of notes.
	DefaultGitTimeout = 2 * time.Minute
	// DefaultLoadTimeout bounds loading one revision's documents: CUE
	// evaluates the 333,000-team classic BOM in ~11 s.
	DefaultLoadTimeout = 5 * time.Minute
)

// gate lets one operation at a time touch what it guards (a repository's
// storage, the CUE evaluator's memory), and outlives an operation its
// caller abandoned: the next one waits until that has really returned.
type gate struct {
	once gosync.Once
	ch   chan struct{}
}

func (g *gate) get() chan struct{} {
	g.once.Do(func() { g.ch = make(chan struct{}, 1) })
	return g.ch
}

// bounded runs op in its own goroutine behind g and returns when op
// returns, when ctx is done (ctx's error) or when timeout passes
// (ErrTimeout, wrapped with what, timeout and knob, the setting that
// changes it), whichever comes first. op gets a context that ends at
// the same moment; a transport that ignores it (go-git's file:// session
// can hang in a receive-pack, go-git#614; CUE cannot be interrupted) is
// abandoned, not waited for, and still holds g until it returns.
func bounded[T any](ctx context.Context, g *gate, timeout time.Duration, what, knob string, op func(context.Context) (T, error)) (T, error) {
	var zero T
	deadline := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		// The caller's is sooner (a command's --timeout): name that
		// one, and end exactly when it does, so the caller sees its
		// own deadline passed.
		deadline, knob = dl, "the command's --timeout"
		timeout = time.Until(dl).Round(time.Millisecond)
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	// Cancelled when bounded returns: that stops an op that listens, and
	// never races a result already sent (the op does not cancel).
	defer cancel()
	timedOut := func(why string) error {
		return fmt.Errorf("%s: %w after %v%s (%s)", what, ErrTimeout, timeout, why, knob)
	}
	ended := func() error {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return timedOut("")
		}
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
	ch := g.get()
	select {
	case ch <- struct{}{}:
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return zero, timedOut(": an earlier one, abandoned at its deadline, is still running")
		}
		return zero, ended()
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() { <-ch }()
		v, err := op(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		if r.err != nil && ctx.Err() != nil {
			return zero, ended() // the op noticed the deadline or the cancel first
		}
		return r.v, r.err
	case <-ctx.Done():
		select {
		case r := <-done: // it ended at the same moment
			if r.err == nil {
				return r.v, nil
			}
		default:
		}
		return zero, ended()
	}
}
