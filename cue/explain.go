package cue

import (
	"fmt"
	"slices"
	"strings"

	cuelang "cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/format"
	"cuelang.org/go/cue/parser"

	"github.com/convergehq/converge"
)

// FieldDoc is one field of a kind's schema as `converge explain` shows
// it, as `kubectl explain` shows a field of a resource.
type FieldDoc struct {
	// Path is the field's path from the document: "spec.tags.owner".
	Path string `json:"path"`
	// Type is the field's constraint as CUE source: "string",
	// "int & >=1 & <=65535", "[...string]", a struct's fields elided.
	Type string `json:"type"`
	// Must: a document has to set it (a required field, or a regular
	// one with no value or default of its own); Optional: it may leave
	// it out (field?); neither: the schema gives it a value.
	Must     bool `json:"must"`
	Optional bool `json:"optional"`
	// Default is the field's default as CUE source, "" for none.
	Default string `json:"default,omitempty"`
	// Secret: its value is never shown (@converge(secret), or the kind's
	// secret list).
	Secret bool `json:"secret,omitempty"`
	// Doc is the field's doc comment.
	Doc string `json:"doc,omitempty"`
	// Fields are a struct's fields, one level down.
	Fields []FieldDoc `json:"fields,omitempty"`
}

// Explain returns the field of k's schemas at path: "spec" (also ""),
// "status" or "config", then field names ("spec.tags", "config.region").
// A path through a list or a map goes through its element: "[]" or "*"
// ("spec.subnets.[].cidr"). An unknown field is an error naming the
// fields there are.
func Explain(k *converge.Kind, path string) (*FieldDoc, error) {
	parts := strings.Split(strings.Trim(path, "."), ".")
	if parts[0] == "" {
		parts[0] = "spec"
	}
	var src string
	switch parts[0] {
	case "spec":
		src = k.SpecSchema
	case "status":
		src = k.StatusSchema
	case "config":
		src = k.ConfigSchema
	default:
		return nil, fmt.Errorf("explain %s/v%d: %q: a path starts with spec, status or config", k.Name, k.Version, parts[0])
	}
	name := fmt.Sprintf("%s/v%d %s", k.Name, k.Version, parts[0])
	wrapped, err := wrapSchemaWith(name, src, parts[0] == "status", parser.ParseComments)
	if err != nil {
		return nil, fmt.Errorf("explain %s: %w", name, err)
	}
	v, err := build(cuecontext.New(), name, wrapped)
	if err != nil {
		return nil, fmt.Errorf("explain %s: %w", name, err)
	}
	secret := SecretList(k)
	doc := FieldDoc{Path: parts[0]}
	for _, p := range parts[1:] {
		next, ok, err := explainStep(v, p)
		if err != nil {
			return nil, fmt.Errorf("explain %s: %w", doc.Path, err)
		}
		if !ok {
			return nil, fmt.Errorf("explain %s/v%d: %s has no field %q (it has: %s)", k.Name, k.Version, doc.Path, p, strings.Join(fieldNames(v), ", "))
		}
		doc = explainField(doc.Path+"."+p, next.f, secret)
		v = next.f.v
	}
	if doc.Path == parts[0] {
		doc.Type = typeOf(v)
		doc.Doc = docOf(v)
	}
	fs, _ := fieldsOf(v)
	for _, f := range fs {
		doc.Fields = append(doc.Fields, explainField(doc.Path+"."+f.name, f, secret))
	}
	return &doc, nil
}

type stepped struct{ f field }

// explainStep goes from v to its field p, or to its list or map element for "[]"
// or "*".
func explainStep(v cuelang.Value, p string) (stepped, bool, error) {
	switch p {
	case "[]":
		e := v.LookupPath(cuelang.MakePath(cuelang.AnyIndex))
		return stepped{field{name: "[]", v: e}}, e.Exists(), nil
	case "*":
		e := v.LookupPath(cuelang.MakePath(cuelang.AnyString))
		return stepped{field{name: "*", v: e}}, e.Exists(), nil
	}
	fs, err := fieldsOf(v)
	if err != nil {
		return stepped{}, false, err
	}
	for _, f := range fs {
		if f.name == p {
			return stepped{f}, true, nil
		}
	}
	return stepped{}, false, nil
}

func explainField(path string, f field, secret []string) FieldDoc {
	d := FieldDoc{Path: path, Type: typeOf(f.v), Must: mustSupply(f), Optional: f.ctype == cuelang.OptionalConstraint, Doc: docOf(f.v)}
	if def, ok := f.v.Default(); ok {
		d.Default = source(def)
	}
	d.Secret = slices.Contains(secret, path)
	if a := f.v.Attribute("converge"); a.Err() == nil {
		if ok, _ := a.Flag(0, "secret"); ok {
			d.Secret = true
		}
	}
	return d
}

// typeOf is v's constraint as CUE source, a struct shown as {…} with its
// field count (its fields are listed apart).
func typeOf(v cuelang.Value) string {
	if v.IncompleteKind() == cuelang.StructKind {
		if n := len(fieldNames(v)); n > 0 {
			return fmt.Sprintf("{…} (%d fields)", n)
		}
		// No named fields: a map ({[string]: string}) or an open struct.
	}
	return source(v)
}

func source(v cuelang.Value) string {
	b, err := format.Node(v.Syntax(cuelang.Raw()))
	if err != nil {
		return v.IncompleteKind().String()
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

func docOf(v cuelang.Value) string {
	var lines []string
	for _, g := range v.Doc() {
		lines = append(lines, strings.TrimSpace(g.Text()))
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

func fieldNames(v cuelang.Value) []string {
	fs, _ := fieldsOf(v)
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.name
	}
	return out
}
