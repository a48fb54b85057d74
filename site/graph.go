package site

import (
	"fmt"
	"html"
	"sort"
	"strings"

	"github.com/convergehq/converge"
)

// phaseColor is the fill of a node in each phase.
var phaseColor = map[converge.Phase]string{
	converge.PhaseReady:    "#2e7d32",
	converge.PhaseFailed:   "#c62828",
	converge.PhasePending:  "#5f6b76",
	converge.PhaseRunning:  "#1565c0",
	converge.PhaseDeleting: "#b04500",
}

func colorOf(p converge.Phase) string {
	if c, ok := phaseColor[p]; ok {
		return c
	}
	return "#555555"
}

// esc escapes s for XML text and attribute values.
func esc(s string) string { return html.EscapeString(s) }

// clip shortens s to at most n runes, marking the cut with "…".
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// graph layout constants, in SVG user units. Layers are columns, left to
// right by dependency depth; nodes of a layer stack top to bottom.
const (
	nodeW   = 200
	nodeH   = 40
	gapX    = 90 // between columns, room for edges
	gapY    = 12
	marginX = 20
	legendH = 44
)

// graphSVG renders root's composition graph: every node and edge when the
// subtree has at most maxNodes resources, otherwise one box per kind with
// phase counts and edges between kinds (so the SVG stays small for a whole
// BOM). up is the path from the SVG's directory to the site root.
func (m *model) graphSVG(root converge.ID, maxNodes int, up string) []byte {
	if rc := m.rollup[root]; rc == nil || rc.Total <= maxNodes {
		return m.fullGraph(root, m.subtree(root), up)
	}
	return m.kindGraph(root, up)
}

// placed is a box of the layout.
type placed struct{ x, y int }

// layers orders nodes by dependency depth: deps(n) lists the nodes n
// depends on; depth is 0 without dependencies, else one more than the
// deepest dependency (cycles are cut). Within a layer nodes follow the
// mean position of their dependencies, then their key.
func layers(nodes []string, deps func(string) []string) [][]string {
	depth := make(map[string]int, len(nodes))
	state := make(map[string]int8, len(nodes)) // 1 visiting, 2 done
	in := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		in[n] = true
	}
	var visit func(n string) int
	visit = func(n string) int {
		switch state[n] {
		case 1:
			return -1 // a cycle: ignore this dependency
		case 2:
			return depth[n]
		}
		state[n] = 1
		d := 0
		for _, p := range deps(n) {
			if in[p] && p != n {
				if pd := visit(p); pd >= 0 && pd+1 > d {
					d = pd + 1
				}
			}
		}
		state[n] = 2
		depth[n] = d
		return d
	}
	maxD := 0
	for _, n := range nodes {
		if d := visit(n); d > maxD {
			maxD = d
		}
	}
	out := make([][]string, maxD+1)
	for _, n := range nodes {
		out[depth[n]] = append(out[depth[n]], n)
	}
	pos := make(map[string]float64, len(nodes))
	for li, l := range out {
		score := make(map[string]float64, len(l))
		for _, n := range l {
			sum, k := 0.0, 0
			for _, p := range deps(n) {
				if v, ok := pos[p]; ok {
					sum += v
					k++
				}
			}
			if k > 0 {
				score[n] = sum / float64(k)
			} else {
				score[n] = 1e9
			}
		}
		sort.SliceStable(l, func(i, j int) bool {
			if score[l[i]] != score[l[j]] {
				return score[l[i]] < score[l[j]]
			}
			return l[i] < l[j]
		})
		for i, n := range l {
			pos[n] = float64(i)
		}
		out[li] = l
	}
	return out
}

// place lays out layers as columns of boxes of size w×h starting at y0;
// it returns positions, total width and height.
func place(ls [][]string, w, h, y0 int) (map[string]placed, int, int) {
	at := make(map[string]placed)
	tall := 0
	for _, l := range ls {
		tall = max(tall, len(l)*(h+gapY))
	}
	for col, l := range ls {
		x := marginX + col*(w+gapX)
		y := y0 // top-aligned, so a chain of one team reads as one row
		for i, n := range l {
			at[n] = placed{x, y + i*(h+gapY)}
		}
	}
	return at, 2*marginX + len(ls)*w + (len(ls)-1)*gapX, y0 + tall + gapY
}

func svgOpen(b *strings.Builder, w, h int, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(b, "<title>%s</title>\n", esc(title))
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>` + "\n")
	b.WriteString(`<rect width="100%" height="100%" fill="#ffffff"/>` + "\n")
	x := marginX
	for _, p := range converge.Phases {
		fmt.Fprintf(b, `<rect x="%d" y="12" width="14" height="14" rx="3" fill="%s"/><text x="%d" y="23">%s</text>`+"\n", x, colorOf(p), x+18, esc(string(p)))
		x += 90
	}
}

func edgeLine(b *strings.Builder, from, to placed, w, h int, title string, dashed bool) {
	x1, y1 := from.x+w, from.y+h/2
	x2, y2 := to.x, to.y+h/2
	if to.x <= from.x { // same column or backwards: bottom to top
		x1, y1 = from.x+w/2, from.y+h
		x2, y2 = to.x+w/2, to.y
		if to.y < from.y {
			y1, y2 = from.y, to.y+h
		}
	}
	dash := ""
	if dashed {
		dash = ` stroke-dasharray="4 3"`
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#555" stroke-width="1.2"%s marker-end="url(#arrow)"><title>%s</title></line>`+"\n", x1, y1, x2, y2, dash, esc(title))
}

// fullGraph draws every node of the subtree: the root on top, the others
// layered by dependency depth, edges from producer to consumer, ownership
// below the root dashed.
func (m *model) fullGraph(root converge.ID, ids []converge.ID, up string) []byte {
	in := make(map[converge.ID]bool, len(ids))
	for _, id := range ids {
		in[id] = true
	}
	var rest []string
	for _, id := range ids[1:] {
		rest = append(rest, string(id))
	}
	deps := func(n string) []string {
		var out []string
		for _, e := range m.consumes[converge.ID(n)] {
			out = append(out, string(e.Producer))
		}
		return out
	}
	ls := append([][]string{{string(root)}}, layers(rest, deps)...)
	at, width, height := place(ls, nodeW, nodeH, legendH)
	var b strings.Builder
	svgOpen(&b, width, height, "composition of "+string(root))
	for _, id := range ids[1:] {
		to := at[string(id)]
		for _, e := range m.consumes[id] {
			if !in[e.Producer] {
				continue
			}
			var fl []string
			for _, f := range e.Flows {
				fl = append(fl, e.Producer.Name()+".status."+f.From+" → spec."+f.To)
			}
			title := string(e.Producer) + " → " + string(id)
			if len(fl) > 0 {
				title += ": " + strings.Join(fl, ", ")
			}
			edgeLine(&b, at[string(e.Producer)], to, nodeW, nodeH, title, false)
		}
		if o := m.res[id].owner; o != root && in[o] {
			edgeLine(&b, at[string(o)], to, nodeW, nodeH, string(o)+" owns "+string(id), true)
		}
	}
	for _, id := range ids {
		e := m.res[id]
		p := at[string(id)]
		const text = "#ffffff" // every phase's fill holds white text at ≥ 4.5:1 (TestContrast)
		fmt.Fprintf(&b, `<a href="%s" target="_top"><g><title>%s: %s</title>`, esc(up+ResourcePath(id)), esc(string(id)), esc(string(e.phase)))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" rx="6" fill="%s" stroke="#222" stroke-width="0.6"/>`, p.x, p.y, nodeW, nodeH, colorOf(e.phase))
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s" font-size="11">%s · %s</text>`, p.x+8, p.y+15, text, esc(clip(id.Kind(), 14)), esc(string(e.phase)))
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s" font-weight="bold">%s</text></g></a>`+"\n", p.x+8, p.y+32, text, esc(clip(id.Name(), 26)))
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// kindGraph summarizes a big subtree: the root, then one box per kind with
// its count and a bar of phase counts, layered by the dependencies between
// kinds, edges labelled with how many resource edges they stand for.
func (m *model) kindGraph(root converge.ID, up string) []byte {
	counts := make(map[string]*converge.Counts) // the subtree without root, by kind
	for k, c := range m.kindRollup[root] {
		cc := *c
		if k == root.Kind() {
			addPhase(&cc, m.res[root].phase, -1)
		}
		if cc.Total > 0 {
			counts[k] = &cc
		}
	}
	kindEdges := m.kindEdgesOf(root)
	var kinds []string
	for k := range counts {
		kinds = append(kinds, "kind:"+k)
	}
	sort.Strings(kinds)
	deps := func(n string) []string {
		var out []string
		for ke := range kindEdges {
			if "kind:"+ke[0] == n && ke[0] != ke[1] {
				out = append(out, "kind:"+ke[1])
			}
		}
		sort.Strings(out)
		return out
	}
	const w, h = 280, 74
	ls := append([][]string{{"root"}}, layers(kinds, deps)...)
	at, width, height := place(ls, w, h, legendH)
	var b strings.Builder
	svgOpen(&b, width, height, fmt.Sprintf("composition of %s: %d resources by kind", root, m.rollup[root].Total))
	b.WriteString(groupsLink(root, up))
	keys := make([][2]string, 0, len(kindEdges))
	for ke := range kindEdges {
		keys = append(keys, ke)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+"/"+keys[i][1] < keys[j][0]+"/"+keys[j][1] })
	for _, ke := range keys {
		if kindEdges[ke] == 0 {
			continue
		}
		from, ok1 := at["kind:"+ke[1]]
		to, ok2 := at["kind:"+ke[0]]
		if !ok1 || !ok2 || ke[0] == ke[1] {
			continue
		}
		edgeLine(&b, from, to, w, h, fmt.Sprintf("%d edges: %s → %s", kindEdges[ke], ke[1], ke[0]), false)
		mx, my := (from.x+w+to.x)/2, (from.y+to.y+h)/2
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#333" font-size="11" text-anchor="middle">%d</text>`+"\n", mx, my-4, kindEdges[ke])
	}
	// The root.
	re := m.res[root]
	p := at["root"]
	var rc converge.Counts
	if c := m.rollup[root]; c != nil {
		rc = *c
	}
	fmt.Fprintf(&b, `<a href="%s" target="_top"><g><title>%s: %s</title>`, esc(up+ResourcePath(root)), esc(string(root)), esc(string(re.phase)))
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" rx="6" fill="%s" stroke="#222" stroke-width="0.6"/>`, p.x, p.y, w, h, colorOf(re.phase))
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#fff" font-weight="bold">%s</text>`, p.x+8, p.y+20, esc(clip(string(root), 38)))
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#fff">%s · %d/%d Ready</text></g></a>`+"\n", p.x+8, p.y+42, esc(string(re.phase)), rc.Ready, rc.Total)
	for _, n := range kinds {
		k := strings.TrimPrefix(n, "kind:")
		c := counts[k]
		p := at[n]
		// The box opens the root's groups (its domains, then their
		// teams, then nodes); the "list" corner opens the kind's list.
		fmt.Fprintf(&b, `<a href="%s" target="_top"><g><title>%s: %d resources; open the groups by dependency</title>`, esc(up+GroupsPath(root, 1)), esc(k), c.Total)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" rx="6" fill="#f4f4f4" stroke="#222" stroke-width="0.6"/>`, p.x, p.y, w, h)
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#111" font-weight="bold">%s — %d</text>`, p.x+8, p.y+18, esc(clip(k, 24)), c.Total)
		x := p.x + 8
		bw := w - 16
		var parts []string
		for _, ph := range converge.Phases {
			n := phaseCount(c, ph)
			if n == 0 {
				continue
			}
			sw := bw * n / c.Total
			if sw < 2 {
				sw = 2
			}
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="12" fill="%s"><title>%s: %d</title></rect>`, x, p.y+28, sw, colorOf(ph), esc(string(ph)), n)
			x += sw
			parts = append(parts, fmt.Sprintf("%d %s", n, strings.ToLower(string(ph))))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#111" font-size="11">%s</text></g></a>`+"\n", p.x+8, p.y+60, esc(clip(strings.Join(parts, " · "), 44)))
		fmt.Fprintf(&b, `<a href="%s" target="_top"><title>every %s</title><text x="%d" y="%d" fill="#0d47a1" font-size="11" text-anchor="end" text-decoration="underline">list</text></a>`+"\n",
			esc(up+listKey{Kind: k}.path(1)), esc(k), p.x+w-8, p.y+18)
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// phaseCount returns c's count of phase p.
func phaseCount(c *converge.Counts, p converge.Phase) int {
	switch p {
	case converge.PhaseReady:
		return c.Ready
	case converge.PhaseFailed:
		return c.Failed
	case converge.PhasePending:
		return c.Pending
	case converge.PhaseRunning:
		return c.Running
	case converge.PhaseDeleting:
		return c.Deleting
	}
	return 0
}

// kindEdgesOf returns how many edges of root's subtree (root excluded) run
// from each consumer kind to each producer kind, cached until an edge
// changes.
func (m *model) kindEdgesOf(root converge.ID) map[[2]string]int {
	if ke, ok := m.kindEdges[root]; ok {
		return ke
	}
	ke := make(map[[2]string]int)
	for _, id := range m.subtree(root)[1:] {
		for _, e := range m.consumes[id] {
			ke[[2]string{id.Kind(), e.Producer.Kind()}]++
		}
	}
	m.kindEdges[root] = ke
	return ke
}

// addPhase adds d (1 or -1) resources in phase p to c.
func addPhase(c *converge.Counts, p converge.Phase, d int) {
	c.Total += d
	switch p {
	case converge.PhaseReady:
		c.Ready += d
	case converge.PhaseFailed:
		c.Failed += d
	case converge.PhasePending:
		c.Pending += d
	case converge.PhaseRunning:
		c.Running += d
	case converge.PhaseDeleting:
		c.Deleting += d
	}
}
