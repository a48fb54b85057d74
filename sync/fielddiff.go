package sync

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"

	"github.com/convergehq/converge"
)

// FieldChange is one changed field of a spec, as a reviewer reads it:
// "~ cidr: "10.0.0.0/24" → "10.1.0.0/24"". A value at or inside a
// secret path is "(secret)", whatever it was.
type FieldChange struct {
	// Op is "~" (changed), "+" (added) or "-" (removed).
	Op string `json:"op"`
	// Path is the field below spec: "cidr", "tags.owner"; a list whose
	// elements all carry a "name" is matched by it:
	// "functional_domains[fd-00].service_teams[team-002]".
	Path string `json:"path"`
	// Old and New are the values as JSON (absent for "+" and "-"
	// respectively), secret ones as "(secret)".
	Old json.RawMessage `json:"old,omitempty"`
	New json.RawMessage `json:"new,omitempty"`
	// Secret marks a field at or inside a secret path.
	Secret bool `json:"secret,omitempty"`
}

// String renders c on one line, each value cut at maxValue bytes.
func (c FieldChange) String() string {
	switch c.Op {
	case "+":
		return "+ " + c.Path + ": " + shortJSON(c.New)
	case "-":
		return "- " + c.Path + ": " + shortJSON(c.Old)
	}
	return "~ " + c.Path + ": " + shortJSON(c.Old) + " → " + shortJSON(c.New)
}

// maxValue is how much of a value a one-line rendering shows.
const maxValue = 100

func shortJSON(raw json.RawMessage) string {
	s := string(raw)
	if len(s) <= maxValue {
		return s
	}
	cut := maxValue
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// DiffSpecs returns the changed fields from old to new (either may be
// nil: every field is then added or removed), sorted by path. secret are
// the kind's secret spec paths (converge.Kind.SecretPaths().Spec): a
// change there shows "(secret)" for both values, and a value holding one
// inside has it replaced.
func DiffSpecs(old, new json.RawMessage, secret [][]string) []FieldChange {
	ov, oerr := decodeSpec(old)
	nv, nerr := decodeSpec(new)
	if oerr != nil || nerr != nil {
		// Not JSON objects: the spec is one value.
		if bytes.Equal(bytes.TrimSpace(old), bytes.TrimSpace(new)) {
			return nil
		}
		d := &differ{secret: secret}
		d.leaf("~", nil, nil, orNull(old), orNull(new))
		return d.out
	}
	d := &differ{secret: secret}
	d.walk(nil, nil, ov, nv)
	sort.SliceStable(d.out, func(i, j int) bool { return d.out[i].Path < d.out[j].Path })
	return d.out
}

// SpecFields returns every top-level field of spec as an added ("+") or
// removed ("-") change: what a created resource gets, what a deleted one
// loses.
func SpecFields(op string, spec json.RawMessage, secret [][]string) []FieldChange {
	v, err := decodeSpec(spec)
	d := &differ{secret: secret}
	m, ok := v.(map[string]any)
	if err != nil || !ok {
		if len(bytes.TrimSpace(spec)) > 0 && string(bytes.TrimSpace(spec)) != "null" {
			d.leaf(op, nil, nil, spec, spec)
		}
		return d.out
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		d.leaf(op, []string{k}, []string{k}, m[k], m[k])
	}
	return d.out
}

func orNull(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

func decodeSpec(raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if v == nil {
		return map[string]any{}, nil
	}
	return v, nil
}

type differ struct {
	secret [][]string
	out    []FieldChange
}

// walk diffs o and n at path (as shown) and fields (the field names
// alone, for the secret paths).
func (d *differ) walk(path, fields []string, o, n any) {
	om, ook := o.(map[string]any)
	nm, nok := n.(map[string]any)
	if ook && nok {
		keys := make([]string, 0, len(om)+len(nm))
		for k := range om {
			keys = append(keys, k)
		}
		for k := range nm {
			if _, ok := om[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			ov, inO := om[k]
			nv, inN := nm[k]
			p, f := appendPath(path, k), append(fields[:len(fields):len(fields)], k)
			switch {
			case !inO:
				d.leaf("+", p, f, nil, nv)
			case !inN:
				d.leaf("-", p, f, ov, nil)
			default:
				d.walk(p, f, ov, nv)
			}
		}
		return
	}
	ol, olok := o.([]any)
	nl, nlok := n.([]any)
	if olok && nlok {
		ok, okeys := byName(ol)
		nk, nkeys := byName(nl)
		if okeys != nil && nkeys != nil {
			seen := map[string]bool{}
			for _, name := range nkeys {
				seen[name] = true
				p := withIndex(path, name)
				if ov, ok := ok[name]; ok {
					d.walk(p, fields, ov, nk[name])
				} else {
					d.leaf("+", p, fields, nil, nk[name])
				}
			}
			for _, name := range okeys {
				if !seen[name] {
					d.leaf("-", withIndex(path, name), fields, ok[name], nil)
				}
			}
			return
		}
	}
	if !equalJSON(o, n) {
		d.leaf("~", path, fields, o, n)
	}
}

// byName returns a list's elements by their "name" member and the names
// in order, or nil when an element has none, or two share one.
func byName(l []any) (map[string]any, []string) {
	if len(l) == 0 {
		return map[string]any{}, []string{}
	}
	m := make(map[string]any, len(l))
	names := make([]string, 0, len(l))
	for _, e := range l {
		o, ok := e.(map[string]any)
		if !ok {
			return nil, nil
		}
		name, ok := o["name"].(string)
		if !ok || name == "" {
			return nil, nil
		}
		if _, dup := m[name]; dup {
			return nil, nil
		}
		m[name] = e
		names = append(names, name)
	}
	return m, names
}

func appendPath(path []string, k string) []string {
	return append(path[:len(path):len(path)], k)
}

func withIndex(path []string, name string) []string {
	p := append([]string(nil), path...)
	if len(p) == 0 {
		return []string{"[" + name + "]"}
	}
	p[len(p)-1] += "[" + name + "]"
	return p
}

// leaf records a change of the value at path; o and n are decoded
// values, or json.RawMessage.
func (d *differ) leaf(op string, path, fields []string, o, n any) {
	c := FieldChange{Op: op, Path: strings.Join(path, ".")}
	if c.Path == "" {
		c.Path = "(spec)"
	}
	if converge.UnderSecret(fields, d.secret) {
		c.Secret = true
		if op != "+" {
			c.Old = json.RawMessage(`"` + converge.SecretText + `"`)
		}
		if op != "-" {
			c.New = json.RawMessage(`"` + converge.SecretText + `"`)
		}
		d.out = append(d.out, c)
		return
	}
	below := secretsBelow(fields, d.secret)
	enc := func(v any) json.RawMessage {
		var b []byte
		if raw, ok := v.(json.RawMessage); ok {
			b = raw
		} else {
			b, _ = json.Marshal(v) // decoded JSON always encodes
		}
		if len(below) > 0 {
			if r, found := converge.RedactJSON(b, below); len(found) > 0 {
				c.Secret = true
				b = r
			}
		}
		var buf bytes.Buffer
		if json.Compact(&buf, b) == nil {
			b = buf.Bytes()
		}
		return b
	}
	if op != "+" {
		c.Old = enc(o)
	}
	if op != "-" {
		c.New = enc(n)
	}
	d.out = append(d.out, c)
}

// secretsBelow returns the secret paths inside the field at fields,
// relative to it.
func secretsBelow(fields []string, paths [][]string) [][]string {
	var out [][]string
	for _, p := range paths {
		if len(p) <= len(fields) {
			continue
		}
		match := true
		for i, f := range fields {
			if p[i] != "*" && p[i] != f {
				match = false
				break
			}
		}
		if match {
			out = append(out, p[len(fields):])
		}
	}
	return out
}

func equalJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
