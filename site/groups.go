package site

import (
	"bytes"
	"fmt"
	"html/template"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/convergehq/converge"
)

// A big root's graph is one box per kind; its groups are how a person
// drills down from there. The subtree (the root left out) is cut into the
// connected parts of its dependency edges, each named after its hub: the
// member most resources depend on. In the classic shape a part is a
// functional domain, named after its transit gateway. A part too big to
// draw (over Options.GraphNodes) is cut again without its hub, into
// subgroups: the classic domain's teams (account, vpc, route). Pages:
//
//	groups/KIND/NAME.html            the root's groups, paginated, counts by phase
//	groups/KIND/NAME/HK.HN.html      one group: its graph node by node, or its
//	                                 subgroups paginated with their resources
//	groups/KIND/NAME/HK.HN.svg       a small group's graph
//
// All are small at any size: a page holds at most PageSize rows.

// grouping is a big root's subtree cut into groups.
type grouping struct {
	groups []*group            // sorted by hub
	of     map[converge.ID]int // member → its group's index
}

type group struct {
	hub  converge.ID
	ids  []converge.ID   // sorted, hub included
	subs [][]converge.ID // without the hub, each sorted, sorted by first ID; set when ids is too big to draw
}

// hasGroups reports whether root's graph is drawn by kind, so it has
// group pages.
func (m *model) hasGroups(root converge.ID, maxNodes int) bool {
	return m.isGraphRoot(root) && m.rollup[root] != nil && m.rollup[root].Total > maxNodes
}

// groupsOf cuts root's subtree into groups.
func (m *model) groupsOf(root converge.ID, maxNodes int) *grouping {
	members := m.subtree(root)[1:]
	slices.Sort(members)
	g := new(grouping)
	for _, comp := range components(members, m.consumes, "") {
		hub, most := comp[0], -1
		for _, id := range comp {
			if n := len(m.producedFor[id]); n > most {
				hub, most = id, n
			}
		}
		gr := &group{hub: hub, ids: comp}
		if len(comp) > maxNodes {
			gr.subs = components(comp, m.consumes, hub)
		}
		g.groups = append(g.groups, gr)
	}
	slices.SortFunc(g.groups, func(a, b *group) int { return compareID(a.hub, b.hub) })
	g.of = make(map[converge.ID]int, len(members))
	for i, gr := range g.groups {
		for _, id := range gr.ids {
			g.of[id] = i
		}
	}
	return g
}

// components returns the connected parts of ids (sorted) under the edges
// among them, leaving out skip: each sorted, sorted by first ID.
func components(ids []converge.ID, consumes map[converge.ID][]converge.Edge, skip converge.ID) [][]converge.ID {
	idx := make(map[converge.ID]int, len(ids))
	for i, id := range ids {
		idx[id] = i
	}
	parent := make([]int, len(ids))
	for i := range parent {
		parent[i] = i
	}
	find := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	for i, id := range ids {
		if id == skip {
			continue
		}
		for _, e := range consumes[id] {
			if j, ok := idx[e.Producer]; ok && e.Producer != skip {
				if a, b := find(i), find(j); a != b {
					parent[max(a, b)] = min(a, b)
				}
			}
		}
	}
	byRoot := make(map[int]int) // component root → index in out
	var out [][]converge.ID
	for i, id := range ids { // in ID order: parts come out sorted by first ID
		if id == skip {
			continue
		}
		r := find(i)
		k, ok := byRoot[r]
		if !ok {
			k = len(out)
			byRoot[r] = k
			out = append(out, nil)
		}
		out[k] = append(out[k], id)
	}
	return out
}

func groupsDir(root converge.ID) string {
	return "groups/" + seg(root.Kind()) + "/" + seg(root.Name())
}

func pageSuffix(page int) string {
	if page > 1 {
		return "-p" + strconv.Itoa(page)
	}
	return ""
}

// GroupsPath returns the page (1-based) of root's groups.
func GroupsPath(root converge.ID, page int) string {
	return groupsDir(root) + pageSuffix(page) + ".html"
}

func groupBase(root, hub converge.ID) string {
	return groupsDir(root) + "/" + seg(hub.Kind()) + "." + seg(hub.Name())
}

func groupPath(root, hub converge.ID, page int) string {
	return groupBase(root, hub) + pageSuffix(page) + ".html"
}

func groupGraphPath(root, hub converge.ID) string { return groupBase(root, hub) + ".svg" }

// countsOf returns the phase counts of ids.
func (m *model) countsOf(ids []converge.ID) converge.Counts {
	var c converge.Counts
	for _, id := range ids {
		if e := m.res[id]; e != nil {
			addPhase(&c, e.phase, 1)
		}
	}
	return c
}

type groupRow struct {
	Label, Href string
	Counts      converge.Counts
	Members     template.HTML // a subgroup's resources
}

type groupsPage struct {
	Base       base
	Heading    string
	Intro      template.HTML
	Root       link
	Graph      string
	Pager      pager
	Rows       template.HTML // see groupRows
	ShowCounts bool
}

// groupRows writes the rows of a groups page by hand, as the template
// once did (a million-resource root has ~350,000 of them; html/template
// spent ~15 µs on each): text is escaped as html/template escapes it,
// hrefs are made of file-name-safe segments.
func groupRows(rows []groupRow, showCounts bool) template.HTML {
	var sb strings.Builder
	n := 0
	for _, r := range rows {
		n += len(r.Members) + 2*len(r.Label) + 2*len(r.Href) + 128
	}
	sb.Grow(n)
	w := func(ss ...string) {
		for _, s := range ss {
			sb.WriteString(s)
		}
	}
	for _, r := range rows {
		w("<tr><td>")
		if r.Href != "" {
			w(`<a href="`, e(r.Href), `">`, tmplEscape.Replace(r.Label), "</a>")
		} else {
			w(tmplEscape.Replace(r.Label))
		}
		w("</td>")
		if showCounts {
			c := r.Counts
			w("<td>", strconv.Itoa(c.Ready), "</td><td>", strconv.Itoa(c.Failed), "</td><td>", strconv.Itoa(c.Pending),
				"</td><td>", strconv.Itoa(c.Running), "</td><td>", strconv.Itoa(c.Deleting), "</td>")
		}
		w("<td>")
		if r.Members != "" {
			w(string(r.Members))
		} else {
			w(strconv.Itoa(r.Counts.Total))
		}
		w("</td></tr>\n")
	}
	return template.HTML(sb.String())
}

// tmplEscape escapes text as html/template does in element content.
var tmplEscape = strings.NewReplacer("\x00", "\uFFFD", `"`, "&#34;", "&", "&amp;", "'", "&#39;", "+", "&#43;", "<", "&lt;", ">", "&gt;")

type link struct {
	ID   converge.ID
	Href string
}

// groupFiles renders root's group pages: path → bytes. With only nil,
// every page; else the list pages holding the groups of only's resources
// and those groups' pages.
func (b *Builder) groupFiles(root converge.ID, g *grouping, only []converge.ID) (map[string][]byte, error) {
	size := b.opts.PageSize
	out := make(map[string][]byte)
	listPages := make(map[int]bool)
	grs := make(map[int]map[int]bool) // group → its pages to render (nil: all)
	if only == nil {
		for p := 1; p <= max(1, (len(g.groups)+size-1)/size); p++ {
			listPages[p] = true
		}
		for i := range g.groups {
			grs[i] = nil
		}
	}
	for _, id := range only {
		i, ok := g.of[id]
		if !ok {
			continue
		}
		listPages[i/size+1] = true
		gr := g.groups[i]
		if gr.subs == nil {
			grs[i] = nil // drawn: its graph shows every phase
			continue
		}
		// A page of subgroups shows the phases of its own resources
		// only: rewrite the one holding id (none for the hub).
		for si, sub := range gr.subs {
			if _, found := slices.BinarySearch(sub, id); found {
				if ps, seen := grs[i]; !seen || ps != nil {
					if ps == nil {
						ps = make(map[int]bool)
						grs[i] = ps
					}
					ps[si/size+1] = true
				}
				break
			}
		}
	}
	for p := range listPages {
		if err := b.renderGroupList(out, root, g, p); err != nil {
			return nil, err
		}
	}
	// Groups render on every core: a million-resource root has
	// thousands of group pages.
	is := make([]int, 0, len(grs))
	for i := range grs {
		is = append(is, i)
	}
	var mu sync.Mutex // guards out
	err := parallel(len(is), func(j int) error {
		pages := make(map[string][]byte)
		if err := b.renderGroup(pages, root, g.groups[is[j]], grs[is[j]]); err != nil {
			return err
		}
		mu.Lock()
		maps.Copy(out, pages)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (b *Builder) renderGroupList(out map[string][]byte, root converge.ID, g *grouping, p int) error {
	m := b.m
	size := b.opts.PageSize
	n := max(1, (len(g.groups)+size-1)/size)
	rel := GroupsPath(root, p)
	up := upTo(rel)
	gp := groupsPage{Base: b.base(rel, "groups of "+string(root)), Heading: "groups of " + string(root),
		Root: link{root, b.href(rel, root)}, ShowCounts: true,
		Intro: template.HTML(fmt.Sprintf("%d groups: the parts of its %d resources connected by dependencies, each named after the resource most of them depend on.",
			len(g.groups), len(g.of))),
		Pager: pager{Page: p, Pages: n}}
	if p > 1 {
		gp.Pager.PrevHref = up + GroupsPath(root, p-1)
	}
	if p < n {
		gp.Pager.NextHref = up + GroupsPath(root, p+1)
	}
	var rows []groupRow
	for _, gr := range g.groups[(p-1)*size : min(p*size, len(g.groups))] {
		rows = append(rows, groupRow{Label: fmt.Sprintf("%s (%d)", gr.hub, len(gr.ids)),
			Href: up + groupPath(root, gr.hub, 1), Counts: m.countsOf(gr.ids)})
	}
	gp.Rows = groupRows(rows, gp.ShowCounts)
	page, err := render("groups", gp)
	if err != nil {
		return err
	}
	out[rel] = page
	return nil
}

// renderGroup renders gr's pages: those in pages, or all if pages is nil.
func (b *Builder) renderGroup(out map[string][]byte, root converge.ID, gr *group, pages map[int]bool) error {
	m := b.m
	size := b.opts.PageSize
	if gr.subs == nil {
		rel := groupPath(root, gr.hub, 1)
		gp := groupsPage{Base: b.base(rel, "group "+string(gr.hub)), Heading: "group " + string(gr.hub),
			Root: link{root, b.href(rel, root)}, Graph: upTo(rel) + groupGraphPath(root, gr.hub),
			Intro: template.HTML(e(fmt.Sprintf("%d resources of it, drawn node by node.", len(gr.ids))))}
		page, err := render("groups", gp)
		if err != nil {
			return err
		}
		out[rel] = page
		svgRel := groupGraphPath(root, gr.hub)
		ids := append([]converge.ID{gr.hub}, slices.DeleteFunc(slices.Clone(gr.ids), func(id converge.ID) bool { return id == gr.hub })...)
		out[svgRel] = m.fullGraph(gr.hub, ids, upTo(svgRel))
		return nil
	}
	n := max(1, (len(gr.subs)+size-1)/size)
	for p := 1; p <= n; p++ {
		if pages != nil && !pages[p] {
			continue
		}
		rel := groupPath(root, gr.hub, p)
		up := upTo(rel)
		gp := groupsPage{Base: b.base(rel, "group "+string(gr.hub)), Heading: "group " + string(gr.hub),
			Root: link{root, b.href(rel, root)}, ShowCounts: true,
			Intro: template.HTML(fmt.Sprintf(`%d resources of it: <a href="%s">%s</a> and %d subgroups that depend on it, connected among themselves (their counts by phase are on the list of groups).`,
				len(gr.ids), e(b.href(rel, gr.hub)), e(string(gr.hub)), len(gr.subs))),
			Pager: pager{Page: p, Pages: n}}
		if p > 1 {
			gp.Pager.PrevHref = up + groupPath(root, gr.hub, p-1)
		}
		if p < n {
			gp.Pager.NextHref = up + groupPath(root, gr.hub, p+1)
		}
		var rows []groupRow
		var sb bytes.Buffer
		w := sw{&sb}
		for _, sub := range gr.subs[(p-1)*size : min(p*size, len(gr.subs))] {
			sb.Reset()
			for i, id := range sub {
				if i >= 20 {
					w.s(` and `, strconv.Itoa(len(sub)-i), ` more`)
					break
				}
				// b.link, but for the phase: every member is known.
				w.s(`<a href="`)
				w.t(up)
				b.resourcePath(w, id)
				w.s(`">`)
				w.t(string(id))
				w.s(`</a> `, phaseSpan(m.res[id].phase), " ")
			}
			rows = append(rows, groupRow{Label: fmt.Sprintf("%s (%d)", sub[0], len(sub)), Counts: m.countsOf(sub),
				Members: template.HTML(sb.String())})
		}
		gp.Rows = groupRows(rows, gp.ShowCounts)
		page, err := render("groups", gp)
		if err != nil {
			return err
		}
		out[rel] = page
	}
	return nil
}

// writeGroups writes root's group pages (none if its graph is not by
// kind). With only nil it computes root's grouping afresh, writes every
// page and removes those of the earlier grouping it no longer has; else
// the grouping is unchanged (only phases changed) and it writes the pages
// showing only's resources. Update leaves alone a file already holding
// the same bytes.
func (b *Builder) writeGroups(w *writer, root converge.ID, only []converge.ID, keep map[string]bool) (removed int, err error) {
	m := b.m
	files := map[string][]byte{}
	g := m.groupings[root]
	if only == nil || g == nil {
		only, g = nil, nil
		delete(m.groupings, root)
		if m.res[root] != nil && m.hasGroups(root, b.opts.GraphNodes) {
			g = m.groupsOf(root, b.opts.GraphNodes)
			m.groupings[root] = g
		}
	}
	if g != nil {
		if files, err = b.groupFiles(root, g, only); err != nil {
			return 0, fmt.Errorf("build site: %w", err)
		}
	}
	if only == nil {
		for name := range m.groupFiles[root] {
			if _, ok := files[name]; !ok {
				if err := w.remove(name); err != nil {
					return removed, fmt.Errorf("build site: %w", err)
				}
				removed++
			}
		}
		delete(m.groupFiles, root)
	}
	for name, data := range files {
		if keep != nil {
			keep[name] = true
		}
		if m.groupFiles[root] == nil {
			m.groupFiles[root] = make(map[string]bool)
		}
		m.groupFiles[root][name] = true
		// An update leaves a group page whose body is unchanged: its
		// header (the global counts, the stamp) is what open pages take
		// from summary.json anyway, and a big root has thousands of
		// group pages, which an update of a live converge rewrote every
		// time for their headers (seconds each: the live site fell
		// behind by that much).
		if w.atomic && sameBody(w.dir, name, data) {
			continue
		}
		if err := w.write(name, data); err != nil {
			return removed, fmt.Errorf("build site: %w", err)
		}
	}
	return removed, nil
}

// groupsLink is the text the kind graph shows under its legend.
func groupsLink(root converge.ID, up string) string {
	return `<a href="` + esc(up+GroupsPath(root, 1)) + `" target="_top"><text x="` + strconv.Itoa(marginX+5*90+20) +
		`" y="23" fill="#1565c0" text-decoration="underline">` + esc(strings.ToLower("groups by dependency →")) + `</text></a>` + "\n"
}
