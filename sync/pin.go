package sync

import (
	"context"
	"fmt"
	"sort"

	"github.com/convergehq/converge"
)

// ControlReader reads the operator's pin and suspensions: the store.
type ControlReader interface {
	Control(ctx context.Context) (*converge.Control, error)
}

// Target returns the revision a sync applies: the pinned one when c pins
// one (converge rollback), else the head of the followed branch.
func Target(src *Source, c *converge.Control) (rev converge.Revision, pinned bool, err error) {
	if c != nil && c.Pin != nil {
		rev, err := src.Revision(c.Pin.Revision.Hash)
		if err != nil {
			return converge.Revision{}, true, fmt.Errorf("resolve pinned revision %s: %w", c.Pin.Revision, err)
		}
		return rev, true, nil
	}
	rev, err = src.Head()
	return rev, false, err
}

// CheckPin checks that rev may be pinned (rolled back to): its documents
// are valid, and lint finds no breaking change between the kinds live
// resources were applied under (stored) and rev's, as Apply's
// apply-time lint would hold it. It returns the checked pass, or an
// error saying why rev may not be pinned.
func (s *Syncer) CheckPin(ctx context.Context, rev converge.Revision, stored []*converge.Kind) (*Pass, error) {
	pass, err := s.CheckContext(ctx, rev)
	if err != nil {
		return nil, err
	}
	if !pass.Valid() {
		return pass, fmt.Errorf("pin %s: revision is invalid (%s): %s", rev, converge.Plural(len(pass.Record.Errors), "error"), pass.Record.Errors[0])
	}
	if s.Lint != nil {
		if fs := s.Lint(stored, pass.Loaded.Desired.Kinds, nil, pass.Tree); len(fs) > 0 {
			return pass, fmt.Errorf("pin %s: not valid under today's kinds (%s against the schemas live resources were applied under): %s",
				rev, converge.Plural(len(fs), "breaking change"), fs[0])
		}
	}
	return pass, nil
}

// PreviousGood returns the revision to roll back to when none is named:
// the newest committed revision other than applied that was applied and
// converged (its converge/sync status a success), or false.
func PreviousGood(recs []*converge.RevisionRecord, applied string) (converge.Revision, bool) {
	recs = append([]*converge.RevisionRecord(nil), recs...)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Seen.After(recs[j].Seen) })
	for _, r := range recs {
		if r.Revision.Hash == applied || r.Revision.Dirty || !r.Applied {
			continue
		}
		if st, ok := r.Status(converge.ContextSync); ok && st.State == converge.StateSuccess {
			return r.Revision, true
		}
	}
	return converge.Revision{}, false
}

// pinned returns the pin the Syncer's Control records, or nil.
func (s *Syncer) pinned(ctx context.Context) (*converge.Pin, error) {
	if s.Control == nil {
		return nil, nil
	}
	c, err := s.Control.Control(ctx)
	if err != nil {
		return nil, err
	}
	return c.Pin, nil
}

// Pinned returns the revision Advance holds (converge rollback), or nil
// when it follows the branch head.
func (s *Syncer) Pinned(ctx context.Context) *converge.Pin {
	p, _ := s.pinned(ctx)
	return p
}

// advancePinned is Advance while pin holds: the pinned revision is
// applied (once) and the branch's new commits wait until it is unpinned.
// The newest of them is checked and told so (its converge/sync verdict
// pending, "not applied: pinned to …"), so a pushed commit never goes
// without a verdict.
func (s *Syncer) advancePinned(ctx context.Context, pin *converge.Pin) ([]*Pass, error) {
	s.wasPinned = true
	if pin.Revision.Hash == s.last {
		return s.tellPinned(ctx, pin, nil)
	}
	rev, err := s.Source.Revision(pin.Revision.Hash)
	if err != nil {
		return nil, fmt.Errorf("resolve pinned revision %s: %w", pin.Revision, err)
	}
	pass, err := s.CheckContext(ctx, rev)
	if err != nil {
		return nil, err
	}
	if s.Log != nil {
		s.Log.Info("pinned: applying the pinned revision instead of the branch head", "revision", rev.String(), "by", pin.By)
	}
	if pass.Valid() {
		if err := s.Apply(ctx, pass); err != nil {
			return []*Pass{pass}, err
		}
		s.lastKinds, s.lastTree = pass.Loaded.Desired.Kinds, pass.Tree
	} else if err := s.Records.PutRevision(ctx, pass.Record); err != nil {
		return []*Pass{pass}, err
	}
	s.last = rev.Hash
	return s.tellPinned(ctx, pin, []*Pass{pass})
}

// tellPinned gives the branch head, when it is neither the pinned
// revision nor told before, its verdict while pin holds: checked
// (validate, lint against the pinned revision), and not applied, pending
// until converge unpin. It returns passes with the head's pass added.
func (s *Syncer) tellPinned(ctx context.Context, pin *converge.Pin, passes []*Pass) ([]*Pass, error) {
	head, err := s.Source.Head()
	if err != nil || head.Hash == pin.Revision.Hash || head.Hash == s.toldPinned {
		return passes, err
	}
	pass, err := s.CheckContext(ctx, head)
	if err != nil {
		return passes, err
	}
	if s.Lint != nil && pass.Valid() && s.lastKinds != nil {
		s.lintParent(pass, s.lastKinds, s.lastTree)
	}
	if pass.Valid() && !breaking(pass.Record) {
		by := ""
		if pin.By != "" {
			by = " by " + pin.By
		}
		why := fmt.Sprintf("not applied: pinned to %.7s%s; converge unpin applies the head", pin.Revision.Hash, by)
		pass.Record.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StatePending, Description: why, Time: s.now()})
		pass.Record.Held = "pinned"
		pass.Held = why
	}
	if err := s.Records.PutRevision(ctx, pass.Record); err != nil {
		return passes, err
	}
	s.toldPinned = head.Hash
	return append(passes, pass), nil
}
