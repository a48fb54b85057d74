package site

// The incremental half of the Builder: Update rewrites only what a set of
// changed resources touches (their pages, the lists they are on, their
// roots' graphs, the index), as the live site calls it; build.go holds
// the full Build it falls back to.

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"time"

	"github.com/convergehq/converge"
)

// Update re-reads the resources ids (and every event newer than the last
// Build or Update) and rewrites only what they touch: their pages (removed
// for a resource that is gone), the pages that link to a resource that
// appeared or disappeared, the list pages they are on, the graphs of their
// roots, index.html and summary.json. ids must name every resource that
// changed, including the consumer of a changed edge. Update without an
// earlier Build, or after a kind's Secret paths changed, runs Build.
func (b *Builder) Update(ctx context.Context, ids []converge.ID) (*Stats, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		return b.build(ctx)
	}
	start := time.Now()
	b.now = b.opts.Now()
	m := b.m
	kinds, err := b.r.Kinds(ctx)
	if err != nil {
		return nil, fmt.Errorf("update site: %w", err)
	}
	if !reflect.DeepEqual(secretsByKind(kinds), m.secrets) {
		return b.build(ctx)
	}
	if cv, err := configSecrets(ctx, b.r, kinds); err != nil {
		return nil, fmt.Errorf("update site: %w", err)
	} else if !slices.Equal(cv, m.configVals) {
		return b.build(ctx)
	}
	newKinds := make(map[string]bool)
	for _, k := range kinds {
		if _, ok := slices.BinarySearch(m.kindNames, k.Name); !ok {
			newKinds[k.Name] = true
		}
	}

	u := &update{
		rewrite: make(map[converge.ID]bool),
		fetched: make(map[converge.ID]*converge.Resource),
		shift:   make(map[listKey]int),
		dirty:   make(map[listKey][]converge.ID),
		oldLen:  make(map[listKey]int),
		changed: make(map[listKey][]converge.ID),
		roots:   make(map[converge.ID]bool),
	}
	touched, err := b.newEvents(ctx)
	if err != nil {
		return nil, fmt.Errorf("update site: %w", err)
	}
	for id := range touched {
		u.rewrite[id] = true
	}
	secretsChanged := false
	seen := make(map[converge.ID]bool)
	uniq := make([]converge.ID, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			uniq = append(uniq, id)
		}
	}
	// One read for all: a store over the network (etcd) answers a
	// batch of ids in a few round trips, not one each.
	rs, err := b.r.ResourcesByID(ctx, uniq)
	if err != nil {
		return nil, fmt.Errorf("update site: %w", err)
	}
	for i, id := range uniq {
		r := rs[i]
		if r != nil {
			if _, ok := slices.BinarySearch(m.kindNames, r.Kind); !ok {
				newKinds[r.Kind] = true
			}
		}
		changed, err := b.apply(ctx, u, id, r)
		if err != nil {
			return nil, fmt.Errorf("update site: %w", err)
		}
		secretsChanged = secretsChanged || changed
	}
	if secretsChanged {
		m.scrub = newScrubber(m.secretVals)
	}
	for id, r := range u.fetched {
		if r != nil {
			m.res[id].reason = m.clean(shortReason(r.Reason))
		}
	}
	u.newKind = newKinds
	for k := range newKinds {
		m.kindNames = append(m.kindNames, k)
		for _, lk := range append([]listKey{{Kind: k}}, phaseKeys(k)...) {
			u.shift[lk] = 0
		}
	}
	sort.Strings(m.kindNames)
	// A kind no longer declared whose last resource went is no longer
	// on the site, as a full Build would not list it.
	declared := make(map[string]bool, len(kinds))
	for _, k := range kinds {
		declared[k.Name] = true
	}
	m.kindNames = slices.DeleteFunc(m.kindNames, func(k string) bool {
		if declared[k] || len(m.lists[listKey{Kind: k}]) > 0 {
			return false
		}
		for _, lk := range append([]listKey{{Kind: k}}, phaseKeys(k)...) {
			delete(m.lists, lk)
			delete(m.segs, lk)
			delete(u.shift, lk)
			delete(u.dirty, lk)
			delete(u.changed, lk)
			delete(u.oldLen, lk)
			u.goneLists = append(u.goneLists, lk)
		}
		delete(m.byKind, k)
		return true
	})
	if u.full {
		m.tally()
	} else if u.edges {
		m.kindEdges = make(map[converge.ID]map[[2]string]int)
	}
	for id, r := range u.fetched {
		if r != nil {
			u.roots[m.rootOf(id)] = true
		}
	}
	if err := b.readRevisions(ctx, m); err != nil {
		return nil, err
	}
	if err := b.prepareHeaders(); err != nil {
		return nil, err
	}
	return b.flush(ctx, u, start)
}

// update collects what one Update must rewrite.
type update struct {
	rewrite   map[converge.ID]bool               // resource pages to rewrite
	fetched   map[converge.ID]*converge.Resource // read by Update; nil: gone
	removed   []converge.ID                      // resources gone
	shift     map[listKey]int                    // list → first position whose row moved
	dirty     map[listKey][]converge.ID          // list → rows changed in place
	oldLen    map[listKey]int                    // list → length before the update
	changed   map[listKey][]converge.ID          // kind-phase list → rows that came, went or changed
	newKind   map[string]bool                    // kinds first seen by this update
	roots     map[converge.ID]bool               // roots whose graph to redraw
	goneLists []listKey                          // lists of kinds gone from the site
	full      bool                               // rollups need a full tally
	regroup   bool                               // membership changed: group roots afresh
	edges     bool                               // some edge changed
}

func (u *update) moved(k listKey, pos, oldLen int) {
	if _, ok := u.oldLen[k]; !ok {
		u.oldLen[k] = oldLen
	}
	if cur, ok := u.shift[k]; !ok || pos < cur {
		u.shift[k] = pos
	}
}

// apply folds the new state r of id (nil: gone) into the model and notes
// what to rewrite. It reports whether the set of secret values changed.
func (b *Builder) apply(ctx context.Context, u *update, id converge.ID, r *converge.Resource) (bool, error) {
	m := b.m
	old := m.res[id]
	u.fetched[id] = r
	if old == nil && r == nil {
		return false, nil
	}
	if old != nil {
		u.roots[m.rootOf(id)] = true
		m.adjust(old, -1)
	}
	var consumes, producedFor []converge.Edge
	if r != nil {
		var err error
		if consumes, producedFor, err = b.r.EdgesOf(ctx, id); err != nil {
			return false, err
		}
	}
	if old == nil || r == nil || old.owner != r.Owner {
		u.regroup = true
	}
	if (old == nil) != (r == nil) { // pages linking to id gain or lose a link
		if old != nil {
			u.rewrite[old.owner] = true
		}
		if r != nil {
			u.rewrite[r.Owner] = true
		}
		for _, c := range m.children[id] {
			u.rewrite[c] = true
			// A child's list row links its owner only while the owner
			// is on the site: render it again, and its list pages. (An
			// owner may come after its children: the live site hands
			// Update a big change in parts.)
			if ce := m.res[c]; ce != nil {
				ce.row = ""
				for _, k := range keysOf(ce) {
					if k.Kind != "" && k.Phase != "" {
						u.changed[k] = append(u.changed[k], c)
					} else {
						u.dirty[k] = append(u.dirty[k], c)
					}
				}
			}
		}
		for _, e := range m.consumes[id] {
			u.rewrite[e.Producer] = true
		}
		for _, e := range consumes {
			u.rewrite[e.Producer] = true
		}
		for _, c := range m.producedFor[id] {
			u.rewrite[c] = true
		}
		for _, e := range producedFor {
			u.rewrite[e.Consumer] = true
		}
	}
	// Ownership.
	newOwner := converge.ID("")
	if r != nil {
		newOwner = r.Owner
	}
	if len(m.children[id]) > 0 && (old == nil || r == nil || old.owner != newOwner) {
		// A subtree moves to another root. That includes an owner that
		// arrives after its children (one Update can get a root and its
		// compose in any order): they were counted in no rollup, and
		// adjusting them later under this root would make its counts
		// negative.
		u.full = true
	}
	if old != nil && old.owner == "" && (r == nil || newOwner != "") {
		delete(m.rollup, id)
		delete(m.kindRollup, id)
		m.roots = removeSorted(m.roots, id)
	}
	if old != nil && (r == nil || old.owner != newOwner) && old.owner != "" {
		m.children[old.owner] = removeSorted(m.children[old.owner], id)
		u.rewrite[old.owner] = true
		u.roots[m.rootOf(old.owner)] = true
	}
	if r != nil && (old == nil || old.owner != newOwner) && newOwner != "" {
		m.children[newOwner] = insertSorted(m.children[newOwner], id)
		u.rewrite[newOwner] = true
	}
	// Edges id consumes.
	if !reflect.DeepEqual(m.consumes[id], consumes) && (len(m.consumes[id]) > 0 || len(consumes) > 0) {
		u.edges = true
	}
	for _, e := range m.consumes[id] {
		m.producedFor[e.Producer] = removeSorted(m.producedFor[e.Producer], id)
	}
	delete(m.consumes, id)
	if len(consumes) > 0 {
		m.consumes[id] = consumes
	}
	for _, e := range consumes {
		m.producedFor[e.Producer] = insertSorted(m.producedFor[e.Producer], id)
	}
	// Edges id is produced for: make each consumer's view agree.
	now := make(map[converge.ID]converge.Edge, len(producedFor))
	for _, e := range producedFor {
		now[e.Consumer] = e
	}
	for _, c := range slices.Clone(m.producedFor[id]) {
		if _, ok := now[c]; !ok {
			m.consumes[c] = slices.DeleteFunc(m.consumes[c], func(e converge.Edge) bool { return e.Producer == id })
			m.producedFor[id] = removeSorted(m.producedFor[id], c)
			u.rewrite[c] = true
			u.edges = true
		}
	}
	for c, e := range now {
		i := slices.IndexFunc(m.consumes[c], func(x converge.Edge) bool { return x.Producer == id })
		switch {
		case i < 0:
			m.consumes[c] = append(m.consumes[c], e)
			slices.SortFunc(m.consumes[c], func(a, b converge.Edge) int {
				return compareID(a.Producer, b.Producer)
			})
			u.rewrite[c] = true
			u.edges = true
		case !reflect.DeepEqual(m.consumes[c][i].Flows, e.Flows):
			m.consumes[c][i] = e
			u.rewrite[c] = true
			u.edges = true
		}
		m.producedFor[id] = insertSorted(m.producedFor[id], c)
	}
	if r == nil {
		delete(m.producedFor, id)
	}
	// Lists.
	var oldKeys, newKeys []listKey
	var ne *entry
	if old != nil {
		oldKeys = keysOf(old)
	}
	if r != nil {
		ne = &entry{id: id, phase: r.Phase, owner: r.Owner, updated: r.UpdatedAt}
		newKeys = keysOf(ne)
	}
	for _, k := range slices.Concat(oldKeys, newKeys) {
		if k.Kind != "" && k.Phase != "" {
			u.changed[k] = append(u.changed[k], id)
		}
	}
	for _, k := range oldKeys {
		if !slices.Contains(newKeys, k) {
			pos, _ := slices.BinarySearch(m.lists[k], id)
			u.moved(k, pos, len(m.lists[k]))
			m.lists[k] = removeSorted(m.lists[k], id)
		}
	}
	for _, k := range newKeys {
		if slices.Contains(oldKeys, k) {
			u.dirty[k] = append(u.dirty[k], id)
			continue
		}
		pos, _ := slices.BinarySearch(m.lists[k], id)
		u.moved(k, pos, len(m.lists[k]))
		m.lists[k] = insertSorted(m.lists[k], id)
	}
	// The entry.
	if sk := shardOf(id); r == nil {
		m.shards[sk] = removeSorted(m.shards[sk], id)
		if len(m.shards[sk]) == 0 {
			delete(m.shards, sk)
		}
	} else if old == nil {
		m.shards[sk] = insertSorted(m.shards[sk], id)
	}
	if r == nil {
		changed := m.setSecrets(old, nil)
		delete(m.res, id)
		delete(m.children, id)
		u.removed = append(u.removed, id)
		delete(u.rewrite, id)
		return changed, nil
	}
	if old != nil {
		ne.secrets = old.secrets
	}
	m.res[id] = ne
	if ne.owner == "" && m.rollup[id] == nil {
		m.rollup[id] = new(converge.Counts)
		m.roots = insertSorted(m.roots, id)
	}
	m.adjust(ne, 1)
	u.rewrite[id] = true
	return m.setSecrets(ne, m.secretValues(r)), nil
}

func compareID(a, b converge.ID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// newEvents merges the events committed since the last call into the
// model and returns the resources that got some (flush skips those not
// in the model). It reads the newest event
// first, then exactly as many as are new (Seqs are dense), doubling if some
// were trimmed; the store decodes only the chunks that hold them.
func (b *Builder) newEvents(ctx context.Context) (map[converge.ID]bool, error) {
	m := b.m
	head, err := b.r.Events(ctx, "", 1)
	if err != nil {
		return nil, err
	}
	if len(head) == 0 || head[0].Seq <= m.lastSeq {
		return nil, nil
	}
	for n := int(min(head[0].Seq-m.lastSeq, 1<<30)); ; n *= 2 {
		evs, err := b.r.Events(ctx, "", n)
		if err != nil {
			return nil, err
		}
		if len(evs) < n || evs[0].Seq <= m.lastSeq+1 {
			var fresh []converge.Event
			for _, ev := range evs {
				if ev.Seq > m.lastSeq {
					fresh = append(fresh, ev)
				}
			}
			// Events of a resource not in the model are kept, as Build
			// keeps them: it is new in this Update (applied after), or
			// in the next one, or gone and re-created later under the
			// same ID, whose page shows its history.
			return m.addEvents(fresh, b.opts.Events), nil
		}
	}
}

// flush writes what u collected.
func (b *Builder) flush(ctx context.Context, u *update, start time.Time) (*Stats, error) {
	m := b.m
	w := &writer{dir: b.dir, atomic: true}
	for id := range u.roots {
		if m.res[id] != nil && len(m.children[id]) > 0 {
			u.rewrite[id] = true // its page shows the subtree's rollup
		}
	}
	shards := make(map[shardKey]bool)
	for _, id := range u.removed {
		shards[shardOf(id)] = true
	}
	for id := range u.rewrite {
		if id != "" && m.res[id] != nil {
			shards[shardOf(id)] = true
		}
	}
	keys := make([]shardKey, 0, len(shards))
	for k := range shards {
		keys = append(keys, k)
	}
	have := make(map[converge.ID]*converge.Resource, len(u.fetched))
	for id, r := range u.fetched {
		if r != nil {
			have[id] = r
		}
	}
	removed, err := b.writeShards(ctx, w, keys, have, nil)
	if err != nil {
		return nil, err
	}
	for _, k := range u.goneLists { // empty: one page
		if err := w.remove(k.path(1)); err != nil {
			return nil, fmt.Errorf("update site: %w", err)
		}
		removed++
	}
	pages := make(map[listKey]map[int]bool)
	add := func(k listKey, p int) {
		if pages[k] == nil {
			pages[k] = make(map[int]bool)
		}
		pages[k][p] = true
	}
	if err := b.kindPhasePages(u, w, add, &removed); err != nil {
		return nil, err
	}
	for k, pos := range u.shift {
		if k.Kind != "" && k.Phase != "" {
			continue // done by kindPhasePages
		}
		n := b.pageCount(k, len(m.lists[k]))
		from := pos/b.opts.PageSize + 1
		if k.Kind == "" {
			from = 1 // its one page says how many there are
		}
		if old, ok := u.oldLen[k]; ok && b.pageCount(k, old) != n {
			from = 1 // "page X of Y" changed on every page
			for p := n + 1; p <= b.pageCount(k, old); p++ {
				if err := w.remove(k.path(p)); err != nil {
					return nil, fmt.Errorf("update site: %w", err)
				}
				removed++
			}
		}
		for p := from; p <= n; p++ {
			add(k, p)
		}
	}
	for k, ids := range u.dirty {
		if k.Kind != "" && k.Phase != "" {
			continue
		}
		for _, id := range ids {
			if pos, ok := slices.BinarySearch(m.lists[k], id); ok && pos/b.opts.PageSize < b.pageCount(k, len(m.lists[k])) {
				add(k, pos/b.opts.PageSize+1)
			}
		}
	}
	for k, ps := range pages {
		for p := range ps {
			if err := b.writeList(w, k, p); err != nil {
				return nil, err
			}
		}
	}
	for id := range u.roots {
		if m.isGraphRoot(id) {
			if err := b.writeGraph(w, id); err != nil {
				return nil, err
			}
		} else {
			if err := w.remove(GraphPath(id)); err != nil {
				return nil, fmt.Errorf("update site: %w", err)
			}
		}
	}
	var only []converge.ID
	if !u.regroup && !u.edges && !u.full {
		only = make([]converge.ID, 0, len(u.fetched))
		for id, r := range u.fetched {
			if r != nil {
				only = append(only, id)
			}
		}
	}
	for id := range u.roots {
		n, err := b.writeGroups(w, id, only, nil)
		if err != nil {
			return nil, err
		}
		removed += n
	}
	if err := b.writeTop(w, false); err != nil {
		return nil, err
	}
	return &Stats{Resources: len(m.res), Files: w.files, Removed: removed, Bytes: w.bytes,
		Largest: w.largest, LargestFile: w.largestName, Elapsed: time.Since(start)}, nil
}

// kindPhasePages recomputes the pages of every kind-phase list the update
// touched (or whose kind gained or lost a resource, which moves segment
// bounds) and adds the pages to rewrite: all of them when the page count
// changed, those from the first moved start on, and those holding a
// changed row.
func (b *Builder) kindPhasePages(u *update, w *writer, add func(listKey, int), removed *int) error {
	m := b.m
	size := b.opts.PageSize
	touched := make(map[listKey]bool)
	for k := range u.changed {
		touched[k] = true
	}
	for k := range u.shift {
		if k.Kind != "" && k.Phase == "" {
			for _, ph := range converge.Phases {
				touched[listKey{Kind: k.Kind, Phase: ph}] = true
			}
		}
	}
	for k := range u.newKind {
		for _, ph := range converge.Phases {
			touched[listKey{Kind: k, Phase: ph}] = true
		}
	}
	for k := range touched {
		old, nw := m.segs[k], b.segStarts(k)
		m.segs[k] = nw
		from := len(nw) + 1
		if len(old) != len(nw) {
			from = 1 // "page X of Y" changed on every page
			for p := len(nw) + 1; p <= len(old); p++ {
				if err := w.remove(k.path(p)); err != nil {
					return fmt.Errorf("update site: %w", err)
				}
				*removed++
			}
		} else {
			for i := range nw {
				if nw[i] != old[i] {
					from = i + 1
					break
				}
			}
		}
		all := listKey{Kind: k.Kind}
		if pos, ok := u.shift[all]; ok {
			from = min(from, pageOfSeg(nw, pos/size))
		}
		for p := from; p <= len(nw); p++ {
			add(k, p)
		}
		for _, id := range u.changed[k] {
			if pos, ok := slices.BinarySearch(m.lists[all], id); ok {
				add(k, pageOfSeg(nw, pos/size))
			}
		}
	}
	return nil
}
