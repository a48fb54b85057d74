package sync

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/convergehq/converge"
)

// maxBacklog bounds how many new commits one Advance gives verdicts to;
// older ones in a longer backlog are skipped (the newest are what matter).
const maxBacklog = 200

// Advance brings the source up to date (a fetch for a remote) and gives
// every first-parent commit since the last one processed its verdict,
// oldest first: validated, and linted against its parent when a Lint
// function is set. The newest valid revision is then applied (see Apply);
// an older valid one in the same batch is recorded as superseded, never
// applied. Invalid revisions are recorded with their errors and not
// applied; whatever was applied before stays applied. Advance returns the
// passes it made, oldest first, or nil when nothing is new.
func (s *Syncer) Advance(ctx context.Context) ([]*Pass, error) {
	if _, err := s.Source.Fetch(ctx); err != nil {
		return nil, err
	}
	pin, err := s.pinned(ctx)
	if err != nil {
		return nil, fmt.Errorf("read pin: %w", err)
	}
	if s.last == "" {
		// A failed read is no answer: taken for "nothing applied", the
		// head alone would be judged (the commits since the applied one
		// never) and the applied revision applied again, its final
		// verdict revised.
		applied, err := s.Records.Applied(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the applied revision: %w", err)
		}
		if applied != nil && !applied.Dirty {
			if err := s.finishBehind(ctx, *applied); err != nil {
				return nil, err
			}
			s.last = applied.Hash
		}
	}
	if pin != nil {
		return s.advancePinned(ctx, pin)
	}
	head, err := s.Source.Head()
	if err != nil {
		return nil, err
	}
	if head.Hash == s.last {
		s.wasPinned = false
		return nil, nil
	}
	revs := []converge.Revision{head}
	if s.wasPinned {
		s.wasPinned = false
	} else if s.last != "" {
		if fp, err := s.Source.FirstParents(s.last, head.Hash); err == nil && len(fp) > 0 {
			revs = fp
		}
	}
	if len(revs) > maxBacklog {
		revs = revs[len(revs)-maxBacklog:]
	}
	parentKinds, parentTree := s.lastKinds, s.lastTree
	if s.Lint != nil && s.last != "" && parentKinds == nil {
		if prev, err := s.Source.Revision(s.last); err == nil {
			if p, err := s.CheckContext(ctx, prev); err == nil && p.Loaded != nil {
				parentKinds, parentTree = p.Loaded.Desired.Kinds, p.Tree
			}
		}
	}
	passes := make([]*Pass, 0, len(revs))
	for i, rev := range revs {
		if s.passedOver[rev.Hash] && i < len(revs)-1 {
			continue // timed out before, and a newer commit follows still
		}
		pass, err := s.CheckContext(ctx, rev)
		if errors.Is(err, ErrTimeout) && i < len(revs)-1 {
			// A newer commit follows (a fix, a revert): it decides what
			// is applied, so one slow document cannot hold it up. This
			// one's verdict says why it was not applied.
			s.recordTimeout(ctx, rev, err, "a newer commit was checked instead")
			if s.passedOver == nil {
				s.passedOver = map[string]bool{}
			}
			s.passedOver[rev.Hash] = true
			if s.Log != nil {
				s.Log.Warn("revision not applied", "revision", rev.String(), "err", err)
			}
			continue
		}
		if errors.Is(err, ErrTimeout) {
			// Its verdict says why; the next Advance tries it again, and
			// what was applied before stays applied.
			s.recordTimeout(ctx, rev, err, "tried again at the next fetch")
			return passes, err
		}
		if err != nil {
			return passes, err
		}
		if s.Lint != nil && pass.Valid() {
			s.lintParent(pass, parentKinds, parentTree)
		}
		if pass.Valid() {
			parentKinds, parentTree = pass.Loaded.Desired.Kinds, pass.Tree
		}
		passes = append(passes, pass)
	}
	// The newest valid, non-breaking revision is applied.
	apply := -1
	for i := len(passes) - 1; i >= 0; i-- {
		if passes[i].Valid() && !breaking(passes[i].Record) {
			apply = i
			break
		}
	}
	// Apply first: whether it was held decides what the older valid
	// revisions are told. Before it, each older one is recorded pending:
	// a term that ends between Apply and their verdicts leaves them
	// pending behind the applied revision, where the next term's first
	// Advance finds them (finishBehind), not absent.
	held := ""
	if apply >= 0 {
		for _, p := range passes[:apply] {
			if !p.Valid() || breaking(p.Record) {
				continue // their verdict is final already, or below
			}
			if _, ok := p.Record.Status(converge.ContextSync); ok {
				continue
			}
			p.Record.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StatePending,
				Description: fmt.Sprintf("checked; the newer %.7s is being applied", passes[apply].Revision.Hash), Time: s.now()})
			if err := s.Records.PutRevision(ctx, p.Record); err != nil {
				return passes, err
			}
		}
		if err := s.Apply(ctx, passes[apply]); err != nil {
			return passes, err
		}
		held = passes[apply].Held
	}
	for i, p := range passes {
		switch {
		case i == apply:
			continue // Apply recorded it
		case !p.Valid():
			// Check set its failure statuses.
		case breaking(p.Record):
			p.Record.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StateFailure,
				Description: "not applied: breaking schema change", Time: s.now()})
		case i < apply && held != "":
			p.Record.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StateFailure,
				Description: fmt.Sprintf("not applied: the newer %.7s was held: %s", passes[apply].Revision.Hash, held), Time: s.now()})
			p.Record.Held = "newer revision held"
		case i < apply:
			p.Record.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StateSuccess,
				Description: fmt.Sprintf("superseded by %.7s before it was applied", passes[apply].Revision.Hash), Time: s.now()})
			p.Record.Held = "superseded"
		}
		if err := s.Records.PutRevision(ctx, p.Record); err != nil {
			return passes, err
		}
	}
	s.last, s.lastKinds, s.lastTree = head.Hash, parentKinds, parentTree
	s.passedOver = nil // all behind s.last now
	return passes, nil
}

// recordTimeout records that rev's documents could not be loaded in
// time (err): not applied, and then what (next). The deadline that ran
// out may be ctx's own: the verdict is recorded all the same.
func (s *Syncer) recordTimeout(ctx context.Context, rev converge.Revision, err error, next string) {
	if s.Records == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	rec := &converge.RevisionRecord{Revision: rev, Seen: s.now()}
	if old, rerr := s.Records.Revision(ctx, rev.Hash); rerr == nil && old != nil {
		rec = old
	}
	rec.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StateFailure,
		Description: "not applied: " + err.Error() + "; " + next, Time: s.now()})
	if perr := s.Records.PutRevision(ctx, rec); perr != nil && s.Log != nil {
		s.Log.Warn("record revision", "revision", rev.String(), "err", perr)
	}
}

// lintParent lints pass's kinds against its parent's and records the
// converge/lint verdict.
func (s *Syncer) lintParent(pass *Pass, parent []*converge.Kind, parentTree fs.FS) {
	findings := s.Lint(parent, pass.Loaded.Desired.Kinds, parentTree, pass.Tree)
	now := s.now()
	if len(findings) == 0 {
		pass.Record.SetStatus(converge.CommitStatus{Context: converge.ContextLint, State: converge.StateSuccess,
			Description: "no breaking schema changes", Time: now})
		return
	}
	pass.Record.Findings = appendFindings(pass.Record.Findings, findings)
	f := findings[0]
	pass.Record.SetStatus(converge.CommitStatus{Context: converge.ContextLint, State: converge.StateFailure,
		Description: fmt.Sprintf("not applied: %s %s: %s", f.Path, f.Rule, f.Message), Time: now})
}

// breaking reports whether rec's lint verdict is a failure.
func breaking(rec *converge.RevisionRecord) bool {
	st, ok := rec.Status(converge.ContextLint)
	return ok && st.State == converge.StateFailure
}

// finishBehind gives their verdict to the first parents of applied that
// are recorded pending: an Advance whose term (or process) ended after
// Apply recorded the newest revision of its batch, before the older
// ones were told they were superseded, left them so (Advance records
// them pending first), and no later Advance looks behind the applied
// revision. The walk stops at the first commit that is absent or has a
// final verdict, or after maxBacklog.
func (s *Syncer) finishBehind(ctx context.Context, applied converge.Revision) error {
	rev := applied
	for range maxBacklog {
		p, ok, err := s.Source.FirstParent(rev)
		if err != nil || !ok {
			return nil // a root commit, or history this clone lacks: nothing behind
		}
		rec, err := s.Records.Revision(ctx, p.Hash)
		if errors.Is(err, converge.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the verdict of %.7s: %w", p.Hash, err)
		}
		if st, ok := rec.Status(converge.ContextSync); !ok || st.State != converge.StatePending {
			return nil
		}
		// One applied before (its term lost too) was replaced before it
		// converged, as the follow loop would have told it.
		desc := fmt.Sprintf("superseded by %.7s before it converged", applied.Hash)
		if !rec.Applied {
			desc = fmt.Sprintf("superseded by %.7s before it was applied", applied.Hash)
			rec.Held = "superseded"
		}
		rec.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StateSuccess, Description: desc, Time: s.now()})
		if err := s.Records.PutRevision(ctx, rec); err != nil {
			return err
		}
		rev = p
	}
	return nil
}
