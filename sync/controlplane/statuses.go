package controlplane

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	gosync "sync"
	"time"

	"github.com/convergehq/converge"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/forge"
)

// StatusOptions say where a run's commit statuses go besides the store
// and the local git notes.
type StatusOptions struct {
	// Reporter, when set, posts every status to a forge's commit-status
	// API, from a forge.Publisher's goroutine (never blocking the run).
	Reporter forge.Reporter
	// Push pushes the notes ref to the source's origin whenever the notes
	// change, retrying a failed push after a minute.
	Push bool
	// SiteURL, when set, is the status site a status without a target URL
	// links to (forge.Target).
	SiteURL string
	// Log hears what could not be posted or pushed (nil: discarded).
	Log *slog.Logger
}

// Statuses is the status push of one run (sync, serve): every verdict it
// records becomes its commit's git note, and is posted to the forge and
// pushed to origin as StatusOptions say, in the background. It writes
// notes and posts statuses only when the run's state owns the
// repository's notes (gitsync.Source.OwnsNotes). A nil *Statuses reports
// nothing.
type Statuses struct {
	src      *gitsync.Source
	owns     bool             // the run's state owns src's notes
	pub      *forge.Publisher // nil without a Reporter
	siteURL  string
	pushWake chan struct{} // capacity 1: notes changed, push them; nil without Push
	log      *slog.Logger
	cancel   context.CancelFunc
	// pushCtx is the context of pushLoop's pushes: Stop lets a push in
	// flight finish (cancelPush only once the drain's time is up), since
	// go-git's file:// push deadlocks when cancelled half-way (a
	// receive-pack child keeps the pipes open; go-git#614).
	pushCtx    context.Context
	cancelPush context.CancelFunc
	wg         gosync.WaitGroup // the background poster and pusher
}

// StatusDrain bounds how long Stop waits for the forge and the last push.
const StatusDrain = 30 * time.Second

// StartStatuses begins posting to the forge and pushing notes in the
// background, as o says, for verdicts of src recorded by the state in
// stateDir. A run on a state that does not own src's notes (a scratch
// --state) says so on the log and keeps its verdicts in its store only.
func StartStatuses(ctx context.Context, src *gitsync.Source, stateDir string, o StatusOptions) (*Statuses, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	owns, owner, err := src.OwnsNotes(stateDir)
	if err != nil {
		return nil, err
	}
	if !owns {
		log.Warn("git notes and forge statuses not written: another state owns them (git config converge.state names it); this one keeps its verdicts in its store",
			"owner", owner, "state", stateDir)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	pushCtx, cancelPush := context.WithCancel(context.WithoutCancel(ctx))
	s := &Statuses{src: src, owns: owns, siteURL: o.SiteURL, log: log, cancel: cancel, pushCtx: pushCtx, cancelPush: cancelPush}
	if o.Reporter != nil {
		s.pub = forge.NewPublisher(o.Reporter, log)
		s.wg.Go(func() { s.pub.Run(runCtx) })
	}
	if o.Push {
		s.pushWake = make(chan struct{}, 1)
		s.wg.Go(func() { s.pushLoop(runCtx) })
	}
	return s, nil
}

// pushLoop pushes the notes whenever they changed, retrying a failed push
// after a minute; the pushes coalesce.
func (s *Statuses) pushLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.pushWake:
		}
		if err := s.src.PushNotes(s.pushCtx); err != nil && ctx.Err() == nil {
			s.log.Warn("push notes", "err", err)
			t := time.NewTimer(time.Minute)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			s.wantPush()
		}
	}
}

func (s *Statuses) wantPush() {
	if s == nil || s.pushWake == nil {
		return
	}
	select {
	case s.pushWake <- struct{}{}:
	default:
	}
}

// Report stores pass's statuses as the git note of its revision and
// queues them for the forge and the notes push. It returns the note's
// write error, naming it: a command whose last report fails must not exit
// 0. A work tree's pass (dirty) has no note and is not reported.
func (s *Statuses) Report(pass *gitsync.Pass) error {
	if s == nil || !s.owns || pass == nil || pass.Record == nil || pass.Revision.Dirty {
		return nil
	}
	err := s.src.WriteStatuses(pass.Revision.Hash, pass.Record.Statuses)
	s.publish(pass.Record)
	if err != nil {
		return fmt.Errorf("write commit status note: %w", err)
	}
	return nil
}

// publish queues rec's statuses for the forge and the notes push, and
// returns at once.
func (s *Statuses) publish(rec *converge.RevisionRecord) {
	if s == nil || !s.owns || rec == nil || rec.Revision.Dirty || rec.Revision.Hash == "" {
		return
	}
	if s.pub != nil {
		for _, st := range rec.Statuses {
			s.pub.Publish(rec.Revision.Hash, forge.Target(s.siteURL, rec.Revision.Hash, st))
		}
	}
	s.wantPush()
}

// Stop posts what is still queued and pushes the notes a last time, for
// at most StatusDrain, then stops the background work. What could not be
// posted or pushed is logged; the local git notes keep it, and
// `converge status --forge …` posts it later.
func (s *Statuses) Stop() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), StatusDrain)
	defer cancel()
	if s.pub != nil {
		if err := s.pub.Flush(ctx); err != nil {
			s.log.Warn("forge: statuses not posted; the git notes keep them", "err", err, "pending", s.pub.Pending())
		}
	}
	s.cancel() // the pusher ends after the push in flight, if any
	waited := make(chan struct{})
	go func() { s.wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
		s.cancelPush()
		<-waited
	}
	s.cancelPush()
	if s.pushWake != nil {
		if err := s.src.PushNotes(ctx); err != nil {
			s.log.Error("push git notes", "err", err)
		}
	}
}

// Records returns inner with every stored revision record also written
// to its commit's git note and published (forge, notes push): the hook
// for a loop that stores records in many places, such as the follow
// loop's Syncer.Records. A note that cannot be written is said on errOut
// ("converge: …"); the record is stored all the same.
func (s *Statuses) Records(inner gitsync.Records, errOut io.Writer) gitsync.Records {
	return &statusRecords{Records: inner, s: s, errOut: errOut}
}

// statusRecords is Statuses.Records.
type statusRecords struct {
	gitsync.Records
	s      *Statuses
	errOut io.Writer
}

func (r *statusRecords) PutRevision(ctx context.Context, rec *converge.RevisionRecord) error {
	if err := r.Records.PutRevision(ctx, rec); err != nil {
		return err
	}
	if r.s != nil && r.s.owns && !rec.Revision.Dirty {
		if err := r.s.src.WriteStatuses(rec.Revision.Hash, rec.Statuses); err != nil {
			fmt.Fprintln(r.errOut, "converge:", err)
		}
	}
	r.s.publish(rec)
	return nil
}
