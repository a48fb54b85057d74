package forge

import (
	"context"
	"errors"
	"log/slog"
	gosync "sync"
	"time"

	"github.com/convergehq/converge"
)

// Publisher queues statuses for a Reporter so the sync loop never waits
// on a forge. Publish only appends to the queue; Run (or Flush) posts the
// queue in order. A status the forge could not take for a temporary
// reason (down, 5xx, 429, network) stays at the head of the queue and is
// tried again RetryEvery later; nothing is dropped except a status the
// forge refuses for good (Permanent), which is logged.
type Publisher struct {
	reporter Reporter
	log      *slog.Logger
	// RetryEvery is how long Run waits after a failed pass; set it before
	// Run. Zero means 30 s.
	RetryEvery time.Duration

	wake chan struct{} // capacity 1: a pass is wanted

	mu    gosync.Mutex // guards queue
	queue []queued

	post gosync.Mutex // held by the one pass posting at a time
}

type queued struct {
	sha string
	st  converge.CommitStatus
}

// NewPublisher returns a Publisher posting through r and logging refused
// statuses to log (nil: discarded).
func NewPublisher(r Reporter, log *slog.Logger) *Publisher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Publisher{reporter: r, log: log, wake: make(chan struct{}, 1)}
}

// Publish queues st for commit sha and returns at once. A status equal in
// state and description to the last one queued for the same commit and
// context is not queued again.
func (p *Publisher) Publish(sha string, st converge.CommitStatus) {
	p.mu.Lock()
	dup := false
	for i := len(p.queue) - 1; i >= 0; i-- {
		q := p.queue[i]
		if q.sha == sha && q.st.Context == st.Context {
			dup = q.st.State == st.State && q.st.Description == st.Description
			break
		}
	}
	if !dup {
		p.queue = append(p.queue, queued{sha: sha, st: st})
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Pending returns how many statuses wait to be posted.
func (p *Publisher) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

// Flush posts the queue in order until it is empty (nil) or the forge
// fails temporarily (that error; the status stays queued, with all after
// it). Statuses the forge refuses for good are dropped, logged and
// joined into the returned error once the queue is empty.
func (p *Publisher) Flush(ctx context.Context) error {
	p.post.Lock()
	defer p.post.Unlock()
	var refused []error
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.mu.Unlock()
			return errors.Join(refused...)
		}
		head := p.queue[0]
		p.mu.Unlock()
		err := p.reporter.Report(ctx, head.sha, head.st)
		if err != nil && !Permanent(err) {
			return err
		}
		if err != nil {
			p.log.Warn("forge refused status", "sha", head.sha, "context", head.st.Context, "err", err)
			refused = append(refused, err)
		}
		// Only Flush removes, under p.post, so the head is still head.
		p.mu.Lock()
		p.queue[0] = queued{}
		p.queue = p.queue[1:]
		p.mu.Unlock()
	}
}

// Run posts queued statuses as they come until ctx ends, retrying
// RetryEvery after a pass the forge failed.
func (p *Publisher) Run(ctx context.Context) {
	every := p.RetryEvery
	if every <= 0 {
		every = 30 * time.Second
	}
	for {
		err := p.Flush(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil && !Permanent(err) {
			// The forge is down: wait for the retry, not for new statuses.
			p.log.Info("forge unavailable; will retry", "pending", p.Pending(), "in", every, "err", err)
			t := time.NewTimer(every)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
	}
}

// Backfill queues every status of records (oldest record first, as
// given) and flushes: the reporter's list-before-post skips what the
// forge already shows, so only what it is missing is posted — after a
// restart, or once a forge that was down for long is back.
func (p *Publisher) Backfill(ctx context.Context, records []*converge.RevisionRecord) error {
	for _, r := range records {
		if r == nil || r.Revision.Dirty || r.Revision.Hash == "" {
			continue
		}
		for _, st := range r.Statuses {
			p.Publish(r.Revision.Hash, st)
		}
	}
	return p.Flush(ctx)
}
