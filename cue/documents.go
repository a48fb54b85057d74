package cue

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	cuelang "cuelang.org/go/cue"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/format"
	"cuelang.org/go/cue/token"

	"github.com/convergehq/converge"
)

// The document types.
const (
	TypeKind           = "kind"
	TypeResource       = "resource"
	TypeProviderConfig = "providerconfig"
	TypeBinding        = "binding"
)

// nameRE is a DNS label: what names of kinds, resources, provider configs
// and bindings must look like.
var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ValidName reports whether s is DNS-label-like: lowercase letters, digits
// and '-', starting and ending alphanumeric, at most 63 characters.
func ValidName(s string) bool { return len(s) <= 63 && nameRE.MatchString(s) }

// place is where a document was declared.
type place struct {
	file      string
	pos       token.Pos
	line, col int // pos as reported (see loader.lineCol)
}

// at returns the place of pos in file.
func (l *loader) at(file string, pos token.Pos) place {
	line, col := l.lineCol(file, pos)
	return place{file: file, pos: pos, line: line, col: col}
}

func (p place) String() string {
	if p.line > 0 {
		return fmt.Sprintf("%s:%d:%d", p.file, p.line, p.col)
	}
	return p.file
}

// dupe reports a duplicate at here (field's position) naming prev, and
// once at prev naming here: validation has no notion of which came first.
func (l *loader) dupe(rule, field, what string, prev *namedPlace, here place) {
	l.addf(here.file, here.pos, field, rule, "%s is already declared at %s", what, prev.place)
	if !prev.flagged {
		l.addf(prev.file, prev.pos, field, rule, "%s is also declared at %s", what, here)
		prev.flagged = true
	}
}

// namedPlace is a named document's place; flagged once a finding names
// it.
type namedPlace struct {
	place
	name    string
	flagged bool
}

// source renders "file:line" for converge.Resource.Source and friends.
func (p place) source() string {
	if p.line > 0 {
		return fmt.Sprintf("%s:%d", p.file, p.line)
	}
	return p.file
}

// check validates every document read, in dependency order: kinds first,
// then provider configs, resources and bindings.
func (l *loader) check() {
	byType := map[string][]*document{}
	for _, d := range l.docs {
		l.step(d)
		t := d.v.LookupPath(cuelang.MakePath(cuelang.Str("type")))
		if !t.Exists() {
			l.addf(d.file, d.pos, "type", "TYPE_MISSING", `document has no type (want kind, resource, providerconfig or binding)`)
			continue
		}
		s, err := t.String()
		switch s {
		case TypeKind, TypeResource, TypeProviderConfig, TypeBinding:
		default:
			if err != nil {
				s = fmt.Sprint(t)
			} else {
				s = fmt.Sprintf("%q", s)
			}
			l.addf(d.file, posOf(t, d.pos), "type", "TYPE_UNKNOWN", "unknown type %s (want kind, resource, providerconfig or binding)", s)
			continue
		}
		byType[s] = append(byType[s], d)
	}
	kindPlaces := map[converge.KindRef]*namedPlace{}
	for _, d := range byType[TypeKind] {
		l.step(d)
		l.kind(d, kindPlaces)
	}
	configs := map[string]*converge.ProviderConfig{}
	configPlaces := map[string]*namedPlace{}
	defaults := map[converge.KindRef]namedPlace{}
	for _, d := range byType[TypeProviderConfig] {
		l.step(d)
		l.providerConfig(d, configs, configPlaces, defaults)
	}
	resPlaces := map[converge.ID]*namedPlace{}
	for _, d := range byType[TypeResource] {
		l.step(d)
		l.resource(d, configs, resPlaces)
	}
	l.checkDepends()
	l.checkComposers()
	bindPlaces := map[string]*namedPlace{}
	for _, d := range byType[TypeBinding] {
		l.step(d)
		l.binding(d, bindPlaces)
	}
	ds := &l.res.Desired
	ds.Kinds = l.schemas.Kinds()
	sort.Slice(ds.Configs, func(i, j int) bool { return ds.Configs[i].Name < ds.Configs[j].Name })
	sort.Slice(ds.Resources, func(i, j int) bool { return ds.Resources[i].ID() < ds.Resources[j].ID() })
	sort.Slice(ds.Bindings, func(i, j int) bool { return ds.Bindings[i].Name < ds.Bindings[j].Name })
}

// step tells progress (if any) that d is evaluated next.
func (l *loader) step(d *document) {
	if l.progress != nil {
		p := l.at(d.file, d.pos)
		l.progress(d.file, p.line, p.col)
	}
}

// kind validates and compiles one kind manifest.
func (l *loader) kind(d *document, places map[converge.KindRef]*namedPlace) {
	r := l.reader(d)
	r.allow("type", "kind", "kind_version", "reactions", "finalizer", "resync_interval", "resync_recomposes",
		"max_inflight", "max_children", "task_deadline", "secret", "spec", "status", "config", "compose", "description",
		"drift_policy")
	k := &converge.Kind{
		Name:             r.name("kind"),
		Version:          r.int("kind_version", 0, 1, true),
		Reactions:        r.strs("reactions"),
		Finalizer:        r.bool("finalizer"),
		ResyncInterval:   r.duration("resync_interval"),
		ResyncRecomposes: r.bool("resync_recomposes"),
		MaxInflight:      r.int("max_inflight", 0, 0, false),
		MaxChildren:      r.int("max_children", 0, 0, false),
		TaskDeadline:     r.duration("task_deadline"),
		Secret:           r.strs("secret"),
		DriftPolicy:      r.driftPolicy(),
		Source:           l.at(d.file, d.pos).source(),
	}
	l.composeOf(d, r, k)
	if k.Finalizer && !k.Has(converge.ReactionTeardown) {
		r.fail("finalizer", "KIND_INVALID", "a kind with a finalizer must declare the teardown reaction")
	}
	if k.MaxChildren > 0 && !k.Has(converge.ReactionCompose) {
		r.fail("max_children", "KIND_INVALID", "max_children needs the compose reaction")
	}
	if k.DriftPolicy != "" && !k.Has(converge.ReactionObserve) {
		r.fail("drift_policy", "KIND_INVALID", "drift_policy needs the observe reaction (drift is what observe reads)")
	}
	if k.ResyncRecomposes && !k.Has(converge.ReactionCompose) {
		r.fail("resync_recomposes", "KIND_INVALID", "resync_recomposes needs the compose reaction")
	}
	// Absent schemas are stored explicitly: no spec or config fields
	// allowed, any status.
	k.SpecSchema, k.StatusSchema, k.ConfigSchema = "{}", "{...}", "{}"
	srcs := map[string]*string{"spec": &k.SpecSchema, "status": &k.StatusSchema, "config": &k.ConfigSchema}
	for _, part := range []string{"spec", "status", "config"} {
		v, ok := r.lookup(part)
		if !ok {
			continue
		}
		src, err := schemaSource(v)
		if err != nil {
			r.fail(part, "SCHEMA_INVALID", "%v", err)
			continue
		}
		*srcs[part] = src
	}
	k.Secret = SecretList(k)
	if !r.ok {
		return
	}
	ref := k.Ref()
	here := l.at(d.file, posOf(r.get("kind"), d.pos))
	if prev, dup := places[ref]; dup {
		l.dupe("DUPLICATE_KIND", "kind", "kind "+ref.String(), prev, here)
		return
	}
	places[ref] = &namedPlace{place: here}
	l.declared[ref] = here
	if err := l.schemas.add(l.ev, k); err != nil {
		// Point at the schema that does not compile, and at the field
		// inside it when the schema is written as CUE (a string's own
		// positions are those of the compiled source, in the message).
		pos, path := d.pos, ""
		var se *schemaError
		if errors.As(err, &se) {
			part := r.get(se.part)
			pos, path = posOf(part, d.pos), se.part
			if inner := se.path(); len(inner) > 0 {
				path = joinPath(se.part, inner)
				if part.Kind() != cuelang.StringKind {
					pos = posOf(part.LookupPath(selectorPath(inner)), pos)
				}
			}
		}
		l.addf(d.file, pos, path, "SCHEMA_INVALID", "%v", err)
	}
}

// schemaSource returns a schema as self-contained CUE source: a string as
// written (JSON and YAML kinds), or a CUE value exported with the imports
// and definitions it refers to.
func schemaSource(v cuelang.Value) (string, error) {
	if v.Kind() == cuelang.StringKind {
		return v.String()
	}
	if k := v.IncompleteKind(); k&cuelang.StructKind == 0 {
		return "", fmt.Errorf("a schema must be a struct or a string of CUE source, not %v", k)
	}
	b, err := format.Node(v.Syntax(cuelang.Optional(true), cuelang.Definitions(true), cuelang.Docs(true)))
	if err != nil {
		return "", fmt.Errorf("export schema: %w", err)
	}
	return string(b), nil
}

// providerConfig validates one provider config.
func (l *loader) providerConfig(d *document, configs map[string]*converge.ProviderConfig, places map[string]*namedPlace, defaults map[converge.KindRef]namedPlace) {
	r := l.reader(d)
	r.allow("type", "name", "kind", "kind_version", "is_default", "config", "description")
	c := &converge.ProviderConfig{
		Name:        r.name("name"),
		Kind:        r.str("kind", true),
		KindVersion: r.int("kind_version", 0, 1, true),
		IsDefault:   r.bool("is_default"),
		Source:      l.at(d.file, d.pos).source(),
	}
	if !r.ok {
		return
	}
	here := l.at(d.file, posOf(r.get("name"), d.pos))
	if prev, dup := places[c.Name]; dup {
		l.dupe("DUPLICATE_CONFIG", "name", fmt.Sprintf("provider_config %q", c.Name), prev, here)
		return
	}
	places[c.Name] = &namedPlace{place: here}
	configs[c.Name] = c
	ref := c.Ref()
	if _, ok := l.schemas.kinds[ref]; !ok {
		l.unknownKind(d, r, "kind", ref)
		return
	}
	if c.IsDefault {
		here = l.at(d.file, posOf(r.get("is_default"), d.pos))
		if prev, dup := defaults[ref]; dup {
			// Flag both: validation has no notion of which came first.
			l.addf(d.file, here.pos, "is_default", "DEFAULT_CONFIG_EXISTS",
				"a default provider_config already exists for %s (%s at %s)", ref, prev.name, prev.place)
			if !prev.flagged {
				l.addf(prev.file, prev.pos, "is_default", "DEFAULT_CONFIG_EXISTS",
					"a default provider_config already exists for %s (%s at %s)", ref, c.Name, here)
				prev.flagged = true
				defaults[ref] = prev
			}
			r.ok = false
		} else {
			defaults[ref] = namedPlace{here, c.Name, false}
		}
	}
	cfg, _ := r.lookup("config")
	if !cfg.Exists() {
		cfg = l.ev.ctx.CompileString("{}")
	}
	js, ok := l.validate(d, cfg, schemaKey{ref, "config"}, "config", "CONFIG_INVALID")
	if !ok || !r.ok {
		return
	}
	c.Config = js
	l.res.Desired.Configs = append(l.res.Desired.Configs, c)
}

// resource validates one resource against its kind version.
func (l *loader) resource(d *document, configs map[string]*converge.ProviderConfig, places map[converge.ID]*namedPlace) {
	r := l.reader(d)
	r.allow("type", "kind", "kind_version", "name", "spec", "provider_config_ref", "depends_on", "description", "drift_policy", "rollout")
	res := &converge.Resource{
		Kind:              r.str("kind", true),
		KindVersion:       r.int("kind_version", 0, 1, true),
		Name:              r.name("name"),
		ProviderConfigRef: r.str("provider_config_ref", false),
		DriftPolicy:       r.driftPolicy(),
		Rollout:           r.rollout(),
		Origin:            converge.OriginGit,
		Source:            l.at(d.file, d.pos).source(),
	}
	spec, hasSpec := r.lookup("spec")
	if !hasSpec && r.ok {
		r.fail("spec", "FIELD_MISSING", "field is required but not present")
	}
	if !r.ok {
		return
	}
	id := res.ID()
	here := l.at(d.file, posOf(r.get("name"), d.pos))
	if prev, dup := places[id]; dup {
		l.dupe("DUPLICATE_RESOURCE", "name", "resource "+string(id), prev, here)
		return
	}
	places[id] = &namedPlace{place: here}
	ref := res.Ref()
	kind, ok := l.schemas.kinds[ref]
	if !ok {
		l.unknownKind(d, r, "kind", ref)
		return
	}
	if res.DriftPolicy != "" && !kind.Has(converge.ReactionObserve) {
		l.addf(d.file, posOf(r.get("drift_policy"), d.pos), "drift_policy", "FIELD_INVALID",
			"drift_policy needs a kind with the observe reaction; %s has none", ref)
		r.ok = false
	}
	if res.Rollout != nil && !kind.Has(converge.ReactionCompose) && kind.Compose == "" {
		l.addf(d.file, posOf(r.get("rollout"), d.pos), "rollout", "FIELD_INVALID",
			"a rollout needs a composer kind (its waves hold back the children's changes); %s composes nothing", ref)
		r.ok = false
	}
	if n := res.ProviderConfigRef; n != "" {
		pos := posOf(r.get("provider_config_ref"), d.pos)
		c, ok := configs[n]
		switch {
		case !ok:
			l.addf(d.file, pos, "provider_config_ref", "CONFIG_REF_MISSING", "provider_config %q does not exist", n)
			r.ok = false
		case c.Ref() != ref:
			l.addf(d.file, pos, "provider_config_ref", "CONFIG_REF_VERSION", "provider_config %q is for %s, not %s", n, c.Ref(), ref)
			r.ok = false
		}
	}
	pending, ok := l.dependsOn(d, r, id)
	if !ok {
		return
	}
	js, ok := l.validatePending(d, spec, schemaKey{ref, "spec"}, pending)
	if !ok || !r.ok {
		return
	}
	res.Declared, res.Spec = js, js
	l.res.Desired.Resources = append(l.res.Desired.Resources, res)
}

// binding validates one reactor binding.
func (l *loader) binding(d *document, places map[string]*namedPlace) {
	r := l.reader(d)
	r.allow("type", "name", "kind", "transition", "reactor", "reactor_version", "description")
	b := &converge.Binding{
		Name:           r.name("name"),
		Kind:           r.str("kind", true),
		Transition:     r.str("transition", true),
		Reactor:        r.str("reactor", true),
		ReactorVersion: r.int("reactor_version", 1, 1, false),
		Source:         l.at(d.file, d.pos).source(),
	}
	switch b.Transition {
	case converge.TransitionSynced, converge.TransitionFailed, converge.TransitionDeleted, "":
	default:
		r.fail("transition", "FIELD_INVALID", "unknown transition %q (want synced, failed or deleted)", b.Transition)
	}
	if !r.ok {
		return
	}
	here := l.at(d.file, posOf(r.get("name"), d.pos))
	if prev, dup := places[b.Name]; dup {
		l.dupe("DUPLICATE_BINDING", "name", fmt.Sprintf("binding %q", b.Name), prev, here)
		return
	}
	places[b.Name] = &namedPlace{place: here}
	if !l.kindExists(b.Kind) {
		r.fail("kind", "BINDING_KIND_UNKNOWN", "unknown kind %q", b.Kind)
	}
	reactor := converge.KindRef{Kind: b.Reactor, Version: b.ReactorVersion}
	if k, ok := l.schemas.kinds[reactor]; !ok {
		r.fail("reactor", "BINDING_KIND_UNKNOWN", "unknown reactor kind %s", reactor)
	} else if !k.Has(converge.ReactionReact) {
		r.fail("reactor", "BINDING_REACTOR_INVALID", "reactor kind %s does not declare the react reaction", reactor)
	}
	if r.ok {
		l.res.Desired.Bindings = append(l.res.Desired.Bindings, b)
	}
}

// kindExists reports whether any version of kind compiled.
func (l *loader) kindExists(kind string) bool {
	for ref := range l.schemas.kinds {
		if ref.Kind == kind {
			return true
		}
	}
	return false
}

// unknownKind reports a reference to a kind version that is not declared.
func (l *loader) unknownKind(d *document, r *reader, field string, ref converge.KindRef) {
	var versions []string
	for k := range l.schemas.kinds {
		if k.Kind == ref.Kind {
			versions = append(versions, k.String())
		}
	}
	sort.Strings(versions)
	if p, ok := l.declared[ref]; ok {
		l.addf(d.file, posOf(r.get(field), d.pos), field, "KIND_INVALID", "kind %s is declared at %s but is invalid", ref, p)
		return
	}
	if len(versions) == 0 {
		l.addf(d.file, posOf(r.get(field), d.pos), field, "KIND_UNKNOWN", "unknown kind %q", ref.Kind)
		return
	}
	l.addf(d.file, posOf(r.get("kind_version"), d.pos), "kind_version", "KIND_UNKNOWN",
		"unknown kind version %s (declared: %s)", ref, strings.Join(versions, ", "))
}

// validate checks data against a schema and returns it as JSON. Violations
// become findings under rule, positioned at the offending value in the
// document where CUE knows it.
func (l *loader) validate(d *document, data cuelang.Value, key schemaKey, root, rule string) (json.RawMessage, bool) {
	if b := l.fastValid(d, data, key, nil); b != nil {
		return b, true
	}
	sch, err := l.schemas.schema(l.ev, key)
	if err != nil {
		l.addf(d.file, d.pos, root, "SCHEMA_INVALID", "%v", err)
		return nil, false
	}
	errs := check(sch, data)
	if paths := l.schemas.secret[key]; len(errs) > 0 && len(paths) > 0 {
		redactErrs(errs, cueSecretValues(data, paths), paths)
	}
	for _, e := range errs {
		l.addf(d.file, l.errPos(d, data, e), joinPath(root, e.path), rule, "%s", e.msg)
	}
	if len(errs) > 0 {
		return nil, false
	}
	b, err := data.MarshalJSON()
	if err != nil {
		l.addf(d.file, posOf(data, d.pos), root, rule, "%s", strings.TrimSpace(cueerrors.Details(err, nil)))
		return nil, false
	}
	return b, true
}

// fastValid returns data (of document d) as JSON when the kind's fast
// check accepts it
// (with the fields in pending allowed to be absent), else nil: CUE then
// gives the verdict and the message. The value of a document whose JSON
// is faithful (document.json) is that JSON once evaluated, so the JSON is
// what CUE would check; unifying a BOM of
// a million rows with its schema in CUE took 5 of a 13 s load
// (docs/BENCHMARKS.md). TestLoadFastAgrees holds both paths to the same
// findings and JSON on the cases where a value and its JSON differ
// (optional, hidden, definition and required fields, defaults).
func (l *loader) fastValid(d *document, data cuelang.Value, key schemaKey, pending []string) []byte {
	f := l.schemas.fast[key]
	if f == nil || !d.json || l.opts.noFastDocuments {
		return nil
	}
	b, err := data.MarshalJSON()
	if err != nil || !f.acceptsPending(b, pending) {
		return nil
	}
	return b
}

// errPos finds where a violation is in document d: a position CUE reports
// in d's file, else the deepest existing value on the error's path, else
// the checked value itself.
func (l *loader) errPos(d *document, data cuelang.Value, e fieldError) token.Pos {
	for _, p := range cueerrors.Positions(e.err) {
		if p.Filename() == d.file {
			return p
		}
	}
	for n := len(e.path); n > 0; n-- {
		if v := data.LookupPath(selectorPath(e.path[:n])); v.Exists() && v.Pos().IsValid() {
			return v.Pos()
		}
	}
	return posOf(data, d.pos)
}

// settings reads converge.cue.
func (l *loader) settings(rel string, v cuelang.Value) {
	var raw struct {
		ResyncInterval string                `json:"resync_interval"`
		PruneLimit     float64               `json:"prune_limit"`
		AllowPruneAll  bool                  `json:"allow_prune_all"`
		ChangeLimit    int                   `json:"change_limit"`
		Workers        []converge.WorkerSpec `json:"workers"`
		GitTimeout     string                `json:"git_timeout"`
		LoadTimeout    string                `json:"load_timeout"`
		ForgeTimeout   string                `json:"forge_timeout"`
	}
	if err := v.Decode(&raw); err != nil {
		l.cueErr(rel, "SETTINGS_INVALID", err)
		return
	}
	s := converge.Settings{PruneLimit: raw.PruneLimit, AllowPruneAll: raw.AllowPruneAll, ChangeLimit: raw.ChangeLimit, Workers: raw.Workers}
	if raw.ResyncInterval != "" {
		d, err := time.ParseDuration(raw.ResyncInterval)
		if err != nil || d < 0 {
			l.addf(rel, posOf(v.LookupPath(cuelang.ParsePath("resync_interval")), v.Pos()), "resync_interval", "SETTINGS_INVALID", "invalid duration %q", raw.ResyncInterval)
			return
		}
		if d > 0 && d < MinInterval {
			l.addf(rel, posOf(v.LookupPath(cuelang.ParsePath("resync_interval")), v.Pos()), "resync_interval", "SETTINGS_INVALID",
				"%s is below the floor of %v (0 or absent: none)", raw.ResyncInterval, MinInterval)
			return
		}
		s.ResyncInterval = d
	}
	for _, t := range []struct {
		field, raw string
		to         *time.Duration
	}{{"git_timeout", raw.GitTimeout, &s.GitTimeout}, {"load_timeout", raw.LoadTimeout, &s.LoadTimeout},
		{"forge_timeout", raw.ForgeTimeout, &s.ForgeTimeout}} {
		if t.raw == "" {
			continue
		}
		d, err := time.ParseDuration(t.raw)
		if err != nil || d <= 0 {
			l.addf(rel, posOf(v.LookupPath(cuelang.ParsePath(t.field)), v.Pos()), t.field, "SETTINGS_INVALID", "invalid timeout %q: want a positive duration such as \"30s\"", t.raw)
			return
		}
		*t.to = d
	}
	if s.PruneLimit < 0 || s.PruneLimit > 1 {
		l.addf(rel, posOf(v.LookupPath(cuelang.ParsePath("prune_limit")), v.Pos()), "prune_limit", "SETTINGS_INVALID", "prune_limit %v is outside 0..1", s.PruneLimit)
		return
	}
	if s.ChangeLimit < 0 {
		l.addf(rel, posOf(v.LookupPath(cuelang.ParsePath("change_limit")), v.Pos()), "change_limit", "SETTINGS_INVALID", "change_limit %d is negative (0: no limit)", s.ChangeLimit)
		return
	}
	for i, w := range s.Workers {
		p := fmt.Sprintf("workers[%d]", i)
		wv := v.LookupPath(cuelang.ParsePath(fmt.Sprintf("workers[%d]", i)))
		switch {
		case !ValidName(w.Name):
			l.addf(rel, posOf(wv, v.Pos()), p+".name", "SETTINGS_INVALID", "worker name %q is not a DNS label", w.Name)
			return
		case (w.Builtin == "") == (len(w.Command) == 0):
			l.addf(rel, posOf(wv, v.Pos()), p, "SETTINGS_INVALID", "a worker needs exactly one of builtin and command")
			return
		case w.Replicas < 0:
			l.addf(rel, posOf(wv, v.Pos()), p+".replicas", "SETTINGS_INVALID", "replicas must be at least 0")
			return
		}
		if w.Replicas == 0 {
			s.Workers[i].Replicas = 1
		}
	}
	l.res.Desired.Settings = s
}

// posOf returns v's position, or fallback.
func posOf(v cuelang.Value, fallback token.Pos) token.Pos {
	if v.Exists() {
		if p := v.Pos(); p.IsValid() {
			return p
		}
	}
	return fallback
}

// reader decodes the metadata fields of one document, recording a finding
// for each problem; ok turns false at the first.
type reader struct {
	l  *loader
	d  *document
	ok bool
}

func (l *loader) reader(d *document) *reader { return &reader{l: l, d: d, ok: true} }

func (r *reader) fail(field, rule, format string, args ...any) {
	r.ok = false
	r.l.addf(r.d.file, posOf(r.get(field), r.d.pos), field, rule, format, args...)
}

func (r *reader) get(field string) cuelang.Value {
	return r.d.v.LookupPath(cuelang.MakePath(cuelang.Str(field)))
}

func (r *reader) lookup(field string) (cuelang.Value, bool) {
	v := r.get(field)
	return v, v.Exists()
}

// allow reports every regular field not in names.
func (r *reader) allow(names ...string) {
	it, err := r.d.v.Fields()
	if err != nil {
		return
	}
	for it.Next() {
		sel := it.Selector().String()
		ok := false
		for _, n := range names {
			ok = ok || n == sel
		}
		if !ok {
			r.ok = false
			r.l.addf(r.d.file, posOf(it.Value(), r.d.pos), sel, "FIELD_UNKNOWN", "field not allowed in a %s document", r.kindName())
		}
	}
}

func (r *reader) kindName() string {
	s, _ := r.get("type").String()
	return s
}

func (r *reader) str(field string, required bool) string {
	v, ok := r.lookup(field)
	if !ok {
		if required {
			r.fail(field, "FIELD_MISSING", "field is required but not present")
		}
		return ""
	}
	s, err := v.String()
	if err != nil {
		r.fail(field, "FIELD_INVALID", "want a string, have %v", v)
	}
	return s
}

func (r *reader) name(field string) string {
	s := r.str(field, true)
	if _, present := r.lookup(field); present && s == "" {
		// An empty name makes an ID ("account/") no command can name.
		r.fail(field, "NAME_INVALID", "empty name (want a DNS label: lowercase letters, digits and '-', at most 63 characters)")
	}
	if s != "" && !ValidName(s) {
		r.fail(field, "NAME_INVALID", "%q is not a DNS label (lowercase letters, digits and '-', at most 63 characters)", s)
	}
	return s
}

func (r *reader) int(field string, def, min int, required bool) int {
	v, ok := r.lookup(field)
	if !ok {
		if required {
			r.fail(field, "FIELD_MISSING", "field is required but not present")
		}
		return def
	}
	n, err := v.Int64()
	if err != nil {
		r.fail(field, "FIELD_INVALID", "want an integer, have %v", v)
		return def
	}
	if n < int64(min) || n > 1<<31 {
		r.fail(field, "FIELD_INVALID", "%d is out of range (want at least %d)", n, min)
		return def
	}
	return int(n)
}

func (r *reader) bool(field string) bool {
	v, ok := r.lookup(field)
	if !ok {
		return false
	}
	b, err := v.Bool()
	if err != nil {
		r.fail(field, "FIELD_INVALID", "want a bool, have %v", v)
	}
	return b
}

func (r *reader) strs(field string) []string {
	v, ok := r.lookup(field)
	if !ok {
		return nil
	}
	var out []string
	if err := v.Decode(&out); err != nil {
		r.fail(field, "FIELD_INVALID", "want a list of strings")
	}
	return out
}

// driftPolicy reads drift_policy: "heal" or "report" (absent: "", the
// kind's, else heal).
func (r *reader) driftPolicy() string {
	s := r.str("drift_policy", false)
	switch s {
	case "", converge.DriftPolicyHeal, converge.DriftPolicyReport:
		return s
	}
	r.fail("drift_policy", "FIELD_INVALID", "drift_policy %q is not \"heal\" or \"report\"", s)
	return ""
}

// rollout reads rollout: {waves: [{name, rows, percent, soak}], soak,
// timeout} (absent: nil). Its fields are closed, so a misspelt one is an
// error rather than a wave that selects everything.
func (r *reader) rollout() *converge.Rollout {
	v, ok := r.lookup("rollout")
	if !ok {
		return nil
	}
	bad := func(field string, at cuelang.Value, format string, args ...any) *converge.Rollout {
		r.ok = false
		r.l.addf(r.d.file, posOf(at, posOf(v, r.d.pos)), "rollout"+field, "FIELD_INVALID", format, args...)
		return nil
	}
	closed := func(field string, at cuelang.Value, names ...string) bool {
		it, err := at.Fields()
		if err != nil {
			bad(field, at, "want a struct, have %v", at)
			return false
		}
		for it.Next() {
			if sel := it.Selector().String(); !slices.Contains(names, sel) {
				bad(field+"."+sel, it.Value(), "field not allowed (want one of %s)", strings.Join(names, ", "))
				return false
			}
		}
		return true
	}
	// dur reads the duration at.name, whose path is field.
	dur := func(field string, at cuelang.Value, name string) (time.Duration, bool) {
		x := at.LookupPath(cuelang.MakePath(cuelang.Str(name)))
		if !x.Exists() {
			return 0, true
		}
		s, err := x.String()
		d, perr := time.ParseDuration(s)
		if err != nil || perr != nil || d < 0 {
			bad(field+"."+name, x, "invalid duration %v (want e.g. \"30s\", \"10m\")", x)
			return 0, false
		}
		return d, true
	}
	if !closed("", v, "waves", "soak", "timeout") {
		return nil
	}
	ro := &converge.Rollout{}
	var ok1, ok2 bool
	if ro.Soak, ok1 = dur("", v, "soak"); !ok1 {
		return nil
	}
	if ro.Timeout, ok2 = dur("", v, "timeout"); !ok2 {
		return nil
	}
	wv := v.LookupPath(cuelang.ParsePath("waves"))
	if !wv.Exists() {
		return bad(".waves", v, "a rollout needs at least one wave")
	}
	list, err := wv.List()
	if err != nil {
		return bad(".waves", wv, "want a list of waves, have %v", wv)
	}
	for i := 0; list.Next(); i++ {
		e := list.Value()
		at := fmt.Sprintf(".waves[%d]", i)
		if !closed(at, e, "name", "rows", "percent", "soak") {
			return nil
		}
		var w converge.Wave
		if x := e.LookupPath(cuelang.ParsePath("name")); x.Exists() {
			if w.Name, err = x.String(); err != nil || !ValidName(w.Name) {
				return bad(at+".name", x, "wave name %v is not a DNS label", x)
			}
		}
		if x := e.LookupPath(cuelang.ParsePath("rows")); x.Exists() {
			if err := x.Decode(&w.Rows); err != nil {
				return bad(at+".rows", x, "want a list of row names (\"fd-00\", \"fd-00/team-003\")")
			}
		}
		if x := e.LookupPath(cuelang.ParsePath("percent")); x.Exists() {
			n, err := x.Int64()
			if err != nil {
				return bad(at+".percent", x, "want an integer 1..100, have %v", x)
			}
			w.Percent = int(max(min(n, 1000), -1))
		}
		var ok bool
		if w.Soak, ok = dur(at, e, "soak"); !ok {
			return nil
		}
		ro.Waves = append(ro.Waves, w)
	}
	if field, err := ro.Check(); err != nil {
		return bad("."+field, v.LookupPath(cuelang.ParsePath(field)), "%v", err)
	}
	return ro
}

func (r *reader) duration(field string) time.Duration {
	s := r.str(field, false)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		r.fail(field, "FIELD_INVALID", "invalid duration %q (want e.g. \"30s\", \"10m\")", s)
		return 0
	}
	if d > 0 && d < MinInterval {
		// "1ns" would make an idle daemon dispatch ~12,000 tasks a
		// second for ever.
		r.fail(field, "FIELD_INVALID", "%s is below the floor of %v (0 or absent: none)", s, MinInterval)
		return 0
	}
	return d
}

// MinInterval is the shortest resync_interval and task_deadline a
// document may set (0 means none): anything shorter only burns the
// workers.
const MinInterval = time.Second
