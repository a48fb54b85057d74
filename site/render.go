package site

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/convergehq/converge"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets/site.css assets/site.js
var assetFS embed.FS

// pages holds one parsed template set per page type; each defines
// "content" and shares "layout".
var pages = func() map[string]*template.Template {
	fm := template.FuncMap{"lower": func(v any) string { return strings.ToLower(fmt.Sprint(v)) }}
	base := template.Must(template.New("").Funcs(fm).ParseFS(templateFS, "templates/layout.html"))
	out := make(map[string]*template.Template)
	for _, p := range []string{"index", "list", "resource", "groups"} {
		out[p] = template.Must(template.Must(base.Clone()).ParseFS(templateFS, "templates/"+p+".html"))
	}
	return out
}()

// base is what every page's layout shows.
type base struct {
	Title, Site string
	Root        string // path from the page to the site root: "", "../", "../../"
	Revision    string
	// Pinned and Suspended are the operator's pin (converge rollback)
	// and suspensions, in words; empty when none.
	Pinned    string
	Suspended []string
	Counts    converge.Counts
	Generated string
	// Generation is when this build or update ran, to the nanosecond: an
	// open page compares it with summary.json's to know it is stale (two
	// updates within one second share their Generated stamp).
	Generation string
	Canonical  string
	// Header is the rendered page header, the same for every page at one
	// depth: rendered once per Build or Update (see prepareHeaders).
	Header template.HTML
}

// stamp formats t for pages ("" for the zero time).
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// generation formats t as a page's and summary.json's generation.
func generation(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func render(name string, data any) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, 8<<10))
	if err := pages[name].ExecuteTemplate(buf, "layout", data); err != nil {
		return nil, fmt.Errorf("render %s page: %w", name, err)
	}
	return buf.Bytes(), nil
}

// upTo returns the path from a file at rel to the site root.
func upTo(rel string) string { return strings.Repeat("../", strings.Count(rel, "/")) }

func (b *Builder) base(rel, title string) base {
	m := b.m
	bs := base{Title: title, Site: b.opts.Title, Root: upTo(rel), Counts: m.counts, Generated: stamp(b.now),
		Generation: generation(b.now), Header: b.headers[upTo(rel)]}
	if m.applied != nil {
		bs.Revision = m.applied.String()
	}
	if c := m.control; c != nil {
		if c.Pin != nil {
			bs.Pinned = c.Pin.String()
		}
		for _, s := range c.Suspended {
			bs.Suspended = append(bs.Suspended, s.String())
		}
	}
	if b.opts.BaseURL != "" {
		bs.Canonical = strings.TrimSuffix(b.opts.BaseURL, "/") + "/" + rel
	}
	return bs
}

// prepareHeaders renders the page header for each page depth from the
// current counts, before pages are rendered (concurrently) from it.
func (b *Builder) prepareHeaders() error {
	b.headers = make(map[string]template.HTML)
	for _, root := range []string{"", "../", "../../", "../../../"} {
		bs := b.base(root+"x", "")
		var buf bytes.Buffer
		if err := pages["index"].ExecuteTemplate(&buf, "header", bs); err != nil {
			return fmt.Errorf("render header: %w", err)
		}
		b.headers[root] = template.HTML(buf.String())
	}
	return nil
}

// href returns the link from the page at rel to resource id, or "" if id
// does not exist (so no link dangles).
func (b *Builder) href(rel string, id converge.ID) string {
	if id == "" || b.m.res[id] == nil {
		return ""
	}
	return upTo(rel) + ResourcePath(id)
}

// ---- index ----

type phaseCell struct {
	Phase converge.Phase
	N     int
	Href  string
}

type rootRow struct {
	ID        converge.ID
	Suspended bool
	Phase     converge.Phase
	Rollup    converge.Counts
	Href      string
	GraphHref string
}

type statusCell struct{ State, Description string }

type revRow struct {
	Name, Hash, Subject, Seen, Held string
	Applied, Pinned                 bool
	Statuses                        []statusCell
	Errors, Findings                []string
}

type kindRow struct {
	Name, Href string
	Cells      []phaseCell
	Total      int
}

type indexPage struct {
	Base       base
	Phases     []phaseCell
	PhaseNames []converge.Phase
	Roots      []rootRow
	MoreRoots  int
	Revisions  []revRow
	Kinds      []kindRow
}

func (b *Builder) renderIndex() ([]byte, error) {
	m := b.m
	const rel = "index.html"
	p := indexPage{Base: b.base(rel, "overview"), PhaseNames: converge.Phases}
	for _, ph := range converge.Phases {
		p.Phases = append(p.Phases, phaseCell{ph, phaseCount(&m.counts, ph), listKey{Phase: ph}.path(1)})
	}
	for i, id := range m.roots {
		if i >= b.opts.Roots {
			p.MoreRoots = len(m.roots) - i
			break
		}
		r := rootRow{ID: id, Phase: m.res[id].phase, Rollup: *m.rollup[id], Href: ResourcePath(id), Suspended: m.suspended(id)}
		if m.isGraphRoot(id) {
			r.GraphHref = GraphPath(id)
		}
		p.Roots = append(p.Roots, r)
	}
	for _, rec := range m.revisions {
		rr := revRow{Name: rec.Revision.String(), Hash: rec.Revision.Hash, Subject: m.clean(rec.Revision.Subject),
			Seen: stamp(rec.Seen), Held: m.clean(rec.Held),
			// A record stays Applied once it was; the badge is the current one's.
			Applied: rec.Applied && m.applied != nil && rec.Revision.Hash == m.applied.Hash,
			Pinned:  m.control != nil && m.control.Pin != nil && m.control.Pin.Revision.Hash == rec.Revision.Hash}
		for _, c := range []string{converge.ContextValidate, converge.ContextLint, converge.ContextSync} {
			s, _ := rec.Status(c)
			rr.Statuses = append(rr.Statuses, statusCell{s.State, m.clean(s.Description)})
		}
		for _, f := range rec.Errors {
			rr.Errors = append(rr.Errors, m.clean(f.String()))
		}
		for _, f := range rec.Findings {
			rr.Findings = append(rr.Findings, m.clean(f.String()))
		}
		p.Revisions = append(p.Revisions, rr)
	}
	for _, k := range m.kindNames {
		c := m.byKind[k]
		if c == nil {
			c = new(converge.Counts)
		}
		kr := kindRow{Name: k, Href: listKey{Kind: k}.path(1), Total: c.Total}
		for _, ph := range converge.Phases {
			kr.Cells = append(kr.Cells, phaseCell{ph, phaseCount(c, ph), listKey{Kind: k, Phase: ph}.path(1)})
		}
		p.Kinds = append(p.Kinds, kr)
	}
	return render("index", p)
}

// ---- summary.json ----

// Summary is summary.json: what an open page polls.
type Summary struct {
	Revision  string          `json:"revision"`
	Counts    converge.Counts `json:"counts"`
	Roots     []SummaryRoot   `json:"roots"`
	Generated time.Time       `json:"generated"`
	// Generation names the build or update that wrote this file, as the
	// data-generation of the pages it wrote.
	Generation string `json:"generation"`
}

// SummaryRoot is one root of summary.json: its phase and the counts of
// its whole subtree, itself included.
type SummaryRoot struct {
	ID     converge.ID     `json:"id"`
	Phase  converge.Phase  `json:"phase"`
	Rollup converge.Counts `json:"rollup"`
}

func (b *Builder) renderSummary() ([]byte, error) {
	m := b.m
	s := Summary{Counts: m.counts, Roots: []SummaryRoot{}, Generated: b.now.UTC().Truncate(time.Second),
		Generation: generation(b.now)}
	if m.applied != nil {
		s.Revision = m.applied.String()
	}
	for i, id := range m.roots {
		if i >= b.opts.Roots {
			break
		}
		s.Roots = append(s.Roots, SummaryRoot{id, m.res[id].phase, *m.rollup[id]})
	}
	out, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		return nil, fmt.Errorf("render summary: %w", err)
	}
	return append(out, '\n'), nil
}

// ---- lists ----

type filter struct {
	Label, Href string
	Current     bool
}

type pager struct {
	Page, Pages        int
	PrevHref, NextHref string
}

type listPage struct {
	Base    base
	Heading string
	Filters []filter
	Pager   pager
	// Rows stands for the NRows rows, written in after rendering (see
	// renderList).
	Rows  template.HTML
	NRows int
	// Set on a phase across kinds: how many in all, and by kind.
	Total  int
	ByKind []kindCell
}

type kindCell struct {
	Kind string
	N    int
	Href string
}

// pageCount returns how many pages list k of n rows has (at least one). A
// phase across kinds has one page: its first PageSize rows and links to
// the paginated lists of that phase by kind. So a phase change rewrites
// one page of it, not every page after the resource's position.
//
// A kind in one phase is paginated along its kind's pages (segments of
// PageSize resources): a page closes after the first segment that brings
// it to at least PageSize/2 rows, so pages hold PageSize/2 to 1.5×PageSize
// rows. The pages are a function of the current lists alone (Build and
// Update agree), and a phase change moves rows between the pages of one
// segment instead of shifting every later page.
func (b *Builder) pageCount(k listKey, n int) int {
	switch {
	case n == 0 || k.Kind == "":
		return 1
	case k.Phase != "":
		return len(b.m.segs[k])
	}
	return (n + b.opts.PageSize - 1) / b.opts.PageSize
}

// segStarts returns the kind segment at which each page of the kind-phase
// list k starts.
func (b *Builder) segStarts(k listKey) []int {
	m := b.m
	all, ids, size := m.lists[listKey{Kind: k.Kind}], m.lists[k], b.opts.PageSize
	starts := []int{0}
	start := 0
	for seg := 1; seg*size < len(all); seg++ {
		end, _ := slices.BinarySearch(ids, all[seg*size])
		if end == len(ids) {
			break
		}
		if end-start >= (size+1)/2 {
			starts = append(starts, seg)
			start = end
		}
	}
	return starts
}

// pageRows returns the positions [lo, hi) of page (1-based) in list k.
func (b *Builder) pageRows(k listKey, page int) (int, int) {
	m := b.m
	ids, size := m.lists[k], b.opts.PageSize
	if k.Kind == "" || k.Phase == "" {
		lo := min((page-1)*size, len(ids))
		return lo, min(lo+size, len(ids))
	}
	all, starts := m.lists[listKey{Kind: k.Kind}], m.segs[k]
	pos := func(seg int) int {
		if seg*size >= len(all) {
			return len(ids)
		}
		p, _ := slices.BinarySearch(ids, all[seg*size])
		return p
	}
	lo, hi := pos(starts[page-1]), len(ids)
	if page < len(starts) {
		hi = pos(starts[page])
	}
	return lo, hi
}

// pageOfSeg returns the page (1-based) of a kind-phase list holding
// segment seg.
func pageOfSeg(starts []int, seg int) int {
	i, found := slices.BinarySearch(starts, seg)
	if found {
		return i + 1
	}
	return max(i, 1)
}

// rowsMark stands for a list page's rows in its rendered layout.
const rowsMark = "<!--rows-->"

// renderList appends list k's page to dst.
func (b *Builder) renderList(dst []byte, k listKey, page int) ([]byte, error) {
	m := b.m
	rel := k.path(page)
	ids := m.lists[k]
	pages := b.pageCount(k, len(ids))
	heading := "all " + k.Kind
	switch {
	case k.Kind == "":
		heading = string(k.Phase) + " resources"
	case k.Phase != "":
		heading = k.Kind + " · " + string(k.Phase)
	}
	p := listPage{Base: b.base(rel, heading), Heading: heading, Pager: pager{Page: page, Pages: pages}}
	if page > 1 {
		p.Pager.PrevHref = upTo(rel) + k.path(page-1)
	}
	if page < pages {
		p.Pager.NextHref = upTo(rel) + k.path(page+1)
	}
	all := listKey{Kind: k.Kind}
	if k.Kind != "" {
		p.Filters = append(p.Filters, filter{"all", upTo(rel) + all.path(1), k.Phase == ""})
	}
	for _, ph := range converge.Phases {
		fk := listKey{Kind: k.Kind, Phase: ph}
		p.Filters = append(p.Filters, filter{string(ph), upTo(rel) + fk.path(1), k.Phase == ph})
	}
	if k.Kind == "" {
		p.Total = len(ids)
		for _, kn := range m.kindNames {
			if c := m.byKind[kn]; c != nil {
				if n := phaseCount(c, k.Phase); n > 0 {
					p.ByKind = append(p.ByKind, kindCell{kn, n, upTo(rel) + listKey{Kind: kn, Phase: k.Phase}.path(1)})
				}
			}
		}
	}
	lo, hi := b.pageRows(k, page)
	p.NRows, p.Rows = hi-lo, rowsMark
	frame, err := render("list", p)
	if err != nil {
		return nil, err
	}
	// The rows are spliced in, not copied through html/template: they
	// are HTML already, rendered once per resource.
	head, tail, _ := bytes.Cut(frame, []byte(rowsMark))
	n := len(head) + len(tail)
	for _, id := range ids[lo:hi] {
		n += len(b.row(m.res[id]))
	}
	out := slices.Grow(dst, n)
	out = append(out, head...)
	for _, id := range ids[lo:hi] {
		out = append(out, b.row(m.res[id])...)
	}
	return append(out, tail...), nil
}

// row returns e's row of a list page (every list page sits one directory
// below the root), rendered once and kept until e changes. Like a
// resource's section it is written by hand (a million rows through
// html/template cost ~18 s of CPU); every value goes through e.
func (b *Builder) row(ent *entry) template.HTML {
	if ent.row != "" {
		return ent.row
	}
	const up = "../" // upTo("kinds/x.html")
	buf := rowBufs.Get().(*bytes.Buffer)
	buf.Reset()
	w := sw{buf}
	w.s(`<tr><td>`)
	b.link(w, up, ent.id)
	w.s("</td><td>", phaseSpan(ent.phase), `</td><td class="reason">`)
	w.t(ent.reason)
	w.s("</td><td>")
	if b.known(ent.owner) {
		b.link(w, up, ent.owner)
	} else {
		w.t(string(ent.owner))
	}
	w.s("</td><td>")
	stampTo(w, ent.updated)
	w.s("</td></tr>\n")
	ent.row = template.HTML(buf.String())
	rowBufs.Put(buf)
	return ent.row
}

// rowBufs are the buffers rows are rendered in.
var rowBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// ---- search ----

// SearchIndexFile is the site's search index (see SearchIndex), written
// with summary.json by every Build and Update.
const SearchIndexFile = "search.json"

// SearchIndex is what the search box reads to find a resource by kind,
// name (a prefix) and phase on a site of any size without an index of
// every name: each kind's list (kinds/KIND.html, kinds/KIND-p2.html …,
// in name order) and the first name on each of its pages, so a name is
// on the last page whose first name is not after it. At a million
// resources of a kind that is 2,000 names, not a million.
type SearchIndex struct {
	PageSize int                   `json:"page_size"`
	Kinds    map[string]SearchKind `json:"kinds"`
	Phases   []converge.Phase      `json:"phases"`
}

// SearchKind is one kind of the search index.
type SearchKind struct {
	Count int `json:"count"`
	// Pages are the kind's list pages, relative to the site root; Firsts
	// the first name on each.
	Pages  []string `json:"pages"`
	Firsts []string `json:"firsts"`
}

func (b *Builder) renderSearchIndex() ([]byte, error) {
	m := b.m
	x := SearchIndex{PageSize: b.opts.PageSize, Kinds: map[string]SearchKind{}, Phases: converge.Phases}
	for _, k := range m.kindNames {
		lk := listKey{Kind: k}
		ids := m.lists[lk]
		sk := SearchKind{Count: len(ids), Pages: []string{}, Firsts: []string{}}
		for p := 1; p <= b.pageCount(lk, len(ids)); p++ {
			sk.Pages = append(sk.Pages, lk.path(p))
			if lo := (p - 1) * b.opts.PageSize; lo < len(ids) {
				sk.Firsts = append(sk.Firsts, ids[lo].Name())
			} else {
				sk.Firsts = append(sk.Firsts, "")
			}
		}
		x.Kinds[k] = sk
	}
	out, err := json.Marshal(x)
	if err != nil {
		return nil, fmt.Errorf("render search index: %w", err)
	}
	return append(out, '\n'), nil
}
