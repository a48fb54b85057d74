package cue

import (
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	cuelang "cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/format"

	"github.com/convergehq/converge"
)

// The breaking-change rules Lint reports. Every one is breaking: there is
// no warning level and no override; the remedy is always a new
// kind_version.
const (
	// RuleKVRemoved: a (kind, kind_version) of the old revision is gone.
	RuleKVRemoved = "KV_REMOVED"
	// RuleFieldRemoved: a field of the old schema is gone and its struct
	// does not accept it otherwise (schemas are closed, so documents that
	// set it are now refused). A field that moves under a [string]
	// pattern or into an open struct (...) is judged against that instead.
	RuleFieldRemoved = "FIELD_REMOVED"
	// RuleRequiredFieldAdded: a new required (!) field, or a new regular
	// field without a default that documents must supply. A new optional
	// field, and anything below it, is compatible.
	RuleRequiredFieldAdded = "REQUIRED_FIELD_ADDED"
	// RuleFieldBecameRequired: an optional field (or one with a default)
	// must now be supplied.
	RuleFieldBecameRequired = "FIELD_BECAME_REQUIRED"
	// RuleTypeChanged: the field no longer accepts a kind of value it
	// accepted (string to int, int|string to int, struct to list).
	RuleTypeChanged = "TYPE_CHANGED"
	// RuleConstraintNarrowed: same type, fewer values (an enum value
	// removed, a bound tightened, a regular expression added or changed).
	RuleConstraintNarrowed = "CONSTRAINT_NARROWED"
	// RuleElementNarrowed: a list accepts fewer elements ([...string] to
	// [...int], a narrower element constraint, an open list made fixed).
	RuleElementNarrowed = "ELEMENT_NARROWED"
	// RuleStructClosed: a struct that accepted any further field (... or
	// a [string] pattern) no longer does.
	RuleStructClosed = "STRUCT_CLOSED"
	// RuleDefaultChanged: a default value changed or was removed.
	RuleDefaultChanged = "DEFAULT_CHANGED"
	// RuleSchemaInvalid: the new revision's schema does not compile.
	RuleSchemaInvalid = "SCHEMA_INVALID"
	// RuleUnclassifiedChange: CUE's Subsume says the new schema does not
	// accept everything the old one did, but no rule above explains it.
	// Lint fails closed.
	RuleUnclassifiedChange = "UNCLASSIFIED_CHANGE"
)

// lintParts are the schemas Lint compares. A kind's status schema is left
// out: status is written by the kind's own worker, never by the documents
// users write, so a status change cannot make a user's document invalid.
var lintParts = []string{"spec", "config"}

// probeLabel is a field name no schema declares: a struct that allows it
// accepts arbitrary further fields.
const probeLabel = "converge_lint_probe_7f3a"

// Lint compares the kinds of two revisions (or the store's kinds, old,
// with a candidate revision's, new) and returns the breaking changes,
// sorted by file, line, column and rule. Findings point at the new
// revision's kind document (Kind.Source); a removed kind_version points at
// the old one. Kinds only in new are compatible additions. The spec and
// config schemas are compared; status schemas are not (see lintParts). Lint
// never fails: a schema that does not compile is a SCHEMA_INVALID finding
// (new) or not compared (old). Every finding's message names the kind
// version, the field path, its position in both revisions and the remedy
// (the next free kind_version); there is no override.
func Lint(old, new []*converge.Kind) []converge.Finding {
	return LintTrees(old, new, nil, nil)
}

// LintTrees is Lint with the trees the kinds were loaded from (Kind.Source
// is relative to them), so that findings about CUE kind files point at the
// field's own line and column. Either tree may be nil.
func LintTrees(old, new []*converge.Kind, oldTree, newTree fs.FS) []converge.Finding {
	l := &linter{
		ctx:    cuecontext.New(),
		oldLoc: newLocator(oldTree),
		newLoc: newLocator(newTree),
		maxVer: map[string]int{},
	}
	oldBy := map[converge.KindRef]*converge.Kind{}
	for _, k := range old {
		oldBy[k.Ref()] = k
		l.maxVer[k.Name] = max(l.maxVer[k.Name], k.Version)
	}
	newBy := map[converge.KindRef]*converge.Kind{}
	for _, k := range new {
		newBy[k.Ref()] = k
		l.maxVer[k.Name] = max(l.maxVer[k.Name], k.Version)
	}
	refs := make([]converge.KindRef, 0, len(oldBy))
	for ref := range oldBy {
		refs = append(refs, ref)
	}
	sort.Slice(refs, func(i, j int) bool { return refLess(refs[i], refs[j]) })
	for _, ref := range refs {
		ok := oldBy[ref]
		nk, present := newBy[ref]
		if !present {
			l.kvRemoved(ok)
			continue
		}
		for _, part := range lintParts {
			l.lintPart(ok, nk, part)
		}
	}
	sortFindings(l.out)
	return l.out
}

// linter holds one Lint call's state.
type linter struct {
	ctx            *cuelang.Context
	oldLoc, newLoc *locator
	maxVer         map[string]int // highest version of each kind name, old or new
	out            []converge.Finding
}

// remedy is the advice every finding ends with.
func (l *linter) remedy(kind string) string {
	return fmt.Sprintf("ship it as kind_version %d", l.maxVer[kind]+1)
}

func (l *linter) kvRemoved(k *converge.Kind) {
	pos := l.oldLoc.find(k.Source, "", nil)
	l.out = append(l.out, converge.Finding{
		File: pos.file, Line: pos.line, Column: pos.col,
		Path: k.Ref().String(), Rule: RuleKVRemoved,
		Message: fmt.Sprintf("%s (declared at %s) is removed: resources and provider configs at kind_version %d lose their schema and worker routing; keep it while anything uses it, and ship changes as kind_version %d",
			k.Ref(), pos, k.Version, l.maxVer[k.Name]+1),
	})
}

// lintPart compares one schema (spec or config) of a kind version present
// in both revisions.
func (l *linter) lintPart(ok, nk *converge.Kind, part string) {
	src := func(k *converge.Kind) string {
		if part == "spec" {
			return k.SpecSchema
		}
		return k.ConfigSchema
	}
	if src(ok) == src(nk) {
		return // the same source: the same schema
	}
	name := schemaKey{nk.Ref(), part}.name()
	nsrc, err := wrapSchema(name, src(nk), false)
	var nv cuelang.Value
	if err == nil {
		nv, err = build(l.ctx, name, nsrc)
	}
	if err != nil {
		pos := l.newLoc.find(nk.Source, part, nil)
		l.out = append(l.out, converge.Finding{
			File: pos.file, Line: pos.line, Column: pos.col, Path: nk.Ref().String() + " " + part,
			Rule: RuleSchemaInvalid, Message: fmt.Sprintf("%s %s schema does not compile: %s; fix the schema (a breaking change ships as kind_version %d)",
				nk.Ref(), part, strings.Join(strings.Fields(err.Error()), " "), l.maxVer[nk.Name]+1),
		})
		return
	}
	osrc, err := wrapSchema(name, src(ok), false)
	var ov cuelang.Value
	if err == nil {
		ov, err = build(l.ctx, name, osrc)
	}
	if err != nil {
		return // nothing valid to break
	}
	w := &walker{l: l, old: ok, new: nk, part: part}
	w.compare(nil, ov, nv, false)
	if len(w.found) == 0 && !w.overridden && text(ov) != text(nv) {
		// Fail closed: a change the walk did not model. Only trusted when
		// the walk overrode none of Subsume's known false positives.
		if err := nv.Subsume(ov); err != nil {
			w.add(RuleUnclassifiedChange, nil, "the new schema does not accept every value the old one did (%s), and no rule explains the change",
				firstLine(err.Error()))
		}
	}
	l.out = append(l.out, w.found...)
}

// walker compares one schema of one kind version between two revisions.
type walker struct {
	l        *linter
	old, new *converge.Kind
	part     string
	found    []converge.Finding
	// overridden is set when the walk judged compatible a pair that
	// Subsume calls breaking (identical builtin validators, a new regular
	// field with a default): the whole-value Subsume is then not trusted.
	overridden bool
}

// Path segments for list elements and pattern fields.
const (
	segElem    = "[*]"
	segPattern = "[string]"
)

// add records a finding about the field at path, positioned at path in
// both revisions.
func (w *walker) add(rule string, path []string, format string, args ...any) {
	w.addAt(rule, path, path, path, format, args...)
}

// addAt records a finding about the field at path, positioned at newAt in
// the new revision (the parent of a removed field) and oldAt in the old one
// (the parent of an added field).
func (w *walker) addAt(rule string, path, newAt, oldAt []string, format string, args ...any) {
	np := w.l.newLoc.find(w.new.Source, w.part, newAt)
	op := w.l.oldLoc.find(w.old.Source, w.part, oldAt)
	field := renderPath(w.part, path)
	w.found = append(w.found, converge.Finding{
		File: np.file, Line: np.line, Column: np.col,
		Path: w.new.Ref().String() + " " + field, Rule: rule,
		Message: fmt.Sprintf("%s (at %s, was %s); %s",
			fmt.Sprintf(format, args...), np, op, w.l.remedy(w.new.Name)),
	})
}

// compare walks the old and new values at path. elem is set for a list
// element, whose narrowing is ELEMENT_NARROWED.
func (w *walker) compare(path []string, o, n cuelang.Value, elem bool) {
	ok, nk := kindOf(o), kindOf(n)
	if lost := ok &^ nk; lost != 0 && ok != cuelang.BottomKind {
		rule := RuleTypeChanged
		if elem {
			rule = RuleElementNarrowed
		}
		w.add(rule, path, "type changed from %s to %s", shortText(o), shortText(n))
		return
	}
	switch {
	case ok == cuelang.StructKind && nk == cuelang.StructKind && plain(o) && plain(n):
		w.compareStruct(path, o, n)
	case ok == cuelang.ListKind && nk == cuelang.ListKind:
		w.compareList(path, o, n)
	default:
		w.compareLeaf(path, o, n, elem)
	}
}

// kindOf is v's IncompleteKind. CUE reports bottom for a list under a
// validator its implicit default fails (list.MinItems(1) & [...string]);
// kindOf then intersects the kinds of the conjuncts that say one.
func kindOf(v cuelang.Value) cuelang.Kind {
	k := v.IncompleteKind()
	if k != cuelang.BottomKind {
		return k
	}
	op, args := v.Expr()
	if op != cuelang.AndOp {
		return k
	}
	k = cuelang.TopKind
	for _, a := range args {
		if ak := kindOf(a); ak != cuelang.BottomKind {
			k &= ak
		}
	}
	return k
}

// plain reports whether v can be taken apart field by field (or element
// by element): not a disjunction, and not a list under a validator
// (list.MinItems(1) & [...string]). References, conjunctions and close()
// are evaluated away by Fields and LookupPath.
func plain(v cuelang.Value) bool {
	op, _ := v.Expr()
	if kindOf(v) == cuelang.ListKind {
		return op != cuelang.OrOp && op != cuelang.AndOp && op != cuelang.CallOp
	}
	return op != cuelang.OrOp
}

// field is one field of a struct.
type field struct {
	name  string
	ctype cuelang.SelectorType // 0 (regular), OptionalConstraint or RequiredConstraint
	v     cuelang.Value
}

func fieldsOf(v cuelang.Value) ([]field, error) {
	it, err := v.Fields(cuelang.Optional(true))
	if err != nil {
		return nil, err
	}
	var out []field
	for it.Next() {
		sel := it.Selector()
		if sel.IsDefinition() {
			continue
		}
		out = append(out, field{name: sel.Unquoted(), ctype: sel.ConstraintType(), v: it.Value()})
	}
	return out, nil
}

// mustSupply reports whether a document must set f for the schema to
// accept it: a required field, or a regular one that is neither concrete
// nor defaulted (a struct only if something inside it must be supplied).
func mustSupply(f field) bool {
	switch f.ctype {
	case cuelang.RequiredConstraint:
		return true
	case cuelang.OptionalConstraint:
		return false
	}
	if _, ok := f.v.Default(); ok {
		return false
	}
	if f.v.IncompleteKind() == cuelang.StructKind {
		fs, err := fieldsOf(f.v)
		if err != nil {
			return true
		}
		for _, g := range fs {
			if mustSupply(g) {
				return true
			}
		}
		return false
	}
	return !f.v.IsConcrete()
}

func (w *walker) compareStruct(path []string, o, n cuelang.Value) {
	w.compareValidators(path, o, n)
	ofs, err1 := fieldsOf(o)
	nfs, err2 := fieldsOf(n)
	if err1 != nil || err2 != nil {
		w.compareLeaf(path, o, n, false)
		return
	}
	newBy := map[string]field{}
	for _, f := range nfs {
		newBy[f.name] = f
	}
	// A struct that accepts any further field (... or a [string] pattern)
	// constrains such fields by its AnyString value.
	oPat := o.LookupPath(cuelang.MakePath(cuelang.AnyString))
	nPat := n.LookupPath(cuelang.MakePath(cuelang.AnyString))
	oldBy := map[string]bool{}
	for _, of := range ofs {
		oldBy[of.name] = true
		p := appendPath(path, of.name)
		nf, ok := newBy[of.name]
		if !ok && nPat.Exists() && n.Allows(cuelang.Str(of.name)) {
			// No longer declared, still accepted: judge the field's old
			// constraint against what the struct now accepts. Subsume
			// calls any removed field breaking.
			w.overridden = true
			w.compare(p, of.v, nPat, false)
			continue
		}
		if !ok {
			w.addAt(RuleFieldRemoved, p, path, p, "%s field removed; documents that set it are refused", describe(of))
			continue
		}
		oreq, nreq := mustSupply(of), mustSupply(nf)
		if !oreq && nreq && !(of.ctype == 0 && nf.ctype == 0) {
			w.add(RuleFieldBecameRequired, p, "became required (%s, was %s); documents without it are refused", describe(nf), describe(of))
		}
		w.compare(p, of.v, nf.v, false)
	}
	for _, nf := range nfs {
		if oldBy[nf.name] {
			continue
		}
		p := appendPath(path, nf.name)
		switch {
		case mustSupply(nf):
			w.addAt(RuleRequiredFieldAdded, p, p, path, "new %s field; documents without it are refused (an optional %s? or a default would be compatible)", describe(nf), nf.name)
			continue
		case nf.ctype == 0:
			w.overridden = true // Subsume calls any new regular field breaking
		}
		if oPat.Exists() && o.Allows(cuelang.Str(nf.name)) {
			// The old struct accepted this field as any other: the new
			// declaration must accept whatever the old one did.
			w.compare(p, oPat, nf.v, false)
		}
	}
	oAny, nAny := o.Allows(cuelang.Str(probeLabel)), n.Allows(cuelang.Str(probeLabel))
	switch {
	case oAny && !nAny:
		w.add(RuleStructClosed, path, "struct is closed: it accepted fields beyond the declared ones and no longer does")
	case oAny && nAny && oPat.Exists() && nPat.Exists():
		w.compare(appendPath(path, segPattern), oPat, nPat, false)
	}
}

func (w *walker) compareList(path []string, o, n cuelang.Value) {
	before := len(w.found)
	defer func() {
		// An open list's implicit default is []: judge a list's default
		// only when its elements did not already explain the change.
		if len(w.found) == before {
			w.checkDefault(path, o, n)
		}
	}()
	w.compareValidators(path, o, n)
	ol, nl := listPart(o), listPart(n)
	oe := ol.LookupPath(cuelang.MakePath(cuelang.AnyIndex))
	ne := nl.LookupPath(cuelang.MakePath(cuelang.AnyIndex))
	switch {
	case oe.Exists() && ne.Exists():
		w.compare(appendPath(path, segElem), oe, ne, true)
	case oe.Exists():
		w.add(RuleElementNarrowed, path, "list changed from %s to %s: it no longer accepts any number of elements", shortText(o), shortText(n))
	default:
		oLen, err1 := ol.Len().Int64()
		nLen, err2 := nl.Len().Int64()
		if err1 != nil || err2 != nil || (ne.Exists() && oLen > 0) || (!ne.Exists() && oLen != nLen) {
			w.compareLeaf(path, o, n, true)
			return
		}
		for i := range int(oLen) {
			w.compare(appendPath(path, "["+strconv.Itoa(i)+"]"),
				ol.LookupPath(cuelang.MakePath(cuelang.Index(i))), nl.LookupPath(cuelang.MakePath(cuelang.Index(i))), true)
		}
	}
}

// compareValidators judges the builtin validators a struct or list is
// conjoined with (struct.MinFields(1) & {...}, list.MinItems(1) & [...]):
// Subsume cannot compare builtins, so identical text is equal and any other
// change is narrowing unless Subsume proves otherwise.
func (w *walker) compareValidators(path []string, o, n cuelang.Value) {
	ov, nv := validators(o), validators(n)
	switch {
	case ov == "" && nv == "":
	case ov == nv:
		w.overridden = true // whole-value Subsume fails on any builtin
	case n.Subsume(o) != nil:
		w.add(RuleConstraintNarrowed, path, "constraint narrowed from %s to %s", orNone(ov), orNone(nv))
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// listPart returns the list literal of a list under validators, or v.
func listPart(v cuelang.Value) cuelang.Value {
	op, args := v.Expr()
	if op != cuelang.AndOp {
		return v
	}
	for _, a := range args {
		if aop, _ := a.Expr(); aop != cuelang.CallOp && a.IncompleteKind() == cuelang.ListKind {
			return listPart(a)
		}
	}
	return v
}

// checkDefault reports a default that was removed or changed.
func (w *walker) checkDefault(path []string, o, n cuelang.Value) bool {
	od, oh := o.Default()
	nd, nh := n.Default()
	if w.secret(path) {
		// A secret field's default is not shown (README, "Security").
		switch {
		case oh && !nh:
			w.add(RuleDefaultChanged, path, "default %s is removed; documents that relied on it are refused or change meaning", converge.SecretText)
			return true
		case oh && nh && defaultText(od) != defaultText(nd):
			w.add(RuleDefaultChanged, path, "default changed; documents that relied on it change meaning (the field is secret: its defaults are not shown)")
			return true
		}
		return false
	}
	switch {
	case oh && !nh:
		w.add(RuleDefaultChanged, path, "default %s is removed; documents that relied on it are refused or change meaning", defaultText(od))
		return true
	case oh && nh && defaultText(od) != defaultText(nd):
		w.add(RuleDefaultChanged, path, "default changed from %s to %s; documents that relied on it change meaning", defaultText(od), defaultText(nd))
		return true
	}
	return false
}

func (w *walker) compareLeaf(path []string, o, n cuelang.Value, elem bool) {
	w.checkDefault(path, o, n)
	if text(n) == "_" {
		return // top accepts anything (Subsume does not always say so)
	}
	if text(o) == text(n) {
		if n.Subsume(o) != nil {
			w.overridden = true // cue issue #2419: identical validators
		}
		return
	}
	if err := n.Subsume(o); err != nil {
		rule := RuleConstraintNarrowed
		switch {
		case elem:
			rule = RuleElementNarrowed
		case o.IncompleteKind()&(cuelang.StructKind|cuelang.ListKind) != 0:
			rule = RuleUnclassifiedChange
		}
		what := "constraint narrowed"
		if elem {
			what = "list element narrowed"
		}
		if w.secret(path) {
			w.add(rule, path, "%s (the field is secret: its constraints are not shown)", what)
			return
		}
		w.add(rule, path, "%s from %s to %s", what, shortText(o), shortText(n))
	}
}

// validators returns the text of the builtin calls v is a conjunction
// with (list.MinItems(1) in list.MinItems(1) & [...string]): the part of a
// list's constraint its elements do not say.
func validators(v cuelang.Value) string {
	op, args := v.Expr()
	switch op {
	case cuelang.CallOp:
		return text(v)
	case cuelang.AndOp:
		var parts []string
		for _, a := range args {
			if aop, _ := a.Expr(); aop == cuelang.CallOp || aop == cuelang.AndOp {
				parts = append(parts, validators(a))
			}
		}
		sort.Strings(parts)
		return strings.Join(parts, " & ")
	}
	return ""
}

// defaultText renders a default value as JSON when it is concrete (an open
// list's implicit default is []), else as CUE.
func defaultText(v cuelang.Value) string {
	if b, err := v.MarshalJSON(); err == nil {
		return string(b)
	}
	return shortText(v)
}

// describe renders a field's kind of presence and its type.
func describe(f field) string {
	switch f.ctype {
	case cuelang.RequiredConstraint:
		return "required " + shortText(f.v)
	case cuelang.OptionalConstraint:
		return "optional " + shortText(f.v)
	}
	if mustSupply(f) {
		return "regular " + shortText(f.v)
	}
	return "defaulted " + shortText(f.v)
}

// text is v's syntax as CUE source, references resolved: two values with
// the same text are equal.
func text(v cuelang.Value) string {
	b, err := format.Node(v.Syntax())
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(b)
	// Builtin calls carry their imports: drop them.
	for strings.HasPrefix(s, "import ") {
		_, rest, ok := strings.Cut(s, "\n")
		if !ok {
			break
		}
		s = strings.TrimLeft(rest, "\n")
	}
	return strings.TrimSpace(s)
}

// shortText is text on one line, at most 60 characters.
func shortText(v cuelang.Value) string {
	s := strings.Join(strings.Fields(text(v)), " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func appendPath(path []string, seg string) []string {
	return append(path[:len(path):len(path)], seg)
}

// renderPath renders part and segments as a field path: spec.teams[*].name,
// spec.tags[string], spec["a.b"].
func renderPath(part string, path []string) string {
	var b strings.Builder
	b.WriteString(part)
	for _, s := range path {
		switch {
		case strings.HasPrefix(s, "["):
			b.WriteString(s)
		case isIdent(s):
			b.WriteString("." + s)
		default:
			b.WriteString("[" + strconv.Quote(s) + "]")
		}
	}
	return b.String()
}
