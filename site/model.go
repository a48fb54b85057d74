package site

import (
	"html/template"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
	"unique"

	"github.com/convergehq/converge"
)

// entry is what the site keeps in memory about one resource: enough to
// render list rows, rollups and graphs without reading the store again.
type entry struct {
	id      converge.ID
	phase   converge.Phase
	owner   converge.ID
	reason  string // scrubbed and shortened for list rows
	updated time.Time
	// secrets are the secret strings found in this resource's spec and
	// status; they are scrubbed from everything the site writes.
	secrets []string
	// row is the rendered list row, "" until rendered (see Builder.row).
	row template.HTML
}

// model is the Builder's in-memory picture of the store. It is guarded by
// Builder.mu.
type model struct {
	res         map[converge.ID]*entry
	children    map[converge.ID][]converge.ID // sorted
	consumes    map[converge.ID][]converge.Edge
	producedFor map[converge.ID][]converge.ID // producer → consumers, sorted
	events      map[converge.ID][]event
	flows       map[string][]converge.ValueFlow // distinct flow lists, see compactEdges
	lastSeq     uint64
	lists       map[listKey][]converge.ID       // sorted
	shards      map[shardKey][]converge.ID      // resource page → its resources, sorted
	groupFiles  map[converge.ID]map[string]bool // root → the group pages written for it
	groupings   map[converge.ID]*grouping       // root → its groups, until membership or an edge changes
	segs        map[listKey][]int               // kind-phase list → segment where each page starts
	kindNames   []string                        // kinds declared or in use, sorted
	secrets     map[string]*secretPaths
	secretVals  map[string]int // secret value → resources holding it
	// configVals are the provider configs' secret values (configSecrets),
	// each counted once in secretVals: a worker may echo one into a
	// status field that is not itself secret.
	configVals []string
	scrub      *strings.Replacer

	// Filled by tally, then kept by adjust.
	counts     converge.Counts
	byKind     map[string]*converge.Counts
	rollup     map[converge.ID]*converge.Counts            // per root: itself and its descendants
	kindRollup map[converge.ID]map[string]*converge.Counts // per root: the rollup by kind
	roots      []converge.ID                               // resources without owner, sorted
	// kindEdges caches, per root, its subtree's edges counted by
	// (consumer kind, producer kind); cleared when any edge changes.
	kindEdges map[converge.ID]map[[2]string]int

	applied   *converge.Revision
	revisions []*converge.RevisionRecord
	// control is the operator's pin and suspensions, when the reader
	// keeps them (ControlReader); nil otherwise.
	control *converge.Control
}

// suspended reports whether root (a resource without owner) is
// suspended, alone or with everything.
func (m *model) suspended(root converge.ID) bool {
	if m.control == nil {
		return false
	}
	_, one := m.control.Suspension(root)
	return one || m.control.SuspendedAll()
}

func newModel() *model {
	return &model{
		res:         make(map[converge.ID]*entry),
		children:    make(map[converge.ID][]converge.ID),
		consumes:    make(map[converge.ID][]converge.Edge),
		producedFor: make(map[converge.ID][]converge.ID),
		events:      make(map[converge.ID][]event),
		flows:       make(map[string][]converge.ValueFlow),
		lists:       make(map[listKey][]converge.ID),
		shards:      make(map[shardKey][]converge.ID),
		groupFiles:  make(map[converge.ID]map[string]bool),
		groupings:   make(map[converge.ID]*grouping),
		segs:        make(map[listKey][]int),
		secretVals:  make(map[string]int),
	}
}

// event is what a resource's section shows of one event: three words
// and two (interned) strings instead of converge.Event's five pointers,
// since a million-resource site keeps millions (the collector's work
// grows with the pointers the model holds).
type event struct {
	at       int64 // Unix nanoseconds, or noTime
	typ, msg string
}

// noTime is the at of an event without a time.
const noTime = math.MinInt64

// when returns the event's time (zero for noTime).
func (ev event) when() time.Time {
	if ev.at == noTime {
		return time.Time{}
	}
	return time.Unix(0, ev.at)
}

// compactEdges makes the edges id consumes share their strings with the
// rest of the model: the consumer is id, producers and flow paths are
// interned, and equal flow lists are one slice (shared, so never
// appended to).
func (m *model) compactEdges(id converge.ID, es []converge.Edge) {
	for i := range es {
		es[i].Consumer = id
		es[i].Producer = converge.ID(intern(string(es[i].Producer)))
		if len(es[i].Flows) == 0 {
			continue
		}
		var key strings.Builder
		for _, f := range es[i].Flows {
			key.WriteString(f.From)
			key.WriteByte(0)
			key.WriteString(f.To)
			key.WriteByte(0)
		}
		if fl, ok := m.flows[key.String()]; ok {
			es[i].Flows = fl
			continue
		}
		for j, f := range es[i].Flows {
			es[i].Flows[j] = converge.ValueFlow{From: intern(f.From), To: intern(f.To)}
		}
		es[i].Flows = slices.Clip(es[i].Flows)
		m.flows[key.String()] = es[i].Flows
	}
}

// intern returns the canonical copy of s: the model holds each distinct
// event type and message, flow path and producer ID once.
func intern(s string) string { return unique.Make(s).Value() }

// keysOf returns the lists e appears on.
func keysOf(e *entry) []listKey {
	k := e.id.Kind()
	return []listKey{{Kind: k}, {Kind: k, Phase: e.phase}, {Phase: e.phase}}
}

// insertSorted inserts id into s (sorted) unless present.
func insertSorted(s []converge.ID, id converge.ID) []converge.ID {
	i, ok := slices.BinarySearch(s, id)
	if ok {
		return s
	}
	return slices.Insert(s, i, id)
}

// removeSorted removes id from s (sorted) if present.
func removeSorted(s []converge.ID, id converge.ID) []converge.ID {
	i, ok := slices.BinarySearch(s, id)
	if !ok {
		return s
	}
	return slices.Delete(s, i, i+1)
}

// specPaths returns the secret paths of id's spec: its kind's, plus every
// flow target fed from a secret status path of a producer.
func (m *model) specPaths(id converge.ID) [][]string {
	if len(m.secrets) == 0 {
		return nil
	}
	var paths [][]string
	if sp := m.secrets[id.Kind()]; sp != nil {
		paths = append(paths, sp.spec...)
	}
	for _, e := range m.consumes[id] {
		psp := m.secrets[e.Producer.Kind()]
		if psp == nil {
			continue
		}
		for _, f := range e.Flows {
			if hasPath(psp.status, f.From) {
				paths = append(paths, strings.Split(f.To, "."))
			}
		}
	}
	return paths
}

func (m *model) statusPaths(id converge.ID) [][]string {
	if sp := m.secrets[id.Kind()]; sp != nil {
		return sp.status
	}
	return nil
}

// setSecrets records the secret values of e, keeping secretVals counted;
// it reports whether the set of values changed.
func (m *model) setSecrets(e *entry, vals []string) bool {
	changed := false
	for _, v := range e.secrets {
		m.secretVals[v]--
		if m.secretVals[v] <= 0 {
			delete(m.secretVals, v)
			changed = true
		}
	}
	e.secrets = vals
	for _, v := range vals {
		if m.secretVals[v] == 0 {
			changed = true
		}
		m.secretVals[v]++
	}
	return changed
}

// clean scrubs every secret value from s.
func (m *model) clean(s string) string {
	if m.scrub == nil || s == "" {
		return s
	}
	return m.scrub.Replace(s)
}

// shortReason is the one-line reason shown in list rows.
func shortReason(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if len(s) > 160 {
		cut := 160
		for cut > 0 && !utf8Start(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// rootOf returns the root of id's ownership chain (id itself when it has
// no owner). A chain through a missing owner or a cycle ends where it
// breaks.
func (m *model) rootOf(id converge.ID) converge.ID {
	for i := 0; i < 256; i++ {
		e := m.res[id]
		if e == nil || e.owner == "" || m.res[e.owner] == nil {
			return id
		}
		id = e.owner
	}
	return id
}

// tally recomputes counts, per-kind counts, roots and rollups from
// scratch; adjust keeps them between tallies.
func (m *model) tally() {
	m.counts = converge.Counts{}
	m.byKind = make(map[string]*converge.Counts)
	m.rollup = make(map[converge.ID]*converge.Counts)
	m.kindRollup = make(map[converge.ID]map[string]*converge.Counts)
	m.kindEdges = make(map[converge.ID]map[[2]string]int)
	m.roots = m.roots[:0]
	for id, e := range m.res {
		if e.owner == "" {
			m.roots = append(m.roots, id)
			m.rollup[id] = new(converge.Counts)
		}
	}
	sort.Slice(m.roots, func(i, j int) bool { return m.roots[i] < m.roots[j] })
	for _, e := range m.res {
		m.adjust(e, 1)
	}
}

// adjust counts e (d = 1) or uncounts it (d = -1) in the totals, its
// kind's counts and its root's rollups. The owner chain of e must be in
// the model.
func (m *model) adjust(e *entry, d int) {
	addPhase(&m.counts, e.phase, d)
	k := e.id.Kind()
	c := m.byKind[k]
	if c == nil {
		c = new(converge.Counts)
		m.byKind[k] = c
	}
	addPhase(c, e.phase, d)
	root := m.rootOf(e.id)
	rc := m.rollup[root]
	if rc == nil {
		return
	}
	addPhase(rc, e.phase, d)
	kr := m.kindRollup[root]
	if kr == nil {
		kr = make(map[string]*converge.Counts)
		m.kindRollup[root] = kr
	}
	kc := kr[k]
	if kc == nil {
		kc = new(converge.Counts)
		kr[k] = kc
	}
	addPhase(kc, e.phase, d)
}

// subtree returns root and its descendants, breadth first.
func (m *model) subtree(root converge.ID) []converge.ID {
	out := []converge.ID{root}
	seen := map[converge.ID]bool{root: true}
	for i := 0; i < len(out); i++ {
		for _, c := range m.children[out[i]] {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	return out
}

// isGraphRoot reports whether id gets a composition graph: a root that
// owns something.
func (m *model) isGraphRoot(id converge.ID) bool {
	e := m.res[id]
	return e != nil && e.owner == "" && len(m.children[id]) > 0
}

// idOf returns the model's copy of id when it holds the resource, else
// id.
func (m *model) idOf(id converge.ID) converge.ID {
	if e := m.res[id]; e != nil {
		return e.id
	}
	return id
}

// addEvents merges evs (oldest first) into the per-resource windows (at
// most 2×keep events; pages show the newest keep) and returns the resources that got new ones.
func (m *model) addEvents(evs []converge.Event, keep int) map[converge.ID]bool {
	touched := make(map[converge.ID]bool)
	for _, ev := range evs {
		if ev.Seq <= m.lastSeq && m.lastSeq != 0 {
			continue
		}
		at := int64(noTime)
		if !ev.Time.IsZero() {
			at = ev.Time.UnixNano()
		}
		w, ok := m.events[ev.Resource]
		w = append(w, event{at: at, typ: intern(ev.Type), msg: intern(ev.Message)})
		if len(w) > 2*keep {
			w = append(w[:0:0], w[len(w)-keep:]...)
		}
		if ok {
			m.events[ev.Resource] = w
		} else {
			// A new key shares the model's copy of the ID instead of
			// keeping the one decoded with the event.
			m.events[m.idOf(ev.Resource)] = w
		}
		touched[ev.Resource] = true
	}
	for _, ev := range evs {
		if ev.Seq > m.lastSeq {
			m.lastSeq = ev.Seq
		}
	}
	return touched
}
