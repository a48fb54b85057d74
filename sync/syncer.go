package sync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/scheduler"
)

// Applier is the engine side a sync feeds: the scheduler.
type Applier interface {
	Apply(ctx context.Context, d *converge.Desired, v scheduler.Validator) (*scheduler.Plan, error)
}

// Records keeps what converge concluded about each revision: the state
// store.
type Records interface {
	PutRevision(rec *converge.RevisionRecord) error
	Revision(hash string) (*converge.RevisionRecord, error)
	Applied() (*converge.Revision, error)
}

// Syncer processes the newest revision of a Source: it loads and validates
// the documents below Path and, when they are valid, applies them.
type Syncer struct {
	Source  *Source
	Path    string
	Records Records
	Engine  Applier
	Load    cue.Options
	Now     func() time.Time
	Log     *slog.Logger
}

// Pass is the outcome of one Syncer.Once.
type Pass struct {
	Revision converge.Revision
	Record   *converge.RevisionRecord
	// Loaded is the revision's documents; nil when the pass was skipped.
	Loaded *cue.Result
	// Plan is what Apply changed; nil unless Applied.
	Plan    *scheduler.Plan
	Applied bool
	// Skipped: the head is the revision already applied.
	Skipped bool
}

// Valid reports whether the revision's documents validated.
func (p *Pass) Valid() bool { return p.Record != nil && len(p.Record.Errors) == 0 }

// Once resolves the followed branch and, unless its head is already
// applied, checks and applies it.
func (s *Syncer) Once(ctx context.Context) (*Pass, error) {
	rev, err := s.Source.Head()
	if err != nil {
		return nil, err
	}
	if applied, err := s.Records.Applied(); err == nil && applied != nil && applied.Hash == rev.Hash {
		rec, _ := s.Records.Revision(rev.Hash)
		return &Pass{Revision: rev, Record: rec, Skipped: true}, nil
	}
	pass, err := s.Check(rev)
	if err != nil {
		return nil, err
	}
	if !pass.Valid() {
		return pass, s.Records.PutRevision(pass.Record)
	}
	return pass, s.Apply(ctx, pass)
}

// Check loads and validates rev's documents and sets its
// converge/validate status. It changes nothing else: a revision with
// errors is not applied, and whatever was applied before stays applied.
func (s *Syncer) Check(rev converge.Revision) (*Pass, error) {
	now := s.now()
	rec := &converge.RevisionRecord{Revision: rev, Seen: now}
	if s.Records != nil {
		if old, err := s.Records.Revision(rev.Hash); err == nil && old != nil {
			rec = old
		}
	}
	pass := &Pass{Revision: rev, Record: rec}
	fsys, err := s.Source.FS(rev, s.Path)
	if err != nil {
		return nil, err
	}
	res, err := cue.Load(fsys, ".", s.Load)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", rev, err)
	}
	pass.Loaded = res
	rec.Errors = res.Findings
	if len(res.Findings) > 0 {
		rec.SetStatus(converge.CommitStatus{Context: converge.ContextValidate, State: converge.StateFailure,
			Description: fmt.Sprintf("%d errors: %s", len(res.Findings), res.Findings[0]), Time: now})
		rec.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StateFailure,
			Description: "not applied: invalid documents", Time: now})
		return pass, nil
	}
	rec.SetStatus(converge.CommitStatus{Context: converge.ContextValidate, State: converge.StateSuccess,
		Description: fmt.Sprintf("%d documents valid", res.Documents), Time: now})
	return pass, nil
}

// Apply hands a checked, valid pass to the engine and records the
// revision as applied with a pending converge/sync status.
func (s *Syncer) Apply(ctx context.Context, pass *Pass) error {
	if !pass.Valid() {
		return fmt.Errorf("apply %s: revision is invalid", pass.Revision)
	}
	rec, now := pass.Record, s.now()
	d := pass.Loaded.Desired
	d.Revision = pass.Revision
	plan, err := s.Engine.Apply(ctx, &d, pass.Loaded.Schemas)
	if err != nil {
		rec.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StateError,
			Description: "apply: " + err.Error(), Time: now})
		return errors.Join(fmt.Errorf("apply %s: %w", pass.Revision, err), s.Records.PutRevision(rec))
	}
	rec.Applied = true
	rec.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StatePending,
		Description: "applied, converging", Time: now})
	pass.Plan, pass.Applied = plan, true
	return s.Records.PutRevision(rec)
}

// SetSyncStatus records the converge/sync verdict on pass's revision.
func (s *Syncer) SetSyncStatus(pass *Pass, state, description string) error {
	pass.Record.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: state,
		Description: description, Time: s.now()})
	return s.Records.PutRevision(pass.Record)
}

func (s *Syncer) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now().UTC()
}
