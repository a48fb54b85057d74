package scheduler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/convergehq/converge"
)

// composeResult applies a successful compose of generation rec.gen: it
// validates every child, then creates, updates, keeps and prunes the
// parent's children and replaces their edges. A bad child fails the
// parent permanently and nothing of the composition is applied.
func (s *Scheduler) composeResult(n *node, rec *taskRec, res *converge.Result) {
	if rec.gen != n.res().Generation {
		// A newer spec is pending; this composition is stale.
		s.succeeded(n, rec) // re-enqueues
		return
	}
	if res.Delta {
		s.composeDeltaResult(n, rec, res)
		return
	}
	ids, emitted, err := s.checkComposition(n, res)
	if err != nil {
		s.failPermanent(n, err.Error())
		return
	}
	if err := s.resultStatusErr(rec.ref, res); err != nil {
		s.failPermanent(n, "worker result refused: "+err.Error())
		return
	}
	held := s.rolloutHold(n, res, ids, emitted)
	created, updated, kept, partial := s.applyComposition(n, res, ids, emitted, held)
	partial = partial || len(held) > 0
	var prune []*node
	for _, ch := range n.kids() {
		if !emitted.has(ch.id) && !ch.deleting() && !held[ch.id] {
			prune = append(prune, ch)
		}
	}
	pruned := len(prune)
	if pruned > 0 {
		s.cascade(prune, "pruned by "+string(n.id))
	}
	s.setComposeStatus(n, res)
	n.tree().composedN, n.tree().composedNKnown = len(res.Children), true
	if created+updated+pruned > 0 || n.res().ObservedGeneration != rec.gen || len(held) > 0 {
		msg := fmt.Sprintf("composed %d children (%d created, %d updated, %d kept, %d pruned)",
			len(res.Children), created, updated, kept, pruned)
		if len(held) > 0 {
			ro := n.sub.rollout
			msg += fmt.Sprintf("; %d held for later waves than %d/%d (%s)", len(held), ro.st.Wave+1, ro.st.Waves, ro.st.Name)
		}
		s.event(n.id, "Composed", msg)
	}
	s.finishCompose(n, rec, res, partial)
}

// setComposeStatus keeps the status a compose returned, if any.
func (s *Scheduler) setComposeStatus(n *node, res *converge.Result) {
	if res.Status != nil && !bytes.Equal(res.Status, n.tree().composeStatus) {
		n.tree().composeStatus = res.Status
		s.batch.markRollup(n, s.now)
	}
}

// applyComposition applies the children and edges of n's checked
// compose result (ids and emitted from checkComposition or checkDelta):
// the edges of every consumer sent are replaced by the ones sent, then
// the children sent are created or updated; a held child (a later wave
// of a rollout, rolloutHold) keeps its spec and edges. It prunes
// nothing. partial reports a child left to the compose after a teardown.
func (s *Scheduler) applyComposition(n *node, res *converge.Result, ids []converge.ID, emitted *childIndex, held map[converge.ID]bool) (created, updated, kept int, partial bool) {
	if k := len(res.Children); k > 64 {
		// Room for what a big composition adds, instead of regrowing.
		s.batch.dirty = slices.Grow(s.batch.dirty, k)
		s.lease.queue = slices.Grow(s.lease.queue, k)
		s.graph.reserve(n, k)
	}
	// canon returns the one copy of id the graph keeps: a child's from
	// ids, another resource's from its node. A million edges then share
	// their nodes' strings instead of each keeping two decoded ones.
	canon := func(id converge.ID) converge.ID {
		if i, ok := emitted.find(id); ok {
			return ids[i]
		}
		if x := s.graph.nodes[id]; x != nil {
			return x.id
		}
		return id
	}
	// Edges first (so new children see their producers), then children.
	// Edges of pruned children stay until their rows are removed: the
	// teardown order needs them. The edges of children not created yet
	// wait in one slice by position (comingEdges), not a map.
	s.graph.beginComing(emitted)
	defer s.graph.endComing()
	oldEdges := make(map[edgeKey]*converge.Edge)
	for _, id := range ids {
		if ex := s.graph.nodes[id]; ex != nil && ex.deleting() || held[id] {
			continue
		}
		for _, e := range s.graph.producersOf(id) {
			oldEdges[edgeKey{e.Consumer, e.Producer}] = e
		}
	}
	// A new child consuming a child of n that is being torn down would
	// hold that teardown up (a teardown waits for its live consumers)
	// while waiting for it: it is left to the compose that follows the
	// teardown (recomposeOwner), as are new children consuming it.
	later := make(map[converge.ID]bool)
	for grew := true; grew; {
		grew = false
		for _, e := range res.Edges {
			if later[e.Consumer] || s.graph.nodes[e.Consumer] != nil {
				continue
			}
			p := s.graph.nodes[e.Producer]
			if gone := p != nil && p.deleting() && p.owner == n; gone || later[e.Producer] {
				if gone {
					p.set(mRecomposeOwner)
				}
				later[e.Consumer], grew = true, true
			}
		}
	}
	// Each edge and child of the result is dropped once applied (its
	// strings, flows and spec): the graph holds what it keeps (packed
	// rows, shared flows), so a million children's decoded result goes
	// to the collector while the apply runs instead of after it. Nothing
	// reads res's children or edges after this (their counts only).
	for i := range res.Edges {
		e := res.Edges[i]
		res.Edges[i] = converge.Edge{}
		if ex := s.graph.nodes[e.Consumer]; ex != nil && ex.deleting() || later[e.Consumer] || held[e.Consumer] {
			continue // its edges go with its row, or come with it
		}
		k := edgeKey{e.Consumer, e.Producer}
		if old := oldEdges[k]; old != nil {
			delete(oldEdges, k)
			if flowsEqual(old.Flows, e.Flows) {
				continue
			}
		}
		// The result is the scheduler's once it arrives: its flows are
		// kept, not copied (a million edges at scale).
		ne := &converge.Edge{Consumer: canon(e.Consumer), Producer: canon(e.Producer), Flows: s.graph.internFlows(e.Flows)}
		s.graph.addEdge(ne)
		if c := s.graph.nodes[ne.Consumer]; c != nil && c.has(mStored) {
			s.batch.putEdge(ne, s.now)
		} else {
			// A consumer this composition creates, or one not stored
			// yet: its row carries its edges into the store
			// (buildBatch), so they are not pending writes of their own.
			delete(s.batch.edgeDel, edgeKey{ne.Consumer, ne.Producer})
		}
		if c := s.graph.nodes[e.Consumer]; c != nil {
			c.markFlows()
			s.lease.enqueue(c)
		}
	}
	for _, e := range oldEdges {
		s.graph.removeEdge(e)
		s.batch.delEdge(e, s.now)
		if c := s.graph.nodes[e.Consumer]; c != nil {
			c.markFlows()
			s.lease.enqueue(c)
		}
	}
	createdBy := "created by " + string(n.id)
	for i := range res.Children {
		c := res.Children[i]
		res.Children[i] = converge.Child{}
		id := ids[i]
		ex := s.graph.nodes[id]
		switch {
		case held[id]:
			// its change waits for a later wave (counted apart)
		case ex == nil && later[id]:
			partial = true
		case ex == nil:
			// Packed at once: a million children of one compose wait
			// packed, not decoded, for their first consider.
			s.createChild(n, &c, id, createdBy).pack()
			created++
		case ex.deleting():
			// Being torn down: the owner composes again once it is gone.
			ex.set(mRecomposeOwner)
			partial = true
		default:
			if s.updateDeclared(ex, c.KindVersion, c.Spec, c.ProviderConfigRef) {
				updated++
			} else {
				kept++
			}
		}
	}
	return created, updated, kept, partial
}

// finishCompose ends an applied compose of n (full or delta): it records
// the composition the children now are (or forgets it, when some child
// waits for a later compose) and moves n on from its rollup.
func (s *Scheduler) finishCompose(n *node, rec *taskRec, res *converge.Result, partial bool) {
	if partial {
		s.forgetComposition(n)
	} else {
		s.recordComposition(n, res.Revision, rec.config)
	}
	s.succeeded(n, rec)
	s.hold(n, true)
	wasReady := n.res().Phase == converge.PhaseReady
	if n.res().Phase == converge.PhaseRunning || n.res().Phase == converge.PhaseFailed {
		s.setReason(n, "")
		s.setPhase(n, converge.PhasePending)
	}
	s.evalComposer(n)
	if wasReady && n.res().Phase == converge.PhaseReady {
		s.scheduleResync(n)
	}
}

// checkComposition validates a compose result without changing anything;
// it returns the children's IDs.
func (s *Scheduler) checkComposition(n *node, res *converge.Result) ([]converge.ID, *childIndex, error) {
	return checkComposition(n.id, res, func(id converge.ID) (ChildHead, bool) {
		if ex := s.graph.nodes[id]; ex != nil {
			return ex.head(), true // read only: unchanged children stay packed
		}
		return ChildHead{}, false
	}, n.rs.kind, s.validator)
}

// checkComposition validates owner's compose result against the resources
// get finds, the owner's kind k (its max_children; nil: unknown) and v
// (nil accepts every spec); it returns the children's IDs and each ID's
// index in them. Fanout (a dry run) and composeResult decide with it
// alike.
func checkComposition(owner converge.ID, res *converge.Result, get func(converge.ID) (ChildHead, bool), k *converge.Kind, v Validator) ([]converge.ID, *childIndex, error) {
	if k != nil && k.MaxChildren > 0 && len(res.Children) > k.MaxChildren {
		return nil, nil, fmt.Errorf("%d children: more than max_children %d of %s", len(res.Children), k.MaxChildren, k.Ref())
	}
	ids := make([]converge.ID, len(res.Children))
	seen := newChildIndex(ids)
	var check []int // children whose spec is validated
	for i := range res.Children {
		c := &res.Children[i]
		id := converge.NewID(c.Kind, c.Name)
		ids[i] = id
		if _, err := converge.ParseID(string(id)); err != nil || strings.ContainsRune(string(id), 0) {
			return nil, nil, fmt.Errorf("child %q: want KIND/NAME without \"/\" or NUL in either", id)
		}
		if c.KindVersion < 1 {
			return nil, nil, fmt.Errorf("%s: kind_version %d: want >= 1", id, c.KindVersion)
		}
		if !seen.add(i) {
			return nil, nil, fmt.Errorf("%s: emitted twice", id)
		}
		if id == owner {
			return nil, nil, fmt.Errorf("%s: a composer cannot emit itself", id)
		}
		ex, exists := get(id)
		if exists && ex.Owner != owner {
			by := string(ex.Owner)
			if by == "" {
				by = "git"
			}
			return nil, nil, fmt.Errorf("%s: already exists, owned by %s", id, by)
		}
		// A child emitted again with the very spec it has, at the same
		// version, was valid when it was created; its kind version's
		// schema can only have changed compatibly since (lint refuses
		// the rest), so it is valid still. A recompose of a million
		// children validates the few that changed.
		if exists && ex.Ref.Version == c.KindVersion && bytes.Equal(ex.Declared, c.Spec) {
			continue
		}
		check = append(check, i)
	}
	if err := validateSpecs(res.Children, ids, check, flowedFields(res.Edges, seen, check, v), v); err != nil {
		return nil, nil, err
	}
	// Only children consume, so a cycle runs through children alone: the
	// edges between two children, by position, are all it needs.
	var from, to []int32
	for _, e := range res.Edges {
		c, ok := seen.find(e.Consumer)
		if !ok {
			return nil, nil, fmt.Errorf("edge %s -> %s: consumer is not a child of %s", e.Consumer, e.Producer, owner)
		}
		if e.Consumer == e.Producer {
			return nil, nil, fmt.Errorf("edge %s -> %s: a resource cannot consume itself", e.Consumer, e.Producer)
		}
		if p, ok := seen.find(e.Producer); ok {
			if from == nil {
				from, to = make([]int32, 0, len(res.Edges)), make([]int32, 0, len(res.Edges))
			}
			from, to = append(from, int32(p)), append(to, int32(c))
		}
	}
	if cyc := cycleOf(from, to, len(ids), func(i int32) converge.ID { return ids[i] }); cyc != "" {
		return nil, nil, fmt.Errorf("edges form a cycle through %s", cyc)
	}
	return ids, seen, nil
}

// flowedFields returns, for each child (by its index in seen) that check
// names, the spec fields its value flows in edges fill (their To paths):
// "known after apply", so a composed child may leave them out. Nil when
// v cannot validate a spec with pending fields or no checked child has a
// flow.
func flowedFields(edges []converge.Edge, seen *childIndex, check []int, v Validator) [][]string {
	if _, ok := v.(PendingValidator); !ok || len(check) == 0 {
		return nil
	}
	var checked []bool
	var out [][]string
	for i := range edges {
		e := &edges[i]
		if len(e.Flows) == 0 {
			continue
		}
		c, ok := seen.find(e.Consumer)
		if !ok {
			continue // refused below
		}
		if out == nil {
			out = make([][]string, seen.len())
			checked = make([]bool, seen.len())
			for _, j := range check {
				checked[j] = true
			}
		}
		if !checked[c] {
			continue
		}
		for _, f := range e.Flows {
			out[c] = append(out[c], f.To)
		}
	}
	return out
}

// validateSpecs validates the specs of children[i] for every i in check:
// a JSON object, valid under its kind version's spec schema (v nil: JSON
// only), where a field in pending[i] (a flowed field, see flowedFields)
// may be absent. A big composition is validated on every core
// (the Validator is safe for concurrent use); the error of the first
// failing child in check's order is returned.
func validateSpecs(children []converge.Child, ids []converge.ID, check []int, pending [][]string, v Validator) error {
	pv, _ := v.(PendingValidator)
	one := func(i int) error {
		c := &children[i]
		if len(c.Spec) > 0 {
			if err := checkObject(c.Spec); err != nil {
				return fmt.Errorf("%s: spec: %w", ids[i], err)
			}
		}
		if v != nil {
			ref := converge.KindRef{Kind: c.Kind, Version: c.KindVersion}
			var err error
			if pending != nil && len(pending[i]) > 0 {
				err = pv.ValidateSpecPending(ref, c.Spec, pending[i])
			} else {
				err = v.ValidateSpec(ref, c.Spec)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", ids[i], err)
			}
		}
		return nil
	}
	const chunk = 512
	workers := min(runtime.GOMAXPROCS(0), (len(check)+chunk-1)/chunk)
	if workers <= 1 {
		for _, i := range check {
			if err := one(i); err != nil {
				return err
			}
		}
		return nil
	}
	// Each chunk records its first error; the lowest chunk's wins. A
	// failure stops the chunks after it from starting.
	errs := make([]error, (len(check)+chunk-1)/chunk)
	var next, failed atomic.Int64
	failed.Store(int64(len(errs)))
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c := next.Add(1) - 1
				if c >= int64(len(errs)) || c > failed.Load() {
					return
				}
				for _, i := range check[c*chunk : min(int(c+1)*chunk, len(check))] {
					if err := one(i); err != nil {
						errs[c] = err
						for f := failed.Load(); c < f && !failed.CompareAndSwap(f, c); f = failed.Load() {
						}
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// findCycle returns a resource on a cycle of edges, or "".
func findCycle(edges []converge.Edge) converge.ID {
	if len(edges) == 0 {
		return ""
	}
	index := make(map[converge.ID]int32, len(edges))
	var names []converge.ID
	idx := func(id converge.ID) int32 {
		i, ok := index[id]
		if !ok {
			i = int32(len(names))
			index[id] = i
			names = append(names, id)
		}
		return i
	}
	from := make([]int32, len(edges))
	to := make([]int32, len(edges))
	for i, e := range edges {
		from[i], to[i] = idx(e.Producer), idx(e.Consumer)
	}
	return cycleOf(from, to, len(names), func(i int32) converge.ID { return names[i] })
}

// cycleOf is findCycle on n nodes numbered 0..n-1 and the edges
// from[i] -> to[i] (producer to consumer); name names a node. Of the nodes
// on or behind a cycle, it returns the least name, or "".
func cycleOf(from, to []int32, n int, name func(int32) converge.ID) converge.ID {
	if len(from) == 0 {
		return ""
	}
	indeg := make([]int32, n)
	start := make([]int32, n+1)
	for i := range from {
		indeg[to[i]]++
		start[from[i]+1]++
	}
	for i := 1; i <= n; i++ {
		start[i] += start[i-1]
	}
	adj := make([]int32, len(from))
	fill := append([]int32(nil), start[:n]...)
	for i := range from {
		adj[fill[from[i]]] = to[i]
		fill[from[i]]++
	}
	q := make([]int32, 0, n)
	for i := 0; i < n; i++ {
		if indeg[i] == 0 {
			q = append(q, int32(i))
		}
	}
	done := 0
	for len(q) > 0 {
		v := q[len(q)-1]
		q = q[:len(q)-1]
		done++
		for _, c := range adj[start[v]:start[v+1]] {
			indeg[c]--
			if indeg[c] == 0 {
				q = append(q, c)
			}
		}
	}
	if done == n {
		return ""
	}
	var best converge.ID
	for i, d := range indeg {
		if d > 0 && (best == "" || name(int32(i)) < best) {
			best = name(int32(i))
		}
	}
	return best
}

func flowsEqual(a, b []converge.ValueFlow) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// createChild adds a resource composed by parent.
func (s *Scheduler) createChild(parent *node, c *converge.Child, id converge.ID, msg string) *node {
	kind := s.refState(converge.KindRef{Kind: c.Kind, Version: c.KindVersion}).ref.Kind
	r := &converge.Resource{
		UID: s.newUID(),
		// The refState's kind and a slice of the ID for the name: a
		// million children share a few kind strings and keep one string
		// each for ID and name.
		Kind:              kind,
		KindVersion:       c.KindVersion,
		Name:              string(id)[len(kind)+1:],
		Declared:          c.Spec,
		Generation:        1,
		Phase:             converge.PhasePending,
		Owner:             parent.id,
		Origin:            converge.OriginComposed,
		ProviderConfigRef: c.ProviderConfigRef,
		CreatedAt:         s.now,
	}
	return s.addNode(r, id, parent, msg)
}

// addNode inserts a new resource row (Phase Pending) with ID id into the
// graph.
func (s *Scheduler) addNode(r *converge.Resource, id converge.ID, parent *node, msg string) *node {
	n := &node{r: r, id: id, owner: parent, rs: s.refState(r.Ref())}
	if parent != nil {
		parent.adopt(n)
	}
	s.graph.insert(n)
	s.graph.noteGitRoot(n)
	delete(s.batch.delRes, n.id)
	n.rs.count++
	r.Spec = s.computeSpec(n)
	if len(n.adj.prod()) > 0 {
		n.markFlows()
	}
	s.markDirty(n)
	s.addCounted(n)
	s.event(n.id, "Created", msg)
	s.lease.enqueue(n)
	return n
}

// updateDeclared changes n's version, declared spec and config ref; it
// reports whether anything changed (and then bumps the generation).
func (s *Scheduler) updateDeclared(n *node, version int, declared json.RawMessage, configRef string) bool {
	h := n.head() // an unchanged child stays packed, and is not decoded to tell
	sameSpec := jsonEqual(h.Declared, declared)
	if h.Ref.Version == version && sameSpec && h.ProviderConfigRef == configRef {
		return false
	}
	r := n.res()
	if r.KindVersion != version {
		from := r.Ref()
		n.rs.count--
		n.rs.stats.phases.Total--
		subPhase(&n.rs.stats.phases, r.Phase)
		r.KindVersion = version
		n.rs = s.refState(r.Ref())
		n.rs.count++
		n.rs.stats.phases.Add(r.Phase)
		s.retireCheck(from)
		if r.Lease != nil {
			// A task of the old version: its result is stale.
			s.dropTask(r.Lease.TaskID)
			r.Lease = nil
			if r.Phase == converge.PhaseRunning {
				s.setPhase(n, converge.PhasePending)
			}
		}
		s.event(n.id, "Flipped", "flipped "+from.String()+" to "+r.Ref().String())
	}
	if !sameSpec {
		r.Declared = declared
	}
	r.ProviderConfigRef = configRef
	r.Spec = s.computeSpec(n)
	if r.Phase == converge.PhaseFailed && r.NextAttempt.IsZero() {
		// permanent failure of the previous generation: a new start
		s.setReason(n, "")
	}
	s.bumpGeneration(n)
	return true
}

// evalComposer sets a composer's phase from its rollup once its compose
// succeeded for the current generation.
func (s *Scheduler) evalComposer(n *node) {
	r := n.res()
	if r.Deleting || r.Phase == converge.PhaseRunning || r.Phase == converge.PhaseFailed ||
		r.ObservedGeneration < r.Generation || n.is(stateParked) {
		return
	}
	s.batch.markRollup(n, s.now)
	ready := n.tree().counts.Ready == n.tree().counts.Total
	if n.sub.rollout != nil && s.rolloutGate(n, ready) {
		ready = false // children wait for a later wave
	}
	if ready {
		if r.Phase != converge.PhaseReady {
			r.Reason = ""
			s.setPhase(n, converge.PhaseReady)
			s.hold(n, false)
			s.becameReady(n)
		}
		return
	}
	if r.Phase != converge.PhasePending {
		s.setPhase(n, converge.PhasePending)
	}
}

// writeRollup writes a composer's status (its compose status with the
// rollup merged in) and its "x/y children ready" reason. It runs once per
// flush for each composer whose subtree changed.
func (s *Scheduler) writeRollup(n *node) {
	if !s.isComposer(n) {
		return
	}
	st := s.rollupStatus(n)
	if !bytes.Equal(st, n.res().Status) {
		n.res().Status = st
		s.markDirtySoon(n)
	}
	r := n.res()
	if !r.Deleting && r.Phase == converge.PhasePending && r.ObservedGeneration == r.Generation && r.Lease == nil {
		if why := rolloutReason(n); why != "" {
			s.setReasonSoon(n, why)
		} else {
			s.setReasonSoon(n, strconv.Itoa(n.tree().counts.Ready)+"/"+strconv.Itoa(n.tree().counts.Total)+" children ready")
		}
	}
}

// rollupStatus merges {"rollup": counts} into the composer's status.
func (s *Scheduler) rollupStatus(n *node) json.RawMessage {
	m := map[string]json.RawMessage{}
	if len(n.tree().composeStatus) > 0 {
		if err := json.Unmarshal(n.tree().composeStatus, &m); err != nil || m == nil {
			m = map[string]json.RawMessage{}
		}
	}
	c := n.tree().counts
	m["rollup"] = json.RawMessage(`{"total":` + strconv.Itoa(c.Total) + `,"ready":` + strconv.Itoa(c.Ready) +
		`,"failed":` + strconv.Itoa(c.Failed) + `,"pending":` + strconv.Itoa(c.Pending) +
		`,"running":` + strconv.Itoa(c.Running) + `,"deleting":` + strconv.Itoa(c.Deleting) + `}`)
	if ro := n.tree().rollout; ro != nil {
		if b, err := json.Marshal(&ro.st); err == nil {
			m["rollout"] = b
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return n.res().Status
	}
	return b
}

// rollupTotal returns the total of st's "rollup", or 0.
func rollupTotal(st json.RawMessage) int {
	if len(st) == 0 {
		return 0
	}
	var v struct {
		Rollup struct {
			Total int `json:"total"`
		} `json:"rollup"`
	}
	if json.Unmarshal(st, &v) != nil {
		return 0
	}
	return v.Rollup.Total
}

// stripRollup returns st without the fields the engine merges in
// ("rollup", "rollout").
func stripRollup(st json.RawMessage) []byte {
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(st, &m); err != nil {
		return st
	}
	delete(m, "rollup")
	delete(m, "rollout")
	b, err := json.Marshal(m)
	if err != nil {
		return st
	}
	return b
}
