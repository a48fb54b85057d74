package cue

import (
	"encoding/json"
	"sort"
	"strings"

	cuelang "cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/parser"

	"github.com/convergehq/converge"
)

// secretAttr is the attribute that marks a schema field secret:
// `password?: string @converge(secret)`.
const secretAttr = "converge"

// SecretList returns k's secret paths: its explicit Secret list and every
// field of its spec, status and config schemas marked @converge(secret),
// prefixed "spec.", "status." or "config.", sorted and without
// duplicates. A field inside a `[string]: T` pattern is named "*"; lists
// are crossed (a path through a list applies to each element). A schema
// that does not parse contributes nothing (compiling it fails anyway).
func SecretList(k *converge.Kind) []string {
	set := map[string]bool{}
	for _, p := range k.Secret {
		if p != "" {
			set[p] = true
		}
	}
	for _, part := range [...]struct{ name, src string }{{"spec", k.SpecSchema}, {"status", k.StatusSchema}, {"config", k.ConfigSchema}} {
		for _, p := range schemaSecrets(part.src) {
			set[part.name+"."+strings.Join(p, ".")] = true
		}
	}
	if len(set) == 0 {
		return nil
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// schemaSecrets returns the paths of the fields of a schema's CUE source
// marked @converge(secret).
func schemaSecrets(src string) [][]string {
	if !strings.Contains(src, "@"+secretAttr) {
		return nil
	}
	f, err := parser.ParseFile("schema", src, parser.ParseComments)
	if err != nil {
		return nil
	}
	var out [][]string
	secretDecls(f.Decls, nil, &out)
	return out
}

func secretDecls(decls []ast.Decl, prefix []string, out *[][]string) {
	for _, d := range decls {
		switch d := d.(type) {
		case *ast.Field:
			var name string
			if l, ok := d.Label.(*ast.ListLit); ok && len(l.Elts) == 1 {
				name = "*" // [string]: T
			} else if n, _, err := ast.LabelName(d.Label); err == nil && n != "" {
				name = n
			} else {
				continue
			}
			path := append(append([]string(nil), prefix...), name)
			if isSecret(d.Attrs) {
				*out = append(*out, path)
				continue
			}
			secretExpr(d.Value, path, out)
		case *ast.EmbedDecl:
			secretExpr(d.Expr, prefix, out)
		}
	}
}

// secretExpr walks a field's value: structs, the elements of lists, both
// sides of & and |, parentheses.
func secretExpr(x ast.Expr, prefix []string, out *[][]string) {
	switch x := x.(type) {
	case *ast.StructLit:
		secretDecls(x.Elts, prefix, out)
	case *ast.ListLit:
		for _, e := range x.Elts {
			if el, ok := e.(*ast.Ellipsis); ok {
				if el.Type != nil {
					secretExpr(el.Type, prefix, out)
				}
				continue
			}
			secretExpr(e, prefix, out)
		}
	case *ast.BinaryExpr:
		secretExpr(x.X, prefix, out)
		secretExpr(x.Y, prefix, out)
	case *ast.ParenExpr:
		secretExpr(x.X, prefix, out)
	}
}

// isSecret reports whether attrs hold @converge(secret).
func isSecret(attrs []*ast.Attribute) bool {
	for _, a := range attrs {
		key, body := a.Split()
		if key != secretAttr {
			continue
		}
		for _, w := range strings.Split(body, ",") {
			if strings.TrimSpace(w) == "secret" {
				return true
			}
		}
	}
	return false
}

// redactErrs removes the secret values of data (its leaves at paths)
// from errs' messages: a message about a secret field, or about a field
// that holds one (CUE may print the whole struct), loses the values
// whatever their length; any other loses values of at least
// converge.MinScrub bytes.
func redactErrs(errs []fieldError, vals []string, paths [][]string) {
	if len(vals) == 0 {
		return
	}
	for i := range errs {
		min := converge.MinScrub
		if converge.UnderSecret(errs[i].path, paths) || converge.AboveSecret(errs[i].path, paths) {
			min = 1
		}
		errs[i].msg = converge.Scrub(errs[i].msg, vals, min)
	}
}

// cueSecretValues returns the leaves of v at paths, as text.
func cueSecretValues(v cuelang.Value, paths [][]string) []string {
	if len(paths) == 0 {
		return nil
	}
	b, err := v.MarshalJSON()
	if err != nil {
		// An incomplete document: walk what is concrete.
		var out []string
		for _, p := range paths {
			cueLeavesAt(v, p, &out)
		}
		return out
	}
	return converge.SecretValues(json.RawMessage(b), paths)
}

func cueLeavesAt(v cuelang.Value, path []string, out *[]string) {
	switch v.IncompleteKind() {
	case cuelang.StructKind:
		if len(path) == 0 {
			break // the whole struct is secret
		}
		it, err := v.Fields()
		if err != nil {
			return
		}
		for it.Next() {
			if path[0] == "*" || it.Selector().Unquoted() == path[0] {
				cueLeavesAt(it.Value(), path[1:], out)
			}
		}
		return
	case cuelang.ListKind:
		it, err := v.List()
		if err != nil {
			return
		}
		for it.Next() {
			cueLeavesAt(it.Value(), path, out)
		}
		return
	}
	if len(path) > 0 {
		return
	}
	if s, err := v.String(); err == nil {
		*out = append(*out, s)
	} else if b, err := v.MarshalJSON(); err == nil {
		*out = append(*out, converge.SecretValues(json.RawMessage(`{"v":`+string(b)+`}`), [][]string{{"v"}})...)
	}
}

// partPaths returns the paths below part ("spec", "status", "config")
// that are secret in k (its explicit list and its schemas' attributes).
func partPaths(k *converge.Kind, part string) [][]string {
	kk := *k
	kk.Secret = SecretList(k)
	if len(kk.Secret) == 0 {
		return nil
	}
	p := kk.SecretPaths()
	switch part {
	case "spec":
		return p.Spec
	case "status":
		return p.Status
	case "config":
		return p.Config
	}
	return nil
}

// secret reports whether the schema field at path (lint's path, with its
// list and pattern segments) is secret in the old or the new kind.
func (w *walker) secret(path []string) bool {
	var fields []string
	for _, f := range path {
		switch f {
		case segElem:
		case segPattern:
			fields = append(fields, "*")
		default:
			fields = append(fields, f)
		}
	}
	return converge.UnderSecret(fields, partPaths(w.old, w.part)) || converge.UnderSecret(fields, partPaths(w.new, w.part))
}
