package site

import (
	"context"
	"fmt"
	"html/template"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"golang.org/x/sync/errgroup"
)

// Options tune a Builder. The zero value is usable.
type Options struct {
	// Title names the site in every page header; default "converge".
	Title string
	// BaseURL is the absolute URL the site is served at; when set, each
	// page carries a canonical link. Links between pages stay relative.
	BaseURL string
	// PageSize is the number of rows of a list page; default 500.
	PageSize int
	// Events is the number of newest events a resource page shows;
	// default 50.
	Events int
	// Revisions is the number of newest revisions on the index; default 50.
	Revisions int
	// Roots is the number of roots on the index and in summary.json;
	// default 500.
	Roots int
	// Children is the number of children linked from a resource page;
	// default 500.
	Children int
	// GraphNodes is the largest subtree drawn node by node; a bigger one
	// is drawn as one box per kind. Default 80.
	GraphNodes int
	// Now returns the time stamped on pages; default time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Title == "" {
		o.Title = "converge"
	}
	if o.PageSize <= 0 {
		o.PageSize = 500
	}
	if o.Events <= 0 {
		o.Events = 50
	}
	if o.Revisions <= 0 {
		o.Revisions = 50
	}
	if o.Roots <= 0 {
		o.Roots = 500
	}
	if o.Children <= 0 {
		o.Children = 500
	}
	if o.GraphNodes <= 0 {
		o.GraphNodes = 80
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// scanPage is how many resources Build reads per read transaction.
const scanPage = 2000

// Stats says what one Build or Update did.
type Stats struct {
	// Resources is the number of resources in the store.
	Resources int
	// Files counts files written; Unchanged, files Build left alone
	// because they already held the same bytes; Removed, files removed.
	Files, Unchanged, Removed int
	// Bytes is the total size of the files written.
	Bytes int64
	// Largest is the size of the biggest file Build or Update produced
	// (written or found unchanged) and LargestFile its path.
	Largest     int64
	LargestFile string
	// Elapsed is the wall time of the call.
	Elapsed time.Duration
}

// Builder writes the site of one store into one directory and keeps an
// in-memory picture of the store so Update rewrites only what changed. It
// is safe for concurrent use; calls are serialized.
type Builder struct {
	r    Reader
	dir  string
	opts Options

	mu      sync.Mutex               // guards m, now and headers
	m       *model                   // nil until the first Build
	now     time.Time                // the stamp of the call in progress
	headers map[string]template.HTML // page header by depth, for the call in progress
	// oneShot is set by the package-level Build, after which no Update
	// can follow: the model keeps no list rows and no groupings for one.
	oneShot bool
}

// NewBuilder returns a Builder that reads r and writes into dir.
func NewBuilder(r Reader, dir string, opts Options) *Builder {
	return &Builder{r: r, dir: dir, opts: opts.withDefaults()}
}

// Build writes the whole site of r into dir and returns what it did. dir
// must be absent, empty, or a site an earlier Build wrote (ErrNotSite
// otherwise); files of an earlier build that are no longer part of the
// site are removed. Unlike Builder.Build it keeps nothing for an Update:
// list rows and groupings are dropped once written.
func Build(ctx context.Context, r Reader, dir string, opts Options) (*Stats, error) {
	b := NewBuilder(r, dir, opts)
	b.oneShot = true
	return b.Build(ctx)
}

// Build writes the whole site, as the package-level Build does, and keeps
// the picture Update needs.
func (b *Builder) Build(ctx context.Context) (*Stats, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.build(ctx)
}

func (b *Builder) build(ctx context.Context) (*Stats, error) {
	start := time.Now()
	b.now = b.opts.Now()
	if err := prepare(b.dir); err != nil {
		return nil, fmt.Errorf("build site: %w", err)
	}
	m := newModel()
	kinds, err := b.r.Kinds(ctx)
	if err != nil {
		return nil, fmt.Errorf("build site: %w", err)
	}
	m.secrets = secretsByKind(kinds)
	if m.configVals, err = configSecrets(ctx, b.r, kinds); err != nil {
		return nil, fmt.Errorf("build site: %w", err)
	}
	for _, v := range m.configVals {
		m.secretVals[v]++
	}
	kindSet := make(map[string]bool)
	for _, k := range kinds {
		kindSet[k.Name] = true
	}
	// Pass 1: the model, from a paged scan (resources in ID order, so
	// every slice below is sorted). Only entries are kept; pages read
	// their resources again, a shard at a time.
	// Secret values come from specs and statuses; without a kind that
	// declares secret paths the scan copies none of them.
	for rows := range b.scan(ctx, len(m.secrets) == 0, &err) {
		for _, row := range rows {
			r := row.Resource
			id := r.ID()
			e := &entry{id: id, phase: r.Phase, owner: r.Owner, updated: r.UpdatedAt, reason: shortReason(r.Reason)}
			m.res[id] = e
			kindSet[r.Kind] = true
			if r.Owner != "" {
				m.children[r.Owner] = append(m.children[r.Owner], id)
			}
			for _, k := range keysOf(e) {
				m.lists[k] = append(m.lists[k], id)
			}
			sk := shardOf(id)
			m.shards[sk] = append(m.shards[sk], id)
			if len(row.Consumes) > 0 {
				m.compactEdges(id, row.Consumes)
				m.consumes[id] = row.Consumes
			}
			for _, e := range row.Consumes {
				m.producedFor[e.Producer] = append(m.producedFor[e.Producer], id)
			}
		}
		// A producer's secret paths may reach a consumer's spec through
		// a flow: its kind is known, so the consumer's paths are too.
		for _, row := range rows {
			if vals := m.secretValues(row.Resource); len(vals) > 0 {
				m.setSecrets(m.res[row.Resource.ID()], vals)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("build site: %w", err)
	}
	// producedFor lists were appended in consumer order: sorted.
	for k := range kindSet {
		m.kindNames = append(m.kindNames, k)
	}
	sort.Strings(m.kindNames)
	evs, err := b.r.Events(ctx, "", 0)
	if err != nil {
		return nil, fmt.Errorf("build site: %w", err)
	}
	m.addEvents(evs, b.opts.Events)
	evs = nil
	if err := b.readRevisions(ctx, m); err != nil {
		return nil, err
	}
	m.scrub = newScrubber(m.secretVals)
	if m.scrub != nil {
		for _, e := range m.res {
			e.reason = m.clean(e.reason)
		}
	}
	m.tally()
	b.m = m
	if err := b.prepareHeaders(); err != nil {
		b.m = nil
		return nil, err
	}

	w := &writer{dir: b.dir}
	keep := make(map[string]bool)
	if err := b.streamShards(ctx, w, keep); err != nil {
		b.m = nil
		return nil, err
	}
	for _, kind := range m.kindNames {
		for _, k := range phaseKeys(kind) {
			m.segs[k] = b.segStarts(k)
		}
	}
	// A kind's rows first, each once and on every core; then its pages,
	// which only read them. A one-shot Build drops the rows once they
	// are on their pages.
	for _, kind := range m.kindNames {
		var pages []listPageRef
		for _, k := range append([]listKey{{Kind: kind}}, phaseKeys(kind)...) {
			for p := 1; p <= b.pageCount(k, len(m.lists[k])); p++ {
				pages = append(pages, listPageRef{k, p})
				keep[k.path(p)] = true
			}
		}
		if err := b.writeListsOf(w, m.lists[listKey{Kind: kind}], pages); err != nil {
			b.m = nil
			return nil, err
		}
	}
	var pages []listPageRef
	var ids []converge.ID
	for _, ph := range converge.Phases {
		k := listKey{Phase: ph}
		for p := 1; p <= b.pageCount(k, len(m.lists[k])); p++ {
			pages = append(pages, listPageRef{k, p})
			keep[k.path(p)] = true
			lo, hi := b.pageRows(k, p)
			ids = append(ids, m.lists[k][lo:hi]...)
		}
	}
	if err := b.writeListsOf(w, ids, pages); err != nil {
		b.m = nil
		return nil, err
	}
	for _, id := range m.roots {
		if m.isGraphRoot(id) {
			if err := b.writeGraph(w, id); err != nil {
				b.m = nil
				return nil, err
			}
			keep[GraphPath(id)] = true
		}
	}
	for _, id := range m.roots {
		if _, err := b.writeGroups(w, id, nil, keep); err != nil {
			b.m = nil
			return nil, err
		}
		if b.oneShot {
			delete(m.groupings, id)
		}
	}
	if err := b.writeTop(w, true); err != nil {
		b.m = nil
		return nil, err
	}
	removed, err := prune(b.dir, keep)
	if err != nil {
		b.m = nil
		return nil, err
	}
	return &Stats{Resources: len(m.res), Files: w.files, Unchanged: w.same, Removed: removed, Bytes: w.bytes,
		Largest: w.largest, LargestFile: w.largestName, Elapsed: time.Since(start)}, nil
}

// secretValues returns the secret strings in r's spec and status.
func (m *model) secretValues(r *converge.Resource) []string {
	var vals []string
	if p := m.specPaths(r.ID()); len(p) > 0 {
		_, v := redact(r.Spec, p)
		vals = append(vals, v...)
		_, v = redact(r.Declared, p)
		vals = append(vals, v...)
	}
	if p := m.statusPaths(r.ID()); len(p) > 0 {
		_, v := redact(r.Status, p)
		vals = append(vals, v...)
	}
	return vals
}

func (b *Builder) readRevisions(ctx context.Context, m *model) error {
	var err error
	if m.revisions, err = b.r.Revisions(ctx, b.opts.Revisions); err != nil {
		return fmt.Errorf("build site: %w", err)
	}
	if m.applied, err = b.r.Applied(ctx); err != nil {
		return fmt.Errorf("build site: %w", err)
	}
	if cr, ok := b.r.(ControlReader); ok {
		if m.control, err = cr.Control(ctx); err != nil {
			return fmt.Errorf("build site: %w", err)
		}
	}
	return nil
}

// scan reads every resource (without declared spec, spec and status if
// heads), a page at a time, on its own goroutine (the store decodes while
// the caller builds its model), and sets *errp to the first error after
// the last page.
func (b *Builder) scan(ctx context.Context, heads bool, errp *error) <-chan []state.ResourceRow {
	read := b.r.ResourcesAfter
	if heads {
		read = b.r.ResourceHeadsAfter
	}
	out := make(chan []state.ResourceRow, 2)
	go func() {
		defer close(out)
		var after converge.ID
		for {
			rows, err := read(ctx, "", after, scanPage)
			if err != nil {
				*errp = err
				return
			}
			out <- rows
			if len(rows) < scanPage {
				return
			}
			after = rows[len(rows)-1].Resource.ID()
		}
	}()
	return out
}

// phaseKeys returns the lists of kind in each phase.
func phaseKeys(kind string) []listKey {
	out := make([]listKey, len(converge.Phases))
	for i, ph := range converge.Phases {
		out[i] = listKey{Kind: kind, Phase: ph}
	}
	return out
}

// listPageRef names one page of one list.
type listPageRef struct {
	k    listKey
	page int
}

// writeListsOf renders the rows of ids (each once) and writes pages,
// which show no other rows, on every core; a one-shot Build then drops
// the rows.
func (b *Builder) writeListsOf(w *writer, ids []converge.ID, pages []listPageRef) error {
	const chunk = 4096
	_ = parallel((len(ids)+chunk-1)/chunk, func(i int) error {
		for _, id := range ids[i*chunk : min((i+1)*chunk, len(ids))] {
			b.row(b.m.res[id])
		}
		return nil
	})
	if err := b.writeLists(w, pages); err != nil {
		return err
	}
	if b.oneShot {
		for _, id := range ids {
			b.m.res[id].row = ""
		}
	}
	return nil
}

// writeLists writes pages on every core; their rows must be rendered.
func (b *Builder) writeLists(w *writer, pages []listPageRef) error {
	workers := min(runtime.GOMAXPROCS(0), 4)
	ws := make([]*writer, workers)
	for i := range ws {
		ws[i] = &writer{dir: b.dir, atomic: w.atomic}
	}
	var next atomic.Int64
	err := parallelN(workers, func(i int) error {
		for {
			j := int(next.Add(1)) - 1
			if j >= len(pages) {
				return nil
			}
			if err := b.writeList(ws[i], pages[j].k, pages[j].page); err != nil {
				return err
			}
		}
	})
	for _, x := range ws {
		w.add(x)
	}
	return err
}

// parallel runs fn(0) … fn(n-1) on every core (at most 4 goroutines)
// and returns the first error.
func parallel(n int, fn func(i int) error) error {
	var next atomic.Int64
	return parallelN(min(runtime.GOMAXPROCS(0), 4, max(n, 1)), func(int) error {
		for {
			i := int(next.Add(1)) - 1
			if i >= n {
				return nil
			}
			if err := fn(i); err != nil {
				return err
			}
		}
	})
}

// parallelN runs fn(0) … fn(workers-1) at once and returns the first
// error.
func parallelN(workers int, fn func(worker int) error) error {
	var g errgroup.Group
	for i := range workers {
		g.Go(func() error { return fn(i) })
	}
	return g.Wait()
}

func (b *Builder) writeList(w *writer, k listKey, page int) error {
	out, err := b.renderList(w.buf[:0], k, page)
	if err == nil {
		w.buf = out // the next page reuses it
		err = w.write(k.path(page), out)
	}
	if err != nil {
		return fmt.Errorf("build site: %w", err)
	}
	return nil
}

func (b *Builder) writeGraph(w *writer, id converge.ID) error {
	rel := GraphPath(id)
	if err := w.write(rel, b.m.graphSVG(id, b.opts.GraphNodes, upTo(rel))); err != nil {
		return fmt.Errorf("build site: %w", err)
	}
	return nil
}

// writeTop writes index.html and summary.json, and the assets if asked.
func (b *Builder) writeTop(w *writer, assets bool) error {
	if assets {
		for _, name := range []string{"assets/site.css", "assets/site.js"} {
			data, err := assetFS.ReadFile(name)
			if err != nil {
				return fmt.Errorf("build site: %w", err)
			}
			if err := w.write(name, data); err != nil {
				return fmt.Errorf("build site: %w", err)
			}
		}
	}
	idx, err := b.renderIndex()
	if err == nil {
		err = w.write("index.html", idx)
	}
	if err != nil {
		return fmt.Errorf("build site: %w", err)
	}
	sum, err := b.renderSummary()
	if err == nil {
		err = w.write("summary.json", sum)
	}
	if err != nil {
		return fmt.Errorf("build site: %w", err)
	}
	idx, err = b.renderSearchIndex()
	if err == nil {
		err = w.write(SearchIndexFile, idx)
	}
	if err != nil {
		return fmt.Errorf("build site: %w", err)
	}
	return nil
}
