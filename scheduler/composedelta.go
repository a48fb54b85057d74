package scheduler

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/convergehq/converge"
)

// Incremental composition: a compose task carries the spec of the
// composition the composer's children are now (its base) and the
// revision of the worker that composed it (Resource.ComposedBy). A
// worker of that revision may answer with only what changed
// (Result.Delta), which is applied here without touching the children
// it leaves out. See docs/ARCHITECTURE.md, "Incremental composition".

// composeContext names what a compose of a given spec depends on besides
// the worker's code: the kind version served and the provider config. A
// base is only good in the context it was composed in.
func composeContext(kindVersion int, config []byte) string {
	c := "none"
	if len(config) > 0 {
		sum := sha256.Sum256(config)
		c = hex.EncodeToString(sum[:8])
	}
	return "v" + itoa(int64(kindVersion)) + ":" + c
}

// composeBase returns the base spec and revision to send with n's
// compose in the context config (composeContext), or nils.
func (s *Scheduler) composeBase(n *node, config string) ([]byte, string) {
	if n.sub == nil || n.sub.composedSpec == nil || n.res().Rollout != nil {
		// A composer with a rollout composes in full: while a wave
		// holds children back they are not its composition.
		return nil, ""
	}
	rev, cfg, ok := strings.Cut(n.res().ComposedBy, " ")
	if !ok || rev == "" || cfg != config {
		return nil, ""
	}
	return n.sub.composedSpec, rev
}

// forgetComposition records that o's children are no longer exactly its
// last composition (a child was deleted by an operator, or a compose was
// applied only in part): its next compose is answered in full.
func (s *Scheduler) forgetComposition(o *node) {
	if o.sub != nil {
		o.sub.composedSpec = nil
		o.sub.composedNKnown = false
	}
	if o.res().ComposedBy != "" {
		o.res().ComposedBy = ""
		s.markDirty(o)
	}
}

// recordComposition records that n's children are now exactly the
// composition of its current spec by a worker of revision rev in the
// context config (rev empty: a worker that answers no deltas).
func (s *Scheduler) recordComposition(n *node, rev, config string) {
	if rev == "" || strings.ContainsRune(rev, ' ') {
		s.forgetComposition(n)
		return
	}
	n.tree().composedSpec = n.res().Spec
	if by := rev + " " + config; n.res().ComposedBy != by {
		n.res().ComposedBy = by
		s.markDirty(n)
	}
}

// checkDelta validates a delta compose result of owner without changing
// anything: the children it sends (as checkComposition does), an added
// child that is already there and not removed (a duplicate), the
// owner's max_children counting what stays, and the cycles its edges
// would close. children counts the owner's children not being torn
// down (called only near the limit: it may walk them all); producersOf
// lists what a child of owner left out of the delta consumes. It returns
// the sent children's IDs and each ID's index in them.
func checkDelta(owner converge.ID, res *converge.Result, get func(converge.ID) (ChildHead, bool), children func() int,
	producersOf func(converge.ID) []converge.ID, k *converge.Kind, v Validator) ([]converge.ID, *childIndex, error) {
	removed := make(map[converge.ID]bool, len(res.Removed))
	gone := 0
	for _, id := range res.Removed {
		if removed[id] {
			return nil, nil, fmt.Errorf("%s: removed twice", id)
		}
		removed[id] = true
		if ex, ok := get(id); ok && ex.Owner == owner && !ex.Deleting {
			gone++
		}
	}
	added := 0
	for i := range res.Children {
		c := &res.Children[i]
		id := converge.NewID(c.Kind, c.Name)
		if removed[id] {
			return nil, nil, fmt.Errorf("%s: both sent and removed", id)
		}
		ex, ok := get(id)
		if c.Added && ok && ex.Owner == owner && !ex.Deleting {
			return nil, nil, fmt.Errorf("%s: emitted twice (the composition has it already)", id)
		}
		if !ok || ex.Deleting {
			added++
		}
	}
	if k != nil && k.MaxChildren > 0 && added > gone {
		if n := children() - gone + added; n > k.MaxChildren {
			return nil, nil, fmt.Errorf("%d children: more than max_children %d of %s", n, k.MaxChildren, k.Ref())
		}
	}
	// Everything checkComposition checks of the children and edges
	// sent, cycles among them included.
	ids, seen, err := checkComposition(owner, &converge.Result{Children: res.Children, Edges: res.Edges}, get, nil, v)
	if err != nil {
		return nil, nil, err
	}
	// A cycle through a child left out: walk producers from every
	// consumer sent, through the new edges of the children sent and the
	// standing edges of the others, looking for a way back.
	sent := make(map[converge.ID][]converge.ID)
	for _, e := range res.Edges {
		sent[e.Consumer] = append(sent[e.Consumer], e.Producer)
	}
	const (
		open = 1
		done = 2
	)
	state := make(map[converge.ID]uint8)
	var visit func(id converge.ID) converge.ID
	visit = func(id converge.ID) converge.ID {
		switch state[id] {
		case open:
			return id
		case done:
			return ""
		}
		state[id] = open
		ps, ok := sent[id]
		if !ok {
			if ex, ok := get(id); ok && ex.Owner == owner && !removed[id] {
				ps = producersOf(id)
			}
		}
		for _, p := range ps {
			if c := visit(p); c != "" {
				return c
			}
		}
		state[id] = done
		return ""
	}
	for c := range sent {
		if cyc := visit(c); cyc != "" {
			return nil, nil, fmt.Errorf("edges form a cycle through %s", cyc)
		}
	}
	return ids, seen, nil
}

// composeDeltaResult applies a successful delta compose of n: the
// children sent are created or updated, their edges replaced, the
// removed ones pruned; the children left out stay as they are.
func (s *Scheduler) composeDeltaResult(n *node, rec *taskRec, res *converge.Result) {
	if !rec.base {
		// A delta to a compose that carried no base: nothing to apply
		// it to. Ask again, in full.
		s.forgetComposition(n)
		s.failTransient(n, "worker answered a compose without a base spec with a delta")
		return
	}
	if n.res().Rollout != nil {
		// Declared since the compose was sent: a rollout applies a
		// composition in full. Ask again.
		s.forgetComposition(n)
		s.failTransient(n, "a composer with a rollout composes in full; its delta is not applied")
		return
	}
	producersOf := func(id converge.ID) []converge.ID {
		var out []converge.ID
		for _, e := range s.graph.producersOf(id) {
			out = append(out, e.Producer)
		}
		return out
	}
	get := func(id converge.ID) (ChildHead, bool) {
		if ex := s.graph.nodes[id]; ex != nil {
			return ex.head(), true
		}
		return ChildHead{}, false
	}
	live := func() int {
		c := 0
		for _, ch := range n.kids() {
			if !ch.deleting() {
				c++
			}
		}
		return c
	}
	ids, emitted, err := checkDelta(n.id, res, get, live, producersOf, n.rs.kind, s.validator)
	if err != nil {
		s.failPermanent(n, err.Error())
		return
	}
	if err := s.resultStatusErr(rec.ref, res); err != nil {
		s.failPermanent(n, "worker result refused: "+err.Error())
		return
	}
	created, updated, _, partial := s.applyComposition(n, res, ids, emitted, nil)
	var prune []*node
	for _, id := range res.Removed {
		if ch := s.graph.nodes[id]; ch != nil && ch.owner == n && !ch.deleting() {
			prune = append(prune, ch)
		}
	}
	pruned := len(prune)
	if pruned > 0 {
		s.cascade(prune, "pruned by "+string(n.id))
	}
	s.setComposeStatus(n, res)
	if t := n.tree(); t.composedNKnown {
		t.composedN += created - pruned
	} else {
		t.composedN, t.composedNKnown = live(), true // after the prune above
	}
	if created+updated+pruned > 0 || n.res().ObservedGeneration != rec.gen {
		total := n.sub.composedN
		s.event(n.id, "Composed", fmt.Sprintf("composed %d children as a delta (%d created, %d updated, %d kept, %d pruned)",
			total, created, updated, total-created-updated, pruned))
	}
	s.finishCompose(n, rec, res, partial)
}
