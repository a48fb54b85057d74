package scheduler

import (
	"context"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/convergehq/converge"
)

// cascade marks the teardown tree of roots: the roots, everything they
// own (transitively) and everything that consumes any of those (and what
// that owns). Marked resources are torn down in reverse dependency order
// by considerTeardown. It returns the marked resources.
func (s *Scheduler) cascade(roots []*node, reason string) []*node {
	marked := make(map[*node]bool, len(roots))
	q := make([]*node, 0, len(roots))
	for _, n := range roots {
		if !marked[n] {
			marked[n] = true
			q = append(q, n)
		}
	}
	for i := 0; i < len(q); i++ {
		n := q[i]
		for _, c := range n.kids() {
			if !marked[c] {
				marked[c] = true
				q = append(q, c)
			}
		}
		for _, e := range n.adj.cons() {
			if c := s.graph.nodes[e.Consumer]; c != nil && !marked[c] {
				marked[c] = true
				q = append(q, c)
			}
		}
	}
	for _, n := range q {
		if n.deleting() {
			continue
		}
		s.markDeleting(n, reason)
		n.pack() // a million teardowns wait packed, not decoded
	}
	// Teardowns start in key order (children are a map, so q is not):
	// each kind's are then dispatched, answered and their rows deleted
	// roughly in key order, so a batch of deletions touches neighbouring
	// keys, a few owner-index chunks and pages, not most of a big
	// owner's index (the 1M cascade rewrote most of the root's chunks
	// in every batch).
	slices.SortFunc(q, func(a, b *node) int { return strings.Compare(string(a.id), string(b.id)) })
	for _, n := range q {
		s.lease.enqueue(n)
	}
	return q
}

// markDeleting puts n in Deleting; any in-flight task of n is forgotten.
func (s *Scheduler) markDeleting(n *node, reason string) {
	r := n.res()
	if r.Lease != nil {
		s.dropTask(r.Lease.TaskID)
		r.Lease = nil
	}
	s.lease.endBackoff(n)
	if n.is(stateParked) {
		n.to(stateFree) // stays in s.lease.parked until the next Changed: harmless
	}
	n.unset(mResync)
	s.lease.dropResync(n)
	r.Deleting = true
	r.DeletedAt = s.now
	r.Attempts = 0
	r.LastError = ""
	r.NextAttempt = timeZero
	r.Reason = "deleting: " + reason
	s.setPhase(n, converge.PhaseDeleting)
	s.markDirty(n)
}

// considerTeardown tears n down once nothing marked consumes it and none
// of its children remain.
func (s *Scheduler) considerTeardown(n *node) {
	r := n.res()
	if r.Lease != nil || n.is(stateBackoff) || n.has(mStuck) {
		return
	}
	if len(n.kids()) > 0 || s.graph.hasLiveConsumer(n) {
		s.batch.markReason(n, s.now)
		return
	}
	k := n.rs.kind
	if k != nil && k.Finalizer && k.Has(converge.ReactionTeardown) {
		s.dispatchNode(n, converge.ReactionTeardown, taskTeardown)
		if n.res().Lease != nil {
			reason := "tearing down"
			if r.Attempts > 0 {
				reason += " (attempt " + strconv.Itoa(r.Attempts+1) + ", last error: " + r.LastError + ")"
			}
			s.setReason(n, reason)
		}
		return
	}
	s.remove(n)
}

// teardownResult handles the result of n's teardown task.
func (s *Scheduler) teardownResult(n *node, res *converge.Result) {
	switch res.Outcome {
	case converge.OutcomeOK:
		s.remove(n)
	case converge.OutcomePermanent:
		s.failPermanent(n, "teardown: "+res.Message)
	default:
		msg := res.Message
		if msg == "" {
			msg = "transient error"
		}
		s.failTransient(n, msg)
	}
}

// blockersChanged refreshes the waiting reasons of those whose teardown
// waits for n.
func (s *Scheduler) blockersChanged(n *node) {
	if n.owner != nil && n.owner.deleting() {
		s.batch.markReason(n.owner, s.now)
	}
	for _, e := range n.adj.prod() {
		if p := s.graph.nodes[e.Producer]; p != nil && p.deleting() {
			s.batch.markReason(p, s.now)
		}
	}
}

// remove deletes n's row and edges, emits the deleted transition and
// wakes what waited for it.
func (s *Scheduler) remove(n *node) {
	r := n.res()
	if r.Lease != nil {
		s.dropTask(r.Lease.TaskID)
		r.Lease = nil
	}
	s.lease.endBackoff(n)
	s.fire(n, converge.TransitionDeleted)
	s.graph.subCounted(n)
	n.to(stateRemoved)
	s.recount(n)
	if n.refusals > 0 {
		s.batch.refused--
	}
	s.graph.drop(n)
	if n.has(mDirty) {
		s.batch.goneQueued++
	}
	if s.graph.gitRoots[n.id] == n {
		delete(s.graph.gitRoots, n.id)
	}
	s.batch.delRes[n.id] = true
	s.batch.delOrder = append(s.batch.delOrder, n.id)
	s.batch.armFlush(s.now)
	n.rs.count--
	s.retireCheck(r.Ref())
	var wake, wakeC []*node
	for _, e := range append([]*converge.Edge(nil), s.graph.producersOf(n.id)...) {
		s.graph.removeEdge(e)
		s.batch.delEdge(e, s.now)
		if p := s.graph.nodes[e.Producer]; p != nil {
			wake = append(wake, p)
		}
	}
	// Edges others consume from n stay: every consumer that was torn down
	// with n is gone already (reverse dependency order), so these are
	// live consumers that want n again; they stay gated on it until the
	// owner's recompose re-creates it.
	for _, e := range s.graph.consumersOf(n.id) {
		if c := s.graph.nodes[e.Consumer]; c != nil {
			wakeC = append(wakeC, c)
		}
	}
	if o := n.owner; o != nil {
		o.disown(n)
		wake = append(wake, o)
		s.ownerChanged(o)
	}
	s.event(n.id, "Deleted", "deleted")
	for _, w := range wake {
		s.lease.enqueue(w)
	}
	for _, c := range wakeC {
		s.lease.enqueue(c) // to say what it waits for now
	}
	if o := n.owner; o != nil && !o.is(stateRemoved) && !o.deleting() {
		if n.has(mRecomposeOwner) {
			o.set(mRecomposeOwed)
			s.forgetComposition(o)
		}
		s.recomposeIfOwed(o)
	}
	if nr := s.graph.recreate[n]; nr != nil {
		delete(s.graph.recreate, n)
		if s.graph.nodes[n.id] == nil {
			s.setGitEdges(s.addNode(nr, nr.ID(), nil, "created from "+nr.Source))
		}
	}
	// A removed node stays referenced a while (a list of pending writes
	// drains MaxCommit rows a commit; a cascade of a million marked them
	// all): it keeps its row packed, not decoded.
	if n.r != nil && n.sub == nil && ownerLinked(n) {
		n.packNow()
	}
}

// recomposeIfOwed recomposes o once none of its descendants is being torn
// down, if a child it still wants was removed (recomposeOwner). The
// recompose is a new generation: it is written in the batch that removes
// the child's row, so a restart cannot lose it. Waiting for the whole
// teardown keeps a re-created consumer from holding up the teardown of
// its producer.
func (s *Scheduler) recomposeIfOwed(o *node) {
	if !o.has(mRecomposeOwed) || o.tree().counts.Deleting > 0 {
		return
	}
	o.unset(mRecomposeOwed)
	s.event(o.id, "Recompose", "a child it composes was deleted")
	s.bumpGeneration(o)
}

// retireCheck drops a kind that left the desired state once its last
// resource is gone.
func (s *Scheduler) retireCheck(ref converge.KindRef) {
	if !s.retiring[ref] || s.refState(ref).count > 0 {
		return
	}
	delete(s.retiring, ref)
	delete(s.kinds, ref)
	s.secrets = nil
	s.refreshKind(s.refState(ref))
	s.batch.meta.DeletedKinds = append(s.batch.meta.DeletedKinds, ref)
	s.batch.armFlush(s.now)
}

// problems lists non-Ready resources, most severe first.
func (s *Scheduler) problems() []Problem {
	type ranked struct {
		p    Problem
		rank int
	}
	var out []ranked
	for _, n := range s.graph.nodes {
		if p, rank, ok := s.problemOf(n); ok {
			out = append(out, ranked{p, rank})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].rank != out[j].rank {
			return out[i].rank < out[j].rank
		}
		return out[i].p.ID < out[j].p.ID
	})
	if len(out) > maxProblems {
		out = out[:maxProblems]
	}
	ps := make([]Problem, len(out))
	for i := range out {
		ps[i] = out[i].p
	}
	return ps
}

// problemOf says what keeps n from Ready and how severe it is (0 most),
// or ok false when n is Ready.
func (s *Scheduler) problemOf(n *node) (p Problem, rank int, ok bool) {
	if n.readyAtGeneration() && n.r == nil {
		return p, 0, false // packed: Ready
	}
	r := n.peek()
	if r.Phase == converge.PhaseReady {
		return p, 0, false
	}
	p = Problem{ID: n.id, Phase: r.Phase, Reason: r.Reason}
	rank = 5
	switch {
	case r.Deleting && n.has(mStuck):
		rank, p.Permanent = 0, true
	case permanent(r):
		rank, p.Permanent = 0, true
	case n.is(stateParked):
		rank, p.Permanent, p.Unserved = 1, true, r.Ref()
	case r.Deleting && r.Attempts > 0:
		rank = 2
	case r.Phase == converge.PhaseFailed:
		rank = 2
	case r.Deleting:
		rank = 3
		if len(n.kids()) > 0 || s.graph.hasLiveConsumer(n) {
			p.Reason = s.graph.teardownReason(n, s.now)
		}
	case r.Phase == converge.PhaseRunning:
		rank = 6
	}
	return p, rank, true
}

// ProblemGroup is the resources that are not Ready for one reason, told
// apart only by the resource names in it ("waiting for vpc/a" and
// "waiting for vpc/b" are one group).
type ProblemGroup struct {
	Phase converge.Phase
	// Reason is the first member's reason; Pattern is it with every
	// KIND/NAME in it written KIND/….
	Reason, Pattern string
	Permanent       bool
	// Count is how many resources the group has; IDs are the first of
	// them by ID, at most the maxIDs ProblemGroups was asked for.
	Count int
	IDs   []converge.ID
}

// ProblemGroups groups every resource that is not Ready by phase and
// reason pattern, most severe group first (then the biggest), each with
// its first maxIDs members.
func (s *Scheduler) ProblemGroups(maxIDs int) []ProblemGroup {
	var out []ProblemGroup
	_ = s.exec(context.Background(), func(s *Scheduler) { out = s.problemGroups(maxIDs) })
	return out
}

func (s *Scheduler) problemGroups(maxIDs int) []ProblemGroup {
	type group struct {
		g    ProblemGroup
		rank int
		ids  []converge.ID
	}
	byKey := map[string]*group{}
	var gs []*group
	for _, n := range s.graph.nodes {
		p, rank, ok := s.problemOf(n)
		if !ok {
			continue
		}
		pat := reasonPattern(p.Reason)
		key := string(p.Phase) + "\x00" + pat
		g := byKey[key]
		if g == nil {
			g = &group{g: ProblemGroup{Phase: p.Phase, Pattern: pat}, rank: rank}
			byKey[key] = g
			gs = append(gs, g)
		}
		g.g.Count++
		g.rank = min(g.rank, rank)
		g.g.Permanent = g.g.Permanent || p.Permanent
		g.ids = append(g.ids, p.ID)
	}
	sort.Slice(gs, func(i, j int) bool {
		if gs[i].rank != gs[j].rank {
			return gs[i].rank < gs[j].rank
		}
		if gs[i].g.Count != gs[j].g.Count {
			return gs[i].g.Count > gs[j].g.Count
		}
		return gs[i].g.Pattern < gs[j].g.Pattern
	})
	out := make([]ProblemGroup, len(gs))
	for i, g := range gs {
		slices.Sort(g.ids)
		g.g.IDs = slices.Clone(g.ids[:min(max(maxIDs, 0), len(g.ids))])
		if p, _, ok := s.problemOf(s.graph.nodes[g.ids[0]]); ok {
			g.g.Reason = p.Reason
		}
		out[i] = g.g
	}
	return out
}

// reasonPattern writes every KIND/NAME in a reason as KIND/…, and every
// duration as …, so that reasons differing only in the resources they
// name or in a backoff's length ("retrying in 25s", "retrying in 6.7s")
// group together.
func reasonPattern(reason string) string {
	return durationInReason.ReplaceAllString(idInReason.ReplaceAllString(reason, "$1/…"), "…")
}

// durationInReason matches a duration as time.Duration prints it
// ("644ms", "6.7s", "1m2.5s").
var durationInReason = regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|us|ms|s|m|h)(\d+(\.\d+)?(ns|µs|us|ms|s|m|h))*\b`)

var idInReason = regexp.MustCompile(`\b([a-z][a-z0-9-]*)/[A-Za-z0-9][A-Za-z0-9._-]*`)

var timeZero time.Time
