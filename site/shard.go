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

// e escapes s for HTML text and quoted attribute values.
var e = html.EscapeString

// renderSection writes r's section: spec and status with secret paths
// redacted, every text scrubbed of known secret values and escaped. It is
// written by hand rather than with html/template, which cost ~80 µs per
// resource (80 s of CPU for a million); every value goes through e.
func (b *Builder) renderSection(sb sw, r *converge.Resource) {
	m := b.m
	id := r.ID()
	rel := shardOf(id).path()
	up := upTo(rel)
	w := sb.s
	fact := func(dt, dd string) { w("<dt>", dt, "</dt><dd>", dd, "</dd>\n") }

	// data-uid lets an open page tell a resource deleted and created
	// anew (same id, new uid) from the one it shows.
	w(`<section class="res" id="`, e(anchor(id)), `" data-id="`, e(string(id)), `" data-uid="`, e(r.UID), `">`, "\n")
	w(`<h1><a href="`, e(up), e(listKey{Kind: r.Kind}.path(1)), `">`, e(r.Kind), `</a>/`, e(r.Name), " ", phaseSpan(r.Phase))
	if r.Drift != nil {
		w(` <span class="drifted">drifted</span>`)
	}
	w("</h1>\n")
	if r.Reason != "" {
		w(`<p class="reason">`, e(m.clean(r.Reason)), "</p>\n")
	}
	w(`<dl class="facts">`, "\n")
	fact("kind version", "v"+strconv.Itoa(r.KindVersion))
	w("<dt>generation</dt><dd>", strconv.FormatInt(r.Generation, 10), " (observed ", strconv.FormatInt(r.ObservedGeneration, 10), ")</dd>\n")
	origin := e(string(r.Origin))
	if r.Source != "" {
		origin += " · <code>" + e(r.Source) + "</code>"
	}
	fact("origin", origin)
	switch {
	case b.known(r.Owner):
		w("<dt>owner</dt><dd>")
		b.link(sb, up, r.Owner)
		w("</dd>\n")
	case r.Owner != "":
		fact("owner", e(string(r.Owner))+" (gone)")
	default:
		fact("owner", "none: a root")
	}
	if c := m.rollup[id]; c != nil && len(m.children[id]) > 0 {
		span := func(field string, n int) string {
			return `<span data-rollup="` + e(string(id)) + `" data-field="` + field + `">` + strconv.Itoa(n) + `</span>`
		}
		fact("subtree", span("ready", c.Ready)+"/"+span("total", c.Total)+" ready, "+span("failed", c.Failed)+" failed, "+
			span("pending", c.Pending)+" pending, "+span("running", c.Running)+" running")
	}
	if r.ProviderConfigRef != "" {
		fact("provider config", e(r.ProviderConfigRef))
	}
	attempts := strconv.Itoa(r.Attempts)
	if s := stamp(r.NextAttempt); s != "" {
		attempts += " · next " + s
	}
	fact("attempts", attempts)
	if r.LastError != "" {
		w(`<dt>last error</dt><dd class="error">`, e(m.clean(r.LastError)), "</dd>\n")
	}
	if d := r.Drift; d != nil {
		// Field names only, never values: nothing secret to redact.
		what := "healing (drift_policy heal)"
		if d.Policy == converge.DriftPolicyReport {
			what = "not healed (drift_policy report)"
		}
		since := ""
		if s := stamp(d.Since); s != "" {
			since = " · since " + s
		}
		w(`<dt>drift</dt><dd class="drift">`, e(m.clean(d.Summary())), " · ", what, since, "</dd>\n")
	} else if r.DriftPolicy != "" {
		fact("drift policy", e(r.DriftPolicy))
	}
	if r.Rollout != nil {
		fact("waves", e(r.Rollout.String()))
	}
	if st := converge.RolloutOf(r.Status); st != nil {
		cls := "rollout"
		if st.Phase == converge.RolloutHalted {
			cls = "rollout error"
		}
		of := ""
		if st.Generation != r.Generation {
			of = " (of generation " + strconv.FormatInt(st.Generation, 10) + ")"
		}
		w(`<dt>rollout</dt><dd class="`, cls, `">`, e(m.clean(st.String())), of, "</dd>\n")
	}
	if r.Lease != nil {
		fact("lease", e(leaseText(r.Lease)))
	}
	if r.Deleting {
		d := stamp(r.DeletedAt)
		if d == "" {
			d = "now"
		}
		fact("deleting", "since "+d)
	}
	w("<dt>created</dt><dd>")
	stampTo(sb, r.CreatedAt)
	w("</dd>\n<dt>updated</dt><dd>")
	stampTo(sb, r.UpdatedAt)
	w("</dd>\n")
	w("</dl>\n")

	if r.Owner == "" && m.isGraphRoot(id) {
		g := e(up + GraphPath(id))
		w("<h2>Composition</h2>\n")
		w(`<object class="graph" type="image/svg+xml" data="`, g, `">composition graph of `, e(string(id)), "</object>\n")
		w(`<p><a href="`, g, `">open the graph</a>`)
		if m.hasGroups(id, b.opts.GraphNodes) {
			w(` · <a href="`, e(up+GroupsPath(id, 1)), `">its groups by dependency</a>`)
		}
		w("</p>\n")
	}
	if kids := m.children[id]; len(kids) > 0 {
		w("<h2>Children (", strconv.Itoa(len(kids)), ")</h2>\n", `<ul class="children">`)
		for i, c := range kids {
			if i >= b.opts.Children {
				break
			}
			w(`<li><a href="`, e(b.href(rel, c)), `">`, e(string(c)), "</a></li>")
		}
		w("</ul>\n")
		if more := len(kids) - b.opts.Children; more > 0 {
			w(`<p class="note">and `, strconv.Itoa(more), " more; see the composition graph and the kind lists.</p>\n")
		}
	}

	w("<h2>Depends on</h2>\n")
	if cs := m.consumes[id]; len(cs) > 0 {
		w(`<table class="edges">`, "\n<thead><tr><th>Producer</th><th>Value flows</th></tr></thead>\n<tbody>")
		for i, ed := range cs {
			if i >= b.opts.Children {
				break
			}
			w("<tr><td>")
			if b.known(ed.Producer) {
				b.link(sb, up, ed.Producer)
			} else {
				w(e(string(ed.Producer)), ` <span class="muted">(not declared)</span>`)
			}
			w("</td>\n<td>")
			for _, f := range ed.Flows {
				w(`<div class="flow"><code>`, e(string(ed.Producer)), ".status.", e(f.From), "</code> → <code>spec.", e(f.To), "</code></div>")
			}
			if len(ed.Flows) == 0 {
				w(`<span class="muted">ordering only</span>`)
			}
			w("</td></tr>\n")
		}
		w("</tbody></table>\n")
		more(sb, len(cs)-b.opts.Children)
	} else {
		w(`<p class="note">Nothing.</p>`, "\n")
	}

	w("<h2>Depended on by</h2>\n")
	if pf := m.producedFor[id]; len(pf) > 0 {
		w(`<table class="edges">`, "\n<thead><tr><th>Consumer</th><th>Value flows</th></tr></thead>\n<tbody>")
		for i, c := range pf {
			if i >= b.opts.Children {
				break
			}
			w("<tr><td>")
			if b.known(c) {
				b.link(sb, up, c)
			} else {
				w(e(string(c)))
			}
			w("</td>\n<td>")
			flows := 0
			for _, ed := range m.consumes[c] {
				if ed.Producer != id {
					continue
				}
				for _, f := range ed.Flows {
					w(`<div class="flow"><code>status.`, e(f.From), "</code> → <code>", e(string(c)), ".spec.", e(f.To), "</code></div>")
					flows++
				}
			}
			if flows == 0 {
				w(`<span class="muted">ordering only</span>`)
			}
			w("</td></tr>\n")
		}
		w("</tbody></table>\n")
		more(sb, len(pf)-b.opts.Children)
	} else {
		w(`<p class="note">Nothing.</p>`, "\n")
	}

	spec, _ := redact(r.Spec, m.specPaths(id))
	status, _ := redact(r.Status, m.statusPaths(id))
	w("<h2>Spec</h2>\n")
	if spec != "" {
		w(`<pre class="json">`, e(m.clean(shown(spec))), "</pre>\n")
	} else {
		w(`<p class="note">Empty.</p>`, "\n")
	}
	w("<h2>Status</h2>\n")
	if status != "" {
		w(`<pre class="json">`, e(m.clean(shown(status))), "</pre>\n")
	} else {
		w(`<p class="note">None yet.</p>`, "\n")
	}

	w("<h2>Events</h2>\n")
	evs := m.events[id]
	if len(evs) > b.opts.Events {
		evs = evs[len(evs)-b.opts.Events:]
	}
	if len(evs) > 0 {
		w(`<table class="events">`, "\n<thead><tr><th>Time</th><th>Type</th><th>Message</th></tr></thead>\n<tbody>")
		for i := len(evs) - 1; i >= 0; i-- { // newest first
			ev := evs[i]
			w("<tr><td>")
			stampTo(sb, ev.when())
			w("</td><td>", e(ev.typ), `</td><td class="msg">`, e(m.clean(ev.msg)), "</td></tr>\n")
		}
		w("</tbody></table>\n")
	} else {
		w(`<p class="note">No events kept.</p>`, "\n")
	}
	w("</section>\n")
}

// known reports whether id is a resource of the site (so has a page).
func (b *Builder) known(id converge.ID) bool { return id != "" && b.m.res[id] != nil }

// link writes an anchor to id's section from a page up from the root
// (see upTo): b.href's link, written without building its string.
func (b *Builder) link(sb sw, up string, id converge.ID) {
	k := shardOf(id)
	const hex = "0123456789abcdef"
	sb.s(`<a href="`, e(up), "r/", e(seg(k.kind)), "/")
	sb.b.Write([]byte{hex[k.n>>8&0xf], hex[k.n>>4&0xf], hex[k.n&0xf]})
	sb.s(".html#", e(anchor(id)), `">`, e(string(id)), "</a>")
}

// stampTo writes stamp(t).
func stampTo(sb sw, t time.Time) {
	if !t.IsZero() {
		sb.b.Write(t.UTC().AppendFormat(sb.b.AvailableBuffer(), "2006-01-02 15:04:05Z"))
	}
}

func phaseSpan(p converge.Phase) string {
	return `<span class="phase ph-` + e(strings.ToLower(string(p))) + `">` + e(string(p)) + "</span>"
}

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
