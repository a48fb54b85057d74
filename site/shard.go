package site

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"html/template"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/convergehq/converge"
	"golang.org/x/sync/errgroup"
)

// maxShown is the most bytes of a spec or a status a resource's section
// shows; the rest is cut with a note, so one huge resource cannot make a
// page of many resources heavy.
const maxShown = 64 << 10

// resourcePage is one page of a kind's resources (one shard).
type resourcePage struct {
	Base     base
	Sections template.HTML
}

// renderShard renders the page of shard k holding rs (sorted by ID, at
// least one).
func (b *Builder) renderShard(k shardKey, rs []*converge.Resource) ([]byte, error) {
	var buf bytes.Buffer
	if err := b.renderShardTo(&buf, k, rs); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// sectionsMark stands for the sections in the rendered layout, which is
// cut there: the sections are written between its halves, never copied
// through html/template.
const sectionsMark = "<!--sections-->"

// renderShardTo renders the page into buf (reset first; a worker reuses
// one buffer for all its pages).
func (b *Builder) renderShardTo(buf *bytes.Buffer, k shardKey, rs []*converge.Resource) error {
	ids := make([]converge.ID, len(rs))
	for i, r := range rs {
		ids[i] = r.ID()
	}
	buf.Reset()
	tail, err := b.shardHead(buf, k, ids)
	if err != nil {
		return err
	}
	for _, r := range rs {
		b.renderSection(sw{buf}, r)
	}
	buf.Write(tail)
	return nil
}

// shardHead writes the start of shard k's page holding ids (sorted, at
// least one): the layout up to the sections and the table of contents.
// It returns the rest of the layout, to write after the sections.
func (b *Builder) shardHead(buf *bytes.Buffer, k shardKey, ids []converge.ID) ([]byte, error) {
	rel := k.path()
	title := string(ids[0])
	if len(ids) > 1 {
		title = fmt.Sprintf("%s resources %03x", k.kind, k.n)
	}
	frame, err := render("resource", resourcePage{Base: b.base(rel, title), Sections: sectionsMark})
	if err != nil {
		return nil, err
	}
	head, tail, _ := bytes.Cut(frame, []byte(sectionsMark))
	buf.Write(head)
	w := sw{buf}
	if len(ids) > 1 {
		w.s(`<nav class="toc"><p>`, strconv.Itoa(len(ids)), " ", e(k.kind), ` resources on this page; each link shows one:</p>`, "\n", `<ul class="children">`)
		for _, id := range ids {
			w.s(`<li><a href="#`, e(anchor(id)), `">`, e(string(id)), "</a></li>")
		}
		w.s("</ul></nav>\n")
	}
	return tail, nil
}

// sw writes strings to a buffer.
type sw struct{ b *bytes.Buffer }

func (w sw) s(ss ...string) {
	for _, s := range ss {
		w.b.WriteString(s)
	}
}

// t writes s escaped as e(s), without building the escaped string.
func (w sw) t(s string) {
	last := 0
	for i := 0; i < len(s); i++ {
		if r := escapes[s[i]]; r != "" {
			w.b.WriteString(s[last:i])
			w.b.WriteString(r)
			last = i + 1
		}
	}
	w.b.WriteString(s[last:])
}

// Write writes p escaped as e(string(p)): sw is the io.Writer a
// strings.Replacer scrubs into.
func (w sw) Write(p []byte) (int, error) {
	w.t(unsafe.String(unsafe.SliceData(p), len(p))) // read only while t runs
	return len(p), nil
}

// WriteString is t, for a strings.Replacer.
func (w sw) WriteString(s string) (int, error) {
	w.t(s)
	return len(s), nil
}

// escapes are e's replacements by byte.
var escapes = [256]string{'&': "&amp;", '\'': "&#39;", '<': "&lt;", '>': "&gt;", '"': "&#34;"}

// e escapes s for HTML text and quoted attribute values.
var e = html.EscapeString

// text writes s scrubbed of secret values and escaped: e(m.clean(s)).
func (m *model) text(w sw, s string) {
	if m.scrub == nil {
		w.t(s)
		return
	}
	m.scrub.WriteString(w, s)
}

// scratch holds the indented spec or status of a section being rendered.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

// renderSection writes r's section: spec and status with secret paths
// redacted, every text scrubbed of known secret values and escaped. It is
// written by hand rather than with html/template, which cost ~80 µs per
// resource (80 s of CPU for a million), and writes escaped values
// straight into the page (w.t, m.text) rather than building them.
func (b *Builder) renderSection(w sw, r *converge.Resource) {
	m := b.m
	id := r.ID()
	rel := shardOf(id).path()
	up := upTo(rel)
	ent := m.res[id]
	kids := m.children[id]

	// data-uid lets an open page tell a resource deleted and created
	// anew (same id, new uid) from the one it shows.
	w.s(`<section class="res" id="`)
	w.t(anchor(id))
	w.s(`" data-id="`)
	w.t(string(id))
	w.s(`" data-uid="`)
	w.t(r.UID)
	w.s(`">`, "\n", `<h1><a href="`)
	w.t(up)
	w.t(listKey{Kind: r.Kind}.path(1))
	w.s(`">`)
	w.t(r.Kind)
	w.s(`</a>/`)
	w.t(r.Name)
	w.s(" ")
	phaseSpanTo(w, r.Phase)
	if r.Drift != nil {
		w.s(` <span class="drifted">drifted</span>`)
	}
	w.s("</h1>\n")
	if r.Reason != "" {
		w.s(`<p class="reason">`)
		m.text(w, r.Reason)
		w.s("</p>\n")
	}
	w.s(`<dl class="facts">`, "\n", "<dt>kind version</dt><dd>v")
	w.b.Write(strconv.AppendInt(w.b.AvailableBuffer(), int64(r.KindVersion), 10))
	w.s("</dd>\n<dt>generation</dt><dd>")
	w.b.Write(strconv.AppendInt(w.b.AvailableBuffer(), r.Generation, 10))
	w.s(" (observed ")
	w.b.Write(strconv.AppendInt(w.b.AvailableBuffer(), r.ObservedGeneration, 10))
	w.s(")</dd>\n<dt>origin</dt><dd>")
	w.t(string(r.Origin))
	if r.Source != "" {
		w.s(" · <code>")
		w.t(r.Source)
		w.s("</code>")
	}
	w.s("</dd>\n")
	switch {
	case b.known(r.Owner):
		w.s("<dt>owner</dt><dd>")
		b.link(w, up, r.Owner)
		w.s("</dd>\n")
	case r.Owner != "":
		w.s("<dt>owner</dt><dd>")
		w.t(string(r.Owner))
		w.s(" (gone)</dd>\n")
	default:
		w.s("<dt>owner</dt><dd>none: a root</dd>\n")
	}
	var c *converge.Counts
	if len(kids) > 0 {
		c = m.rollup[id]
	}
	if c != nil {
		span := func(field string, n int) {
			w.s(`<span data-rollup="`)
			w.t(string(id))
			w.s(`" data-field="`, field, `">`)
			w.b.Write(strconv.AppendInt(w.b.AvailableBuffer(), int64(n), 10))
			w.s(`</span>`)
		}
		w.s("<dt>subtree</dt><dd>")
		span("ready", c.Ready)
		w.s("/")
		span("total", c.Total)
		w.s(" ready, ")
		span("failed", c.Failed)
		w.s(" failed, ")
		span("pending", c.Pending)
		w.s(" pending, ")
		span("running", c.Running)
		w.s(" running</dd>\n")
	}
	if r.ProviderConfigRef != "" {
		w.s("<dt>provider config</dt><dd>")
		w.t(r.ProviderConfigRef)
		w.s("</dd>\n")
	}
	w.s("<dt>attempts</dt><dd>")
	w.b.Write(strconv.AppendInt(w.b.AvailableBuffer(), int64(r.Attempts), 10))
	if !r.NextAttempt.IsZero() {
		w.s(" · next ")
		stampTo(w, r.NextAttempt)
	}
	w.s("</dd>\n")
	if r.LastError != "" {
		w.s(`<dt>last error</dt><dd class="error">`)
		m.text(w, r.LastError)
		w.s("</dd>\n")
	}
	if d := r.Drift; d != nil {
		// Field names only, never values: nothing secret to redact.
		what := "healing (drift_policy heal)"
		if d.Policy == converge.DriftPolicyReport {
			what = "not healed (drift_policy report)"
		}
		w.s(`<dt>drift</dt><dd class="drift">`)
		m.text(w, d.Summary())
		w.s(" · ", what)
		if !d.Since.IsZero() {
			w.s(" · since ")
			stampTo(w, d.Since)
		}
		w.s("</dd>\n")
	} else if r.DriftPolicy != "" {
		w.s("<dt>drift policy</dt><dd>")
		w.t(r.DriftPolicy)
		w.s("</dd>\n")
	}
	if r.Rollout != nil {
		w.s("<dt>waves</dt><dd>")
		w.t(r.Rollout.String())
		w.s("</dd>\n")
	}
	if st := converge.RolloutOf(r.Status); st != nil {
		cls := "rollout"
		if st.Phase == converge.RolloutHalted {
			cls = "rollout error"
		}
		w.s(`<dt>rollout</dt><dd class="`, cls, `">`)
		m.text(w, st.String())
		if st.Generation != r.Generation {
			w.s(" (of generation ")
			w.b.Write(strconv.AppendInt(w.b.AvailableBuffer(), st.Generation, 10))
			w.s(")")
		}
		w.s("</dd>\n")
	}
	if r.Lease != nil {
		w.s("<dt>lease</dt><dd>")
		w.t(leaseText(r.Lease))
		w.s("</dd>\n")
	}
	if r.Deleting {
		w.s("<dt>deleting</dt><dd>since ")
		if r.DeletedAt.IsZero() {
			w.s("now")
		} else {
			stampTo(w, r.DeletedAt)
		}
		w.s("</dd>\n")
	}
	w.s("<dt>created</dt><dd>")
	stampTo(w, r.CreatedAt)
	w.s("</dd>\n<dt>updated</dt><dd>")
	stampTo(w, r.UpdatedAt)
	w.s("</dd>\n")
	w.s("</dl>\n")

	if r.Owner == "" && ent != nil && ent.owner == "" && len(kids) > 0 { // m.isGraphRoot(id)
		g := up + GraphPath(id)
		w.s("<h2>Composition</h2>\n", `<object class="graph" type="image/svg+xml" data="`)
		w.t(g)
		w.s(`">composition graph of `)
		w.t(string(id))
		w.s("</object>\n", `<p><a href="`)
		w.t(g)
		w.s(`">open the graph</a>`)
		if m.hasGroups(id, b.opts.GraphNodes) {
			w.s(` · <a href="`)
			w.t(up + GroupsPath(id, 1))
			w.s(`">its groups by dependency</a>`)
		}
		w.s("</p>\n")
	}
	if len(kids) > 0 {
		w.s("<h2>Children (")
		w.b.Write(strconv.AppendInt(w.b.AvailableBuffer(), int64(len(kids)), 10))
		w.s(")</h2>\n", `<ul class="children">`)
		for i, c := range kids {
			if i >= b.opts.Children {
				break
			}
			w.s(`<li><a href="`)
			if b.known(c) {
				w.t(up)
				b.resourcePath(w, c)
			}
			w.s(`">`)
			w.t(string(c))
			w.s("</a></li>")
		}
		w.s("</ul>\n")
		if more := len(kids) - b.opts.Children; more > 0 {
			w.s(`<p class="note">and `)
			w.b.Write(strconv.AppendInt(w.b.AvailableBuffer(), int64(more), 10))
			w.s(" more; see the composition graph and the kind lists.</p>\n")
		}
	}

	w.s("<h2>Depends on</h2>\n")
	cs := m.consumes[id]
	if len(cs) > 0 {
		w.s(`<table class="edges">`, "\n<thead><tr><th>Producer</th><th>Value flows</th></tr></thead>\n<tbody>")
		for i, ed := range cs {
			if i >= b.opts.Children {
				break
			}
			w.s("<tr><td>")
			if b.known(ed.Producer) {
				b.link(w, up, ed.Producer)
			} else {
				w.t(string(ed.Producer))
				w.s(` <span class="muted">(not declared)</span>`)
			}
			w.s("</td>\n<td>")
			for _, f := range ed.Flows {
				w.s(`<div class="flow"><code>`)
				w.t(string(ed.Producer))
				w.s(".status.")
				w.t(f.From)
				w.s("</code> → <code>spec.")
				w.t(f.To)
				w.s("</code></div>")
			}
			if len(ed.Flows) == 0 {
				w.s(`<span class="muted">ordering only</span>`)
			}
			w.s("</td></tr>\n")
		}
		w.s("</tbody></table>\n")
		more(w, len(cs)-b.opts.Children)
	} else {
		w.s(`<p class="note">Nothing.</p>`, "\n")
	}

	w.s("<h2>Depended on by</h2>\n")
	if pf := m.producedFor[id]; len(pf) > 0 {
		w.s(`<table class="edges">`, "\n<thead><tr><th>Consumer</th><th>Value flows</th></tr></thead>\n<tbody>")
		for i, c := range pf {
			if i >= b.opts.Children {
				break
			}
			w.s("<tr><td>")
			if b.known(c) {
				b.link(w, up, c)
			} else {
				w.t(string(c))
			}
			w.s("</td>\n<td>")
			flows := 0
			for _, ed := range m.consumes[c] {
				if ed.Producer != id {
					continue
				}
				for _, f := range ed.Flows {
					w.s(`<div class="flow"><code>status.`)
					w.t(f.From)
					w.s("</code> → <code>")
					w.t(string(c))
					w.s(".spec.")
					w.t(f.To)
					w.s("</code></div>")
					flows++
				}
			}
			if flows == 0 {
				w.s(`<span class="muted">ordering only</span>`)
			}
			w.s("</td></tr>\n")
		}
		w.s("</tbody></table>\n")
		more(w, len(pf)-b.opts.Children)
	} else {
		w.s(`<p class="note">Nothing.</p>`, "\n")
	}

	tmp := scratch.Get().(*[]byte)
	w.s("<h2>Spec</h2>\n")
	if *tmp = redactTo((*tmp)[:0], r.Spec, m.specPaths(id)); len(*tmp) > 0 {
		w.s(`<pre class="json">`)
		m.shownText(w, *tmp)
		w.s("</pre>\n")
	} else {
		w.s(`<p class="note">Empty.</p>`, "\n")
	}
	w.s("<h2>Status</h2>\n")
	if *tmp = redactTo((*tmp)[:0], r.Status, m.statusPaths(id)); len(*tmp) > 0 {
		w.s(`<pre class="json">`)
		m.shownText(w, *tmp)
		w.s("</pre>\n")
	} else {
		w.s(`<p class="note">None yet.</p>`, "\n")
	}
	if cap(*tmp) <= 4*maxShown {
		scratch.Put(tmp)
	}

	w.s("<h2>Events</h2>\n")
	evs := m.events[id]
	if len(evs) > b.opts.Events {
		evs = evs[len(evs)-b.opts.Events:]
	}
	if len(evs) > 0 {
		w.s(`<table class="events">`, "\n<thead><tr><th>Time</th><th>Type</th><th>Message</th></tr></thead>\n<tbody>")
		for i := len(evs) - 1; i >= 0; i-- { // newest first
			ev := evs[i]
			w.s("<tr><td>")
			stampTo(w, ev.when())
			w.s("</td><td>")
			w.t(ev.typ)
			w.s(`</td><td class="msg">`)
			m.text(w, ev.msg)
			w.s("</td></tr>\n")
		}
		w.s("</tbody></table>\n")
	} else {
		w.s(`<p class="note">No events kept.</p>`, "\n")
	}
	w.s("</section>\n")
}

// shownText writes m.text of shown(string(s)): s cut to maxShown bytes
// (at a rune start), saying how much it left out.
func (m *model) shownText(w sw, s []byte) {
	cut := len(s)
	if cut > maxShown {
		cut = maxShown
		for cut > 0 && !utf8Start(s[cut]) {
			cut--
		}
	}
	if m.scrub != nil {
		m.text(w, shown(string(s)))
		return
	}
	w.Write(s[:cut])
	if cut < len(s) {
		w.t(fmt.Sprintf("\n… (%d more bytes not shown)", len(s)-cut))
	}
}

// known reports whether id is a resource of the site (so has a page).
func (b *Builder) known(id converge.ID) bool { return id != "" && b.m.res[id] != nil }

// link writes an anchor to id's section from a page up from the root
// (see upTo): b.href's link, written without building its string.
func (b *Builder) link(sb sw, up string, id converge.ID) {
	sb.s(`<a href="`)
	sb.t(up)
	b.resourcePath(sb, id)
	sb.s(`">`)
	sb.t(string(id))
	sb.s("</a>")
}

// resourcePath writes e(ResourcePath(id)).
func (b *Builder) resourcePath(sb sw, id converge.ID) {
	k := shardOf(id)
	const hex = "0123456789abcdef"
	sb.s("r/")
	sb.t(seg(k.kind))
	sb.s("/")
	sb.b.Write([]byte{hex[k.n>>8&0xf], hex[k.n>>4&0xf], hex[k.n&0xf]})
	sb.s(".html#")
	sb.t(anchor(id))
}

// stampTo writes stamp(t).
func stampTo(sb sw, t time.Time) {
	if !t.IsZero() {
		sb.b.Write(t.UTC().AppendFormat(sb.b.AvailableBuffer(), "2006-01-02 15:04:05Z"))
	}
}

func phaseSpan(p converge.Phase) string {
	if s, ok := phaseSpans[p]; ok {
		return s
	}
	return `<span class="phase ph-` + e(strings.ToLower(string(p))) + `">` + e(string(p)) + "</span>"
}

// phaseSpans is phaseSpan of each phase, rendered once.
var phaseSpans = func() map[converge.Phase]string {
	out := make(map[converge.Phase]string)
	for _, p := range converge.Phases {
		out[p] = `<span class="phase ph-` + e(strings.ToLower(string(p))) + `">` + e(string(p)) + "</span>"
	}
	return out
}()

// phaseSpanTo writes phaseSpan(p).
func phaseSpanTo(sb sw, p converge.Phase) { sb.s(phaseSpan(p)) }

func more(sb sw, n int) {
	if n > 0 {
		sb.s(`<p class="note">and `, strconv.Itoa(n), " more.</p>\n")
	}
}

// shown cuts s to at most maxShown bytes (at a rune start), saying how
// much it left out.
func shown(s string) string {
	if len(s) <= maxShown {
		return s
	}
	cut := maxShown
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("\n… (%d more bytes not shown)", len(s)-cut)
}

// writeShards renders and writes the pages of keys on every core,
// reading their resources from the store (or from have, when there).
// A page left without resources is removed. A resource the model holds
// but the store no longer does (a live Build racing a commit) is left
// out; the Update that follows the commit writes its page again.
func (b *Builder) writeShards(ctx context.Context, w *writer, keys []shardKey, have map[converge.ID]*converge.Resource, keep map[string]bool) (int, error) {
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].kind != keys[j].kind {
			return keys[i].kind < keys[j].kind
		}
		return keys[i].n < keys[j].n
	})
	workers := min(runtime.GOMAXPROCS(0), 4)
	if len(keys) < 16 {
		workers = 1
	}
	var (
		g       errgroup.Group
		mu      sync.Mutex // guards removed and keep
		removed int
	)
	ws := make([]*writer, workers)
	for i := range workers {
		ws[i] = &writer{dir: b.dir, atomic: w.atomic}
		g.Go(func() error {
			var buf bytes.Buffer
			for j := i; j < len(keys); j += workers {
				k := keys[j]
				var read []converge.ID
				for _, id := range b.m.shards[k] {
					if have[id] == nil {
						read = append(read, id)
					}
				}
				var got []*converge.Resource
				var err error
				if len(read) > 0 {
					got, err = b.r.ResourcesByID(ctx, read) // one transaction a page
				}
				rs := make([]*converge.Resource, 0, len(b.m.shards[k]))
				for _, id := range b.m.shards[k] {
					r := have[id]
					if r == nil && err == nil {
						r, got = got[0], got[1:]
					}
					if r != nil {
						rs = append(rs, r)
					}
				}
				gone := err == nil && len(rs) == 0
				switch {
				case gone:
					err = ws[i].remove(k.path())
				case err == nil:
					if err = b.renderShardTo(&buf, k, rs); err == nil {
						err = ws[i].write(k.path(), buf.Bytes())
					}
				}
				mu.Lock()
				if gone && err == nil {
					removed++
				}
				if keep != nil && !gone {
					keep[k.path()] = true
				}
				mu.Unlock()
				if err != nil {
					return fmt.Errorf("build site: %w", err)
				}
			}
			return nil
		})
	}
	err := g.Wait()
	for _, x := range ws {
		w.add(x)
	}
	return removed, err
}

// leaseText says what a lease is in words: "a compose task in flight
// until 2026-12-01 22:41:03Z (then it is dispatched again)", naming the
// worker when the lease records one.
func leaseText(l *converge.Lease) string {
	on := ""
	if l.Worker != "" {
		on = " on worker " + l.Worker
	}
	return fmt.Sprintf("a %s task in flight%s until %s (then it is dispatched again)", l.Reaction, on, stamp(l.Expires))
}
