package cue

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	cuelang "cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"
	cuejson "cuelang.org/go/encoding/json"
	cueyaml "cuelang.org/go/encoding/yaml"
	"go.yaml.in/yaml/v3"

	"github.com/convergehq/converge"
)

// Default limits (Options zero values).
const (
	DefaultMaxFileSize  = 1 << 20
	DefaultMaxDocuments = 100000
)

// SettingsFile is the repository settings file at the root of a loaded
// directory. It is not a typed document.
const SettingsFile = "converge.cue"

// Options bound what Load accepts from an untrusted repository.
type Options struct {
	// MaxFileSize refuses larger files (FILE_TOO_LARGE); 0 means 1 MiB.
	MaxFileSize int64
	// MaxDocuments stops loading after that many documents
	// (TOO_MANY_DOCUMENTS); 0 means 100,000.
	MaxDocuments int
	// CompareCompose composes each declared resource of a kind whose
	// compose expression is on the fast path both ways, on the fast path
	// and through CUE's evaluator, and reports a difference as a finding
	// (RuleComposeDiffers) at the expression. It costs CUE's evaluation
	// (~65 µs a child): a composition of more than compareComposeMax
	// children is compared on a sample (compareComposePaths), and once
	// compareComposeTotal children were, no further resource is. validate
	// sets it.
	CompareCompose bool
	// noFastDocuments checks every document through CUE alone, skipping
	// the fast check (fastValid): the tests' reference.
	noFastDocuments bool
}

// Result is everything Load read from one directory.
type Result struct {
	// Desired holds the settings and every document that was itself
	// valid; documents with findings are left out. Resources have Origin
	// git, Declared = Spec = the spec as JSON, Source "file:line".
	Desired converge.Desired
	// Schemas are the compiled schemas of Desired.Kinds (nil only if no
	// kind compiled).
	Schemas *Schemas
	// Findings are all problems, sorted by file, line, column, rule; none
	// means the directory is valid.
	Findings []converge.Finding
	// Files and Documents count what was read.
	Files, Documents int
}

// Valid reports whether r has no findings.
func (r *Result) Valid() bool { return len(r.Findings) == 0 }

// Load reads every document under dir of fsys ("." for the root) and
// validates them. Document problems are Findings, never an error; the error
// is for an fsys whose dir cannot be read at all.
//
// Load reads only through fs.ReadDir and fs.ReadFile, so any fs.FS works
// (os.DirFS, a git tree at a revision). Symlinks and other irregular entries
// are refused (SYMLINK) and never followed; dot-directories (.git,
// .converge) and files other than *.cue, *.json, *.yaml and *.yml are
// skipped.
func Load(fsys fs.FS, dir string, opts Options) (*Result, error) {
	return load(fsys, dir, opts, nil)
}

// openWalk fills opts' defaults and reads dir of fsys ("" is "."), where
// a load (or a Sandbox's collect) starts its walk.
func openWalk(fsys fs.FS, dir string, opts Options) (string, []fs.DirEntry, Options, error) {
	if opts.MaxFileSize <= 0 {
		opts.MaxFileSize = DefaultMaxFileSize
	}
	if opts.MaxDocuments <= 0 {
		opts.MaxDocuments = DefaultMaxDocuments
	}
	if dir == "" {
		dir = "."
	}
	if !fs.ValidPath(dir) {
		return "", nil, opts, fmt.Errorf("load %q: invalid directory", dir)
	}
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return "", nil, opts, fmt.Errorf("load %s: %w", dir, err)
	}
	return dir, entries, opts, nil
}

// load is Load, telling progress (when not nil) about each file and
// document before it evaluates it.
func load(fsys fs.FS, dir string, opts Options, progress func(file string, line, col int)) (*Result, error) {
	dir, entries, opts, err := openWalk(fsys, dir, opts)
	if err != nil {
		return nil, err
	}
	schemas := newSchemas()
	l := &loader{fsys: fsys, dir: dir, opts: opts, schemas: schemas, ev: schemas.newEvaluator(), res: &Result{},
		declared: map[converge.KindRef]place{}, src: map[string][]byte{}, progress: progress}
	l.walk(dir, entries)
	l.check()
	sortFindings(l.res.Findings)
	if len(schemas.kinds) > 0 {
		l.res.Schemas = schemas
	}
	return l.res, nil
}

// loader is the state of one Load.
type loader struct {
	fsys    fs.FS
	dir     string
	opts    Options
	schemas *Schemas
	ev      *evaluator // holds every document value of this load
	res     *Result
	docs    []*document
	src     map[string][]byte // file contents by relative path
	// declared holds every kind version declared, valid or not, so a
	// reference to an invalid kind is not called unknown.
	declared map[converge.KindRef]place
	full     bool // MaxDocuments reached
	// collect, when set, is handed each document file's contents
	// instead of parsing it (Sandbox reads, the child evaluates).
	collect func(rel string, data []byte)
	// progress, when set, hears of each file and document before it is
	// evaluated (the child of a Sandbox reports where it is).
	progress func(file string, line, col int)
	// deps are the depends_on entries of the resources read (depends.go).
	deps []gitDep
	// composers are the kinds that compose in CUE (compose.go).
	composers []*composeSrc
	// compared counts the children composed both ways
	// (Options.CompareCompose), up to compareComposeTotal.
	compared int
}

// document is one typed document.
type document struct {
	file string // relative to the loaded dir, slash-separated
	v    cuelang.Value
	pos  token.Pos // where the document starts
	// json says the document's value is its JSON: no value in it is
	// bytes, which JSON turns into a base64 string (jsonFaithful). Only
	// such a document is judged on its JSON by the fast check.
	json bool
}

// rel returns p relative to the loaded dir.
func (l *loader) rel(p string) string {
	if l.dir == "." {
		return p
	}
	return strings.TrimPrefix(p, l.dir+"/")
}

// walk visits the entries of directory d (already read), depth first in
// name order.
func (l *loader) walk(d string, entries []fs.DirEntry) {
	for _, e := range entries {
		if l.full {
			return
		}
		name := e.Name()
		p := path.Join(d, name)
		rel := l.rel(p)
		if !fs.ValidPath(p) || strings.Contains(name, "/") || name == ".." {
			l.addf(rel, token.NoPos, "", "PATH_INVALID", "path leaves the repository; refused")
			continue
		}
		t := e.Type()
		switch {
		case t&fs.ModeSymlink != 0:
			l.addf(rel, token.NoPos, "", "SYMLINK", "symbolic link refused (never followed)")
			continue
		case e.IsDir():
			if strings.HasPrefix(name, ".") {
				continue
			}
			sub, err := fs.ReadDir(l.fsys, p)
			if err != nil {
				l.addf(rel, token.NoPos, "", "READ_ERROR", "read directory: %v", err)
			}
			if slices.ContainsFunc(sub, func(d fs.DirEntry) bool { return d.Name() == ".git" }) {
				l.addf(rel, token.NoPos, "", "SUBMODULE", submoduleRefused)
				continue
			}
			l.walk(p, sub)
			continue
		case isSubmodule(e):
			l.addf(rel, token.NoPos, "", "SUBMODULE", submoduleRefused)
			continue
		case !t.IsRegular():
			if strings.HasPrefix(name, ".") {
				continue
			}
			l.addf(rel, token.NoPos, "", "SYMLINK", "irregular file (%v) refused", t)
			continue
		}
		ext := path.Ext(name)
		if strings.HasPrefix(name, ".") || (ext != ".cue" && ext != ".json" && ext != ".yaml" && ext != ".yml") {
			continue
		}
		l.file(p, rel, e, ext)
	}
}

// submoduleRefused is the finding of a git submodule, in a commit's tree
// (a gitlink) and in a work tree (a directory holding .git) alike: one
// policy for validate, plan and sync.
const submoduleRefused = "a git submodule (or a nested repository) refused: converge reads only this repository's own files (vendor the documents, or point --repo at that repository)"

// isSubmodule reports whether e is a submodule of the file system it came
// from, when that file system says so (a git tree's gitlink: the entry
// has IsSubmodule, see sync's treeFS).
func isSubmodule(e fs.DirEntry) bool {
	s, ok := e.(interface{ IsSubmodule() bool })
	return ok && s.IsSubmodule()
}

// file reads and parses one candidate file.
func (l *loader) file(p, rel string, e fs.DirEntry, ext string) {
	if info, err := e.Info(); err == nil && info.Size() > l.opts.MaxFileSize {
		l.addf(rel, token.NoPos, "", "FILE_TOO_LARGE", "file is %d bytes, over the limit of %d", info.Size(), l.opts.MaxFileSize)
		return
	}
	b, err := fs.ReadFile(l.fsys, p)
	if err != nil {
		l.addf(rel, token.NoPos, "", "READ_ERROR", "read file: %v", err)
		return
	}
	if int64(len(b)) > l.opts.MaxFileSize {
		l.addf(rel, token.NoPos, "", "FILE_TOO_LARGE", "file is %d bytes, over the limit of %d", len(b), l.opts.MaxFileSize)
		return
	}
	if l.collect != nil {
		l.collect(rel, b)
		return
	}
	if l.progress != nil {
		l.progress(rel, 1, 1)
	}
	l.res.Files++
	l.src[rel] = b
	if line, col, c, ok := notText(b); ok {
		l.res.Findings = append(l.res.Findings, converge.Finding{File: rel, Line: line, Column: col, Rule: "SYNTAX",
			Message: fmt.Sprintf("%s; a document must be UTF-8 text", c)})
		return
	}
	switch ext {
	case ".cue":
		f, err := parser.ParseFile(rel, b, parser.ParseComments)
		if err != nil {
			l.cueErr(rel, "SYNTAX", err)
			return
		}
		if emptyFile(f) && rel != SettingsFile {
			return // only comments: no document
		}
		v := l.ev.ctx.BuildFile(f)
		if err := v.Err(); err != nil {
			l.cueErrIn(rel, f, "CUE_INVALID", err)
			l.declaredInvalid(rel, f)
			return
		}
		if rel == SettingsFile {
			l.settings(rel, v)
			return
		}
		l.doc(rel, v, token.NoPos, jsonFaithful(f))
	case ".json":
		expr, err := cuejson.Extract(rel, b)
		if err != nil {
			l.cueErr(rel, "SYNTAX", err)
			return
		}
		l.expr(rel, expr)
	default: // YAML: a stream of documents
		dec := cueyaml.NewDecoder(rel, bytes.NewReader(b))
		for !l.full {
			expr, err := dec.Extract()
			if err == io.EOF {
				return
			}
			if err != nil {
				l.yamlErr(rel, b, err)
				return
			}
			l.expr(rel, expr)
		}
	}
}

// declaredInvalid records the kind a CUE file that does not evaluate
// declares, read from its syntax (type: "kind", kind and kind_version as
// literals), so a resource of that kind is told the kind is invalid
// (unknownKind: KIND_INVALID), not that it is unknown.
func (l *loader) declaredInvalid(rel string, f *ast.File) {
	var typ, kind string
	var version int
	var at token.Pos
	for _, d := range f.Decls {
		fd, ok := d.(*ast.Field)
		if !ok {
			continue
		}
		name, _, _ := ast.LabelName(fd.Label)
		lit, ok := fd.Value.(*ast.BasicLit)
		if !ok {
			continue
		}
		switch name {
		case "type", "kind":
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				continue
			}
			if name == "type" {
				typ = s
			} else {
				kind, at = s, fd.Pos()
			}
		case "kind_version":
			version, _ = strconv.Atoi(lit.Value)
		}
	}
	if typ != "kind" || kind == "" || version <= 0 {
		return
	}
	ref := converge.KindRef{Kind: kind, Version: version}
	if _, ok := l.declared[ref]; !ok {
		l.declared[ref] = l.at(rel, at)
	}
}

// expr builds one JSON or YAML document.
func (l *loader) expr(rel string, expr ast.Expr) {
	if lit, ok := expr.(*ast.BasicLit); ok && lit.Kind == token.NULL {
		return // an empty YAML document
	}
	v := l.ev.ctx.BuildExpr(expr)
	if err := v.Err(); err != nil {
		l.cueErr(rel, "SYNTAX", err)
		return
	}
	if v.IncompleteKind() == cuelang.TopKind {
		return // an empty YAML file
	}
	l.doc(rel, v, expr.Pos(), jsonFaithful(expr))
}

// doc records one document.
func (l *loader) doc(rel string, v cuelang.Value, pos token.Pos, json bool) {
	if !pos.IsValid() {
		pos = v.Pos()
	}
	if l.res.Documents >= l.opts.MaxDocuments {
		l.addf(rel, pos, "", "TOO_MANY_DOCUMENTS", "more than %d documents; loading stopped", l.opts.MaxDocuments)
		l.full = true
		return
	}
	l.res.Documents++
	if v.IncompleteKind() != cuelang.StructKind {
		l.addf(rel, pos, "", "DOCUMENT_INVALID", "a document must be a struct (object), not %v", v.IncompleteKind())
		return
	}
	l.docs = append(l.docs, &document{file: rel, v: v, pos: pos, json: json})
}

// cueErr turns a CUE parse or build error into findings.
func (l *loader) cueErr(rel, rule string, err error) { l.cueErrIn(rel, nil, rule, err) }

// cueErrIn is cueErr for an error about file f: an error CUE gives no
// position (a structural cycle, @embed outside a module) is placed at the
// field its path names in f, or at the attribute or the first declaration
// it is about, so every finding has a line and column.
func (l *loader) cueErrIn(rel string, f *ast.File, rule string, err error) {
	for _, e := range cueerrors.Errors(err) {
		format, args := e.Msg()
		msg := fmt.Sprintf(format, args...)
		if strings.HasPrefix(msg, "invalid JSON for file") {
			msg = "invalid JSON"
		}
		if u := errors.Unwrap(e); u != nil && !strings.Contains(msg, u.Error()) {
			msg += ": " + u.Error()
		}
		pos := e.Position()
		if !pos.IsValid() {
			for _, p := range cueerrors.Positions(e) {
				if p.Filename() == rel {
					pos = p
					break
				}
			}
		}
		path := ""
		if p := e.Path(); len(p) > 0 {
			path = joinPath("", p)
		}
		if !pos.IsValid() && f != nil {
			pos = astPos(f, e.Path(), msg)
		}
		l.addf(rel, pos, path, rule, "%s", msg)
	}
}

// yamlLine matches the YAML decoder's "file:line: message" errors.
var yamlLine = regexp.MustCompile(`^(?:yaml: )?(?:.*?):(\d+): (.*)$`)

func (l *loader) yamlErr(rel string, b []byte, err error) {
	if ps := cueerrors.Positions(err); len(ps) > 0 {
		l.cueErr(rel, "SYNTAX", err)
		return
	}
	f := converge.Finding{File: rel, Rule: "SYNTAX", Message: strings.TrimPrefix(err.Error(), rel+": ")}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		f.Line, _ = strconv.Atoi(m[1])
		f.Message = m[2]
	} else {
		// yaml.v3 words some errors without a line: find the first
		// line that makes the file fail.
		f.Line = yamlBadLine(b)
	}
	f.Column = 1
	l.res.Findings = append(l.res.Findings, f)
}

// yamlBadLine returns the first line n such that b's first n lines do not
// decode as YAML (a binary search; 1 if none is found).
func yamlBadLine(b []byte) int {
	var ends []int // offset after each line
	for i, c := range b {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(b) {
		ends = append(ends, len(b))
	}
	fails := func(n int) bool {
		dec := yaml.NewDecoder(bytes.NewReader(b[:ends[n-1]]))
		for {
			var node yaml.Node
			err := dec.Decode(&node)
			if err == io.EOF {
				return false
			}
			if err != nil {
				return true
			}
		}
	}
	lo, hi := 1, len(ends)
	if !fails(hi) {
		return 1
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// addf appends a finding at pos (line 0 if pos is unknown).
func (l *loader) addf(file string, pos token.Pos, path, rule, format string, args ...any) {
	f := converge.Finding{File: file, Path: path, Rule: rule, Message: OneLine(fmt.Sprintf(format, args...))}
	f.Line, f.Column = l.lineCol(file, pos)
	l.res.Findings = append(l.res.Findings, f)
}

// OneLine makes a message one line: one finding, one line, in every
// format (CUE's error details put positions on lines of their own).
// Line breaks and the indentation after them become "; ", trailing ones
// go.
func OneLine(msg string) string {
	if !strings.ContainsAny(msg, "\r\n") {
		return msg
	}
	var parts []string
	for _, l := range strings.FieldsFunc(msg, func(r rune) bool { return r == '\n' || r == '\r' }) {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, strings.TrimSuffix(l, ":"))
		}
	}
	return strings.Join(parts, "; ")
}

// lineCol returns pos's line and column (0, 0 if unknown). CUE positions
// a quoted label one past its opening quote; lineCol points at the quote,
// where the label starts.
func (l *loader) lineCol(file string, pos token.Pos) (line, col int) {
	if !pos.IsValid() {
		return 0, 0
	}
	line, col = pos.Line(), pos.Column()
	if src, off := l.src[file], pos.Offset(); col > 1 && off > 0 && off <= len(src) && src[off-1] == '"' {
		col--
	}
	return line, col
}

// sortFindings orders fs by file, line, column, rule and path, and makes
// every message one line (OneLine): every finding leaves the loader and
// the linter through it.
func sortFindings(fs []converge.Finding) {
	for i := range fs {
		fs[i].Message = OneLine(fs[i].Message)
	}
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		switch {
		case a.File != b.File:
			return a.File < b.File
		case a.Line != b.Line:
			return a.Line < b.Line
		case a.Column != b.Column:
			return a.Column < b.Column
		case a.Rule != b.Rule:
			return a.Rule < b.Rule
		case a.Path != b.Path:
			return a.Path < b.Path
		}
		return a.Message < b.Message
	})
}

// notText reports whether b is not UTF-8 text: invalid UTF-8 or a NUL
// byte (binary content), with the line and column of the first such byte
// and what it is.
func notText(b []byte) (line, col int, what string, bad bool) {
	line, col = 1, 1
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			return line, col, fmt.Sprintf("invalid UTF-8 (byte 0x%02x)", b[i]), true
		case r == 0:
			return line, col, "NUL byte (binary content)", true
		case r == '\n':
			line, col = line+1, 1
		default:
			col += n
		}
		i += n
	}
	return 0, 0, "", false
}

// astPos finds where in f an error without a position belongs: the
// deepest field on its path, else (for @embed) the first embed
// attribute, else the first declaration.
func astPos(f *ast.File, path []string, msg string) token.Pos {
	best := token.NoPos
	var walk func(decls []ast.Decl, path []string)
	walk = func(decls []ast.Decl, path []string) {
		if len(path) == 0 {
			return
		}
		for _, d := range decls {
			field, ok := d.(*ast.Field)
			if !ok {
				continue
			}
			name, _, err := ast.LabelName(field.Label)
			if err != nil || name != path[0] {
				continue
			}
			if !best.IsValid() || len(path) == 1 {
				best = field.Label.Pos()
			}
			if st, ok := field.Value.(*ast.StructLit); ok {
				before := best
				walk(st.Elts, path[1:])
				if best != before {
					return
				}
			}
			if len(path) == 1 {
				return
			}
		}
	}
	walk(f.Decls, path)
	if best.IsValid() {
		return best
	}
	if strings.Contains(msg, "embed") {
		for _, want := range []string{"embed", "extern"} {
			ast.Walk(f, func(n ast.Node) bool {
				if a, ok := n.(*ast.Attribute); ok && !best.IsValid() {
					if k, _ := a.Split(); k == want {
						best = a.Pos()
					}
				}
				return !best.IsValid()
			}, nil)
			if best.IsValid() {
				return best
			}
		}
	}
	for _, d := range f.Decls {
		if _, ok := d.(*ast.CommentGroup); !ok && d.Pos().IsValid() {
			return d.Pos()
		}
	}
	return token.NoPos
}

// emptyFile reports whether f declares nothing but a package clause and
// imports.
func emptyFile(f *ast.File) bool {
	for _, d := range f.Decls {
		switch d.(type) {
		case *ast.Package, *ast.ImportDecl, *ast.CommentGroup:
		default:
			return false
		}
	}
	return true
}

// jsonImports are the standard packages whose builtins return no bytes.
var jsonImports = map[string]bool{"list": true, "strings": true, "strconv": true, "math": true,
	"math/bits": true, "struct": true, "regexp": true, "net": true, "path": true, "time": true}

// jsonFaithful reports whether every value the syntax n can evaluate to
// exports to JSON as itself: no bytes literal (or bytes interpolation), no
// import but of jsonImports, no attribute that embeds a file. A bytes
// value exports as a base64 string, which a string schema would take.
func jsonFaithful(n ast.Node) bool {
	ok := true
	ast.Walk(n, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.BasicLit:
			if x.Kind == token.STRING && strings.HasPrefix(strings.TrimLeft(x.Value, "#"), "'") {
				ok = false
			}
		case *ast.ImportSpec:
			if p, err := strconv.Unquote(x.Path.Value); err != nil || !jsonImports[p] {
				ok = false
			}
		case *ast.Attribute:
			if k, _ := x.Split(); k == "embed" || k == "extern" {
				ok = false
			}
		}
		return ok
	}, nil)
	return ok
}
