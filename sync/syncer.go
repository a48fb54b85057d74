package sync

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/scheduler"
)

// Applier is the engine side a sync feeds: the scheduler. A revision is
// priced against the engine's own graph (Diff, Graph), never a second
// copy of it loaded from the store.
type Applier interface {
	Apply(ctx context.Context, d *converge.Desired, v scheduler.Validator) (*scheduler.Plan, error)
	// Diff returns what Apply(d) would do, changing nothing.
	Diff(ctx context.Context, d *converge.Desired) (*scheduler.Plan, error)
	// Graph is the engine's resource graph, which the dry-run composes
	// (scheduler.Fanout) and the prune guard (scheduler.Weigh) read.
	Graph() scheduler.Graph
}

// Records keeps what converge concluded about each revision, and what is
// applied: the state store.
type Records interface {
	PutRevision(ctx context.Context, rec *converge.RevisionRecord) error
	Revision(ctx context.Context, hash string) (*converge.RevisionRecord, error)
	Applied(ctx context.Context) (*converge.Revision, error)
	// Kinds returns the stored kinds (what live resources were applied
	// under), for apply-time lint.
	Kinds(ctx context.Context) ([]*converge.Kind, error)
	// PutSource records where the applied revision came from.
	PutSource(ctx context.Context, src *converge.AppliedSource) error
}

// LintFunc compares two sets of kinds and returns the breaking changes
// (cue.LintTrees). The trees the kinds were loaded from give findings
// field-level positions; either may be nil (the store has no tree).
type LintFunc func(old, new []*converge.Kind, oldTree, newTree fs.FS) []converge.Finding

// Syncer processes the newest revision of a Source: it loads and validates
// the documents below Path and, when they are valid, applies them.
type Syncer struct {
	Source  *Source
	Path    string
	Records Records
	Engine  Applier
	Load    cue.Options
	// Lint, when set, refuses breaking schema changes: each revision is
	// linted against its parent, and against the kinds in the store (what
	// live resources were applied under) before it is applied.
	Lint LintFunc
	// Compose, when set, dry-runs the composers a revision changes, so
	// the prune guard counts the children their recompose would prune
	// (scheduler.Fanout). Without it the guard counts documents only.
	Compose scheduler.ComposeFunc
	// ComposeTimeout bounds those dry runs (default 3m).
	ComposeTimeout time.Duration
	// Signatures, when set, applies only commits signed by a key it
	// lists: any other (unsigned, an unknown key, a signature that does
	// not verify, the uncommitted work tree) is held, its verdict naming
	// why, and the last good revision stays applied.
	Signatures *SignaturePolicy
	// OverrideChangeLimit applies a revision past the change limit
	// (ChangeGuard) and records that OverrideBy asked for it ("sync
	// --override-change-limit"), as a commit's Converge-Override trailer
	// does.
	OverrideChangeLimit bool
	OverrideBy          string
	// LoadTimeout bounds loading one revision's documents (0:
	// DefaultLoadTimeout). A load that takes longer is abandoned: the
	// revision is not applied, and its verdict says why.
	LoadTimeout time.Duration
	// Sandbox, when set, evaluates the documents in a child process
	// under its budget (a file over it is a finding: the revision is
	// invalid, and whatever was applied stays applied) and kills it at
	// LoadTimeout or when ctx ends. Without it documents are evaluated
	// in this process, and a load abandoned at LoadTimeout runs on.
	Sandbox *cue.Sandbox
	// Control, when set, is where Advance reads the pin (converge
	// rollback): while one is set Advance applies the pinned revision
	// instead of the branch head.
	Control ControlReader
	Now     func() time.Time
	Log     *slog.Logger

	// last is the newest revision Advance has processed, lastKinds the
	// kinds of the newest valid one (what the next commit is linted
	// against).
	last      string
	lastKinds []*converge.Kind
	lastTree  fs.FS
	// checked caches the newest Check, so a caller that checked a
	// revision before starting the engine does not load it twice.
	checked *Pass
	// loading lets one load of documents run at a time, an abandoned
	// one included (CUE cannot be interrupted).
	loading gate
	// passedOver holds the commits Advance gave up loading (timed out)
	// while a newer one followed: they are not loaded again, so a slow
	// document never holds up the commit that fixes it.
	passedOver map[string]bool
	// wasPinned says the newest Advance held a pin: once unpinned, the
	// head alone is judged (the commits the pin held back were judged
	// before it, or are superseded by the head).
	wasPinned bool
	// toldPinned is the newest head Advance told it waits for an unpin.
	toldPinned string
}

// Pass is one revision's verdict: what Check loaded and found, and what
// Apply (or Advance) did with it.
type Pass struct {
	Revision converge.Revision
	Record   *converge.RevisionRecord
	// Loaded is the revision's documents.
	Loaded *cue.Result
	// Plan is what Apply changed; nil unless Applied. It lists the
	// documents' changes only: what composers change follows from their
	// composes.
	Plan *scheduler.Plan
	// Priced is what Apply priced before it applied (the prune guard's
	// plan): Plan plus, through the dry-run composes (Syncer.Compose),
	// the children the changed composers create, update, flip and prune,
	// as converge plan lists them. Fresh says the engine held nothing
	// before, so there was nothing to price against (no dry run): every
	// resource it holds once the revision settles was created by it.
	Priced  *scheduler.Plan
	Fresh   bool
	Applied bool
	// Tree is the revision's documents (below the Syncer's Path).
	Tree fs.FS
	// Held is why a valid revision was not applied (breaking change
	// against the store, prune guard), or "".
	Held string
}

// Valid reports whether the revision's documents validated.
func (p *Pass) Valid() bool { return p.Record != nil && len(p.Record.Errors) == 0 }

// Check loads and validates rev's documents and sets its
// converge/validate status. It changes nothing else: a revision with
// errors is not applied, and whatever was applied before stays applied.
func (s *Syncer) Check(rev converge.Revision) (*Pass, error) {
	return s.CheckContext(context.Background(), rev)
}

// CheckContext is Check, giving up when ctx is done (its error) or when
// the load takes longer than LoadTimeout (an error wrapping ErrTimeout).
// An abandoned load runs on in the background until CUE is done with it;
// the next load waits for it.
func (s *Syncer) CheckContext(ctx context.Context, rev converge.Revision) (*Pass, error) {
	if c := s.checked; c != nil && c.Revision.Hash == rev.Hash && !c.Applied {
		return c, nil
	}
	now := s.now()
	rec := &converge.RevisionRecord{Revision: rev, Seen: now}
	if s.Records != nil {
		if old, err := s.Records.Revision(ctx, rev.Hash); err == nil && old != nil {
			rec = old
		}
	}
	pass := &Pass{Revision: rev, Record: rec}
	fsys, err := s.Source.FS(rev, s.Path)
	if err != nil {
		return nil, err
	}
	return s.checkFS(ctx, pass, fsys)
}

// CheckWorkTree loads and validates the uncommitted documents of the local
// work tree (dev mode: `sync --watch`). The revision is labelled dirty;
// its hash names the moment it was read. It gives up as CheckContext does.
func (s *Syncer) CheckWorkTree(ctx context.Context) (*Pass, error) {
	root := s.Source.Root()
	if root == "" {
		return nil, fmt.Errorf("check work tree: %s has no work tree", s.Source.URL())
	}
	now := s.now()
	rev := converge.Revision{Ref: s.Source.Ref(), Dirty: true, Time: now,
		Hash: fmt.Sprintf("dirty-%d", now.UnixNano()), Subject: "uncommitted work tree"}
	pass := &Pass{Revision: rev, Record: &converge.RevisionRecord{Revision: rev, Seen: now}}
	return s.checkFS(ctx, pass, os.DirFS(filepath.Join(root, filepath.FromSlash(s.Path))))
}

func (s *Syncer) checkFS(ctx context.Context, pass *Pass, fsys fs.FS) (*Pass, error) {
	rev, rec := pass.Revision, pass.Record
	pass.Tree = fsys
	d := s.LoadTimeout
	if d <= 0 {
		d = DefaultLoadTimeout
	}
	opts := s.Load
	if s.Log != nil {
		s.Log.Debug("loading documents", "revision", rev.String(), "timeout", d)
	}
	res, err := bounded(ctx, &s.loading, d, "load "+rev.String(), "--load-timeout, load_timeout in converge.cue",
		func(ctx context.Context) (*cue.Result, error) {
			if s.Sandbox != nil {
				return s.Sandbox.Load(ctx, fsys, ".", opts)
			}
			return cue.Load(fsys, ".", opts)
		})
	if errors.Is(err, ErrTimeout) || errors.Is(err, ctx.Err()) && ctx.Err() != nil {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", rev, err)
	}
	now := s.now()
	pass.Loaded = res
	rec.Errors = res.Findings
	if len(res.Findings) > 0 {
		rec.SetStatus(converge.CommitStatus{Context: converge.ContextValidate, State: converge.StateFailure,
			Description: fmt.Sprintf("%s: %s", converge.Plural(len(res.Findings), "error"), res.Findings[0]), Time: now})
		rec.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StateFailure,
			Description: "not applied: invalid documents", Time: now})
		return pass, nil
	}
	rec.SetStatus(converge.CommitStatus{Context: converge.ContextValidate, State: converge.StateSuccess,
		Description: converge.Plural(res.Documents, "document") + " valid", Time: now})
	s.checked = pass
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
	if s.Signatures != nil {
		if pass.Revision.Dirty {
			return s.hold(ctx, pass, "not signed: the uncommitted work tree is no signed commit, and only signed commits are applied")
		}
		who, err := s.Source.VerifyCommit(pass.Revision.Hash, s.Signatures)
		if errors.Is(err, ErrUnsigned) || errors.Is(err, ErrUntrusted) {
			return s.hold(ctx, pass, "not signed by an allowed key: "+err.Error())
		}
		if err != nil {
			return fmt.Errorf("verify %s: %w", pass.Revision, err)
		}
		if s.Log != nil {
			s.Log.Info("signature verified", "revision", pass.Revision.String(), "signer", who)
		}
	}
	if s.Lint != nil {
		stored, err := s.Records.Kinds(ctx)
		if err != nil {
			return fmt.Errorf("list kinds: %w", err)
		}
		if findings := s.Lint(stored, d.Kinds, nil, pass.Tree); len(findings) > 0 {
			rec.Findings = appendFindings(rec.Findings, findings)
			rec.SetStatus(converge.CommitStatus{Context: converge.ContextLint, State: converge.StateFailure,
				Description: "breaking against the applied schemas: " + findings[0].Path + ": " + findings[0].Rule, Time: now})
			return s.hold(ctx, pass, fmt.Sprintf("%d breaking changes against the schemas live resources were applied under", len(findings)))
		}
		if _, ok := rec.Status(converge.ContextLint); !ok {
			rec.SetStatus(converge.CommitStatus{Context: converge.ContextLint, State: converge.StateSuccess,
				Description: "no breaking schema changes", Time: now})
		}
	}
	// The plan and the guard read the engine's graph in place: loading
	// the store again would copy every resource on every revision.
	guarded, err := s.Engine.Diff(ctx, &d)
	if err != nil {
		return fmt.Errorf("diff %s: %w", pass.Revision, err)
	}
	g := s.Engine.Graph()
	var stored int
	if err := g.Read(ctx, func(v scheduler.GraphView) { stored = v.Len() }); err != nil {
		return fmt.Errorf("read graph: %w", err)
	}
	// An empty engine has nothing to prune, and a dry run of a big
	// composer costs as much as its compose: it is priced only when a
	// change limit asks how much the revision changes.
	fanout := s.Compose != nil && (stored > 0 || d.Settings.ChangeLimit > 0)
	if fanout {
		timeout := s.ComposeTimeout
		if timeout <= 0 {
			// A dry run of a million-child composer answered in full
			// (the first after a worker upgrade) takes a minute on a
			// busy machine; a hung worker is cut at its dry-run
			// deadline (2m) first.
			timeout = 3 * time.Minute
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		scheduler.Fanout(cctx, g, &d, guarded, pass.Loaded.Schemas, s.Compose)
		cancel()
	}
	pass.Priced, pass.Fresh = guarded, stored == 0 && !fanout
	w, err := scheduler.Weigh(ctx, g, guarded)
	if err != nil {
		return fmt.Errorf("weigh %s: %w", pass.Revision, err)
	}
	if held := PruneGuardWeight(w, guarded, d.Settings); held != "" {
		return s.hold(ctx, pass, held)
	}
	if held := ChangeGuard(w, guarded, d.Settings); held != "" {
		by := s.overrideBy(pass.Revision, OverrideChangeLimit)
		if by == "" {
			return s.hold(ctx, pass, held)
		}
		rec.Override = overrideText(by, Changed(w, guarded), d.Settings.ChangeLimit)
		if s.Log != nil {
			s.Log.Warn("applying past the change limit", "revision", pass.Revision.String(), "override", rec.Override)
		}
	}
	// The record as applied goes to the store with the revision made
	// applied, in one write (Desired.Record): a term or process that ends
	// after it leaves both, one that ends before it neither.
	applied := rec.Clone()
	applied.Applied = true
	applied.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StatePending,
		Description: withOverride("applied, converging", rec), Time: now})
	d.Record = applied
	// Once handed over, an apply runs to its end even if ctx is cancelled
	// (a shutdown): recording it as failed while the engine applied it
	// would leave a false verdict behind for good.
	plan, err := s.Engine.Apply(context.WithoutCancel(ctx), &d, pass.Loaded.Schemas)
	if err != nil {
		// Not a verdict: the engine fails an apply only when the store
		// or its loop does (never for a resource), and its batch may
		// still land (the scheduler commits it again; on etcd a journal
		// past its commit point is replayed). The revision stays pending,
		// and Advance applies it again at its next pass.
		rec.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StatePending,
			Description: "apply: " + err.Error() + "; tried again at the next pass", Time: now})
		return errors.Join(fmt.Errorf("apply %s: %w", pass.Revision, err), s.Records.PutRevision(ctx, rec))
	}
	*rec = *applied
	pass.Plan, pass.Applied = plan, true
	// Stored already, with the revision; written again for what wraps
	// the store (the git note, the forge: Statuses.Records), and for an
	// engine that does not store Desired.Record.
	err = s.Records.PutRevision(ctx, rec)
	if src := s.appliedSource(pass); src != nil {
		err = errors.Join(err, s.Records.PutSource(ctx, src))
	}
	return err
}

// appliedSource describes where pass's applied revision came from, or
// returns nil for a local bare repository (it has no path to record).
func (s *Syncer) appliedSource(pass *Pass) *converge.AppliedSource {
	if s.Source.Root() == "" && !s.Source.Remote() {
		return nil
	}
	src := &converge.AppliedSource{Repo: s.Source.Root(), Path: s.Path, Ref: s.Source.Ref(),
		Revision: pass.Revision, Workers: pass.Loaded.Desired.Settings.Workers, Declared: len(pass.Loaded.Desired.Resources),
		ResyncInterval: pass.Loaded.Desired.Settings.ResyncInterval}
	if s.Source.Remote() {
		src.Repo, src.Remote = s.Source.URL(), true
	}
	return src
}

// hold records that pass's valid revision is not applied, and why.
func (s *Syncer) hold(ctx context.Context, pass *Pass, why string) error {
	pass.Held = why
	pass.Record.Held = why
	pass.Record.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: converge.StateFailure,
		Description: "not applied: " + why, Time: s.now()})
	return s.Records.PutRevision(ctx, pass.Record)
}

// appendFindings adds fs to have, skipping ones already there.
func appendFindings(have, fs []converge.Finding) []converge.Finding {
	seen := make(map[converge.Finding]bool, len(have))
	for _, f := range have {
		seen[f] = true
	}
	for _, f := range fs {
		if !seen[f] {
			have = append(have, f)
			seen[f] = true
		}
	}
	return have
}

// overrideBy names who asked to apply rev past guard: its commit's
// Converge-Override trailer (with the commit's author), or the Syncer's
// OverrideBy; "" when nobody did.
func (s *Syncer) overrideBy(rev converge.Revision, guard string) string {
	if guard == OverrideChangeLimit && s.OverrideChangeLimit {
		return s.OverrideBy
	}
	if rev.Dirty {
		return ""
	}
	msg, author, err := s.Source.Message(rev.Hash)
	if err != nil {
		return ""
	}
	for _, o := range Overrides(msg) {
		if o == guard {
			return fmt.Sprintf("the commit's %s: %s trailer (author %s)", OverrideTrailer, guard, author)
		}
	}
	return ""
}

// ChangeOverride names who asks to apply rev past the change limit (see
// ChangeGuard), or "": what plan tells a reviewer.
func (s *Syncer) ChangeOverride(rev converge.Revision) string {
	return s.overrideBy(rev, OverrideChangeLimit)
}

func overrideText(by string, changed, limit int) string {
	return fmt.Sprintf("change limit overridden by %s: %s changes > change_limit %s", by, Thousands(changed), Thousands(limit))
}

// withOverride is a converge/sync description, saying which guard the
// revision was applied past when it was.
func withOverride(desc string, rec *converge.RevisionRecord) string {
	if rec.Override == "" {
		return desc
	}
	return desc + " (" + rec.Override + ")"
}

// SetSyncStatus records the converge/sync verdict on pass's revision.
func (s *Syncer) SetSyncStatus(ctx context.Context, pass *Pass, state, description string) error {
	pass.Record.SetStatus(converge.CommitStatus{Context: converge.ContextSync, State: state,
		Description: withOverride(description, pass.Record), Time: s.now()})
	return s.Records.PutRevision(ctx, pass.Record)
}

func (s *Syncer) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now().UTC()
}
