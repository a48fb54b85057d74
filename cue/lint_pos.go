package cue

import (
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/parser"
)

// position is a place in a revision's tree.
type position struct {
	file      string
	line, col int
}

func (p position) String() string {
	switch {
	case p.file == "":
		return "<unknown>"
	case p.line == 0:
		return p.file
	case p.col == 0:
		return fmt.Sprintf("%s:%d", p.file, p.line)
	}
	return fmt.Sprintf("%s:%d:%d", p.file, p.line, p.col)
}

// locator finds fields of kind schemas in the CUE files of one tree. It
// parses each file once; a nil tree (or a JSON or YAML kind, whose schemas
// are strings) gives the kind document's own position.
type locator struct {
	tree  fs.FS
	files map[string]*ast.File // nil entry: unreadable or not CUE
}

func newLocator(tree fs.FS) *locator {
	return &locator{tree: tree, files: map[string]*ast.File{}}
}

// find returns the position of part (spec, config) and path below it in the
// kind document at source ("file:line"): the deepest field of path that the
// file spells out, else the document.
func (l *locator) find(source, part string, segs []string) position {
	file, line := source, 0
	if i := strings.LastIndexByte(source, ':'); i > 0 {
		if n, err := strconv.Atoi(source[i+1:]); err == nil {
			file, line = source[:i], n
		}
	}
	pos := position{file: file, line: line}
	if line > 0 {
		pos.col = 1
	}
	f := l.parse(file)
	if f == nil || part == "" {
		return pos
	}
	scopes := [][]ast.Decl{f.Decls}
	fld := findField(f.Decls, part)
	if fld == nil {
		return pos
	}
	pos = at(file, fld.Pos(), pos)
	var node ast.Expr = fld.Value
	for _, s := range segs {
		next, label, decls := step(node, s, scopes, 0)
		if next == nil {
			break
		}
		if label != nil {
			pos = at(file, label.Pos(), pos)
		} else {
			pos = at(file, next.Pos(), pos)
		}
		if decls != nil {
			scopes = append(scopes, decls)
		}
		node = next
	}
	return pos
}

// at returns p's position in file, or def if p is unknown.
func at(file string, p interface {
	IsValid() bool
	Line() int
	Column() int
}, def position) position {
	if !p.IsValid() {
		return def
	}
	return position{file: file, line: p.Line(), col: p.Column()}
}

func (l *locator) parse(file string) *ast.File {
	if l.tree == nil || path.Ext(file) != ".cue" {
		return nil
	}
	if f, ok := l.files[file]; ok {
		return f
	}
	var f *ast.File
	if b, err := fs.ReadFile(l.tree, file); err == nil && int64(len(b)) <= DefaultMaxFileSize {
		f, _ = parser.ParseFile(file, b)
	}
	l.files[file] = f
	return f
}

// findField returns the field labelled name among decls, or nil.
func findField(decls []ast.Decl, name string) *ast.Field {
	for _, d := range decls {
		if f, ok := d.(*ast.Field); ok {
			if n, _, err := ast.LabelName(f.Label); err == nil && n == name {
				return f
			}
		}
	}
	return nil
}

// step follows one path segment from expr: it returns the value found, the
// field carrying it (nil for a list element) and the declarations of the
// struct it was found in.
func step(expr ast.Expr, seg string, scopes [][]ast.Decl, depth int) (ast.Expr, ast.Node, []ast.Decl) {
	if expr == nil || depth > 8 {
		return nil, nil, nil
	}
	switch x := expr.(type) {
	case *ast.StructLit:
		for _, d := range x.Elts {
			f, ok := d.(*ast.Field)
			if !ok {
				if e, ok := d.(*ast.EmbedDecl); ok {
					if v, lab, ds := step(e.Expr, seg, scopes, depth+1); v != nil {
						return v, lab, ds
					}
				}
				continue
			}
			if seg == segPattern {
				if _, ok := f.Label.(*ast.ListLit); ok {
					return f.Value, f.Label, x.Elts
				}
				continue
			}
			if n, _, err := ast.LabelName(f.Label); err == nil && n == seg {
				return f.Value, f.Label, x.Elts
			}
		}
	case *ast.ListLit:
		if seg == segElem {
			for _, e := range x.Elts {
				if el, ok := e.(*ast.Ellipsis); ok && el.Type != nil {
					return el.Type, nil, nil
				}
			}
		}
		if strings.HasPrefix(seg, "[") {
			if i, err := strconv.Atoi(strings.Trim(seg, "[]")); err == nil && i < len(x.Elts) {
				return x.Elts[i], nil, nil
			}
		}
	case *ast.ParenExpr:
		return step(x.X, seg, scopes, depth+1)
	case *ast.BinaryExpr:
		if v, lab, ds := step(x.X, seg, scopes, depth+1); v != nil {
			return v, lab, ds
		}
		return step(x.Y, seg, scopes, depth+1)
	case *ast.CallExpr:
		for _, a := range x.Args {
			if v, lab, ds := step(a, seg, scopes, depth+1); v != nil {
				return v, lab, ds
			}
		}
	case *ast.UnaryExpr: // *default
		return step(x.X, seg, scopes, depth+1)
	case *ast.Ident:
		for i := len(scopes) - 1; i >= 0; i-- {
			if f := findField(scopes[i], x.Name); f != nil {
				return step(f.Value, seg, scopes, depth+1)
			}
		}
	}
	return nil, nil, nil
}
