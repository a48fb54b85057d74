package converge

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
)

// SecretText is what every output shows in place of a secret value.
const SecretText = "(secret)"

// MinScrub is the shortest secret value that is also removed from free
// text (error messages, reasons, events) wherever it appears; a shorter
// one would mangle unrelated words. A message about a secret field itself
// has that field's value removed whatever its length.
const MinScrub = 3

// SecretPaths are a kind's secret fields by part, each path a list of
// field names below the part's root. "*" matches every member of an
// object (a `[string]: T` pattern); a path through a list applies to each
// of its elements.
type SecretPaths struct {
	Spec, Status, Config [][]string
}

// Empty reports whether no field is secret.
func (p SecretPaths) Empty() bool {
	return len(p.Spec) == 0 && len(p.Status) == 0 && len(p.Config) == 0
}

// SecretPaths splits k.Secret by part: "spec.a.b" is the spec's a.b,
// "status.…" the status's, "config.…" the provider config's; a path
// without one of these prefixes applies to both spec and status.
func (k *Kind) SecretPaths() SecretPaths {
	var p SecretPaths
	for _, s := range k.Secret {
		parts := strings.Split(s, ".")
		if parts[0] == "" {
			continue
		}
		if len(parts) > 1 {
			switch parts[0] {
			case "spec":
				p.Spec = append(p.Spec, parts[1:])
				continue
			case "status":
				p.Status = append(p.Status, parts[1:])
				continue
			case "config":
				p.Config = append(p.Config, parts[1:])
				continue
			}
		}
		p.Spec = append(p.Spec, parts)
		p.Status = append(p.Status, parts)
	}
	return p
}

// UnderSecret reports whether the field at path (below a part's root) is
// at or inside one of paths. List indexes in path ("3") are skipped.
func UnderSecret(path []string, paths [][]string) bool {
	var fields []string
	for _, f := range path {
		if !isIndex(f) {
			fields = append(fields, f)
		}
	}
	for _, p := range paths {
		if len(fields) < len(p) {
			continue
		}
		match := true
		for i, f := range p {
			if f != "*" && f != fields[i] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// AboveSecret reports whether the field at path (below a part's root)
// holds one of paths inside it: a message about it may show the secret
// within. List indexes in path are skipped.
func AboveSecret(path []string, paths [][]string) bool {
	var fields []string
	for _, f := range path {
		if !isIndex(f) {
			fields = append(fields, f)
		}
	}
	for _, p := range paths {
		if len(fields) >= len(p) {
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
			return true
		}
	}
	return false
}

func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// RedactJSON returns raw with the value at every one of paths replaced by
// "(secret)", and the secret values it removed (every string and number
// leaf, as text). raw is returned as is when no path holds a value, or
// when it is not JSON (it cannot hold a path then).
func RedactJSON(raw json.RawMessage, paths [][]string) (json.RawMessage, []string) {
	if len(paths) == 0 || len(bytes.TrimSpace(raw)) == 0 {
		return raw, nil
	}
	v, ok := decodeNumbers(raw)
	if !ok {
		return raw, nil
	}
	var found []string
	hit := false
	for _, p := range paths {
		v = redactAt(v, p, &found, &hit)
	}
	if !hit {
		return raw, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`"` + SecretText + `"`), found
	}
	return b, found
}

// SecretValues returns the values at paths in raw (every string and
// number leaf, as text), without changing raw.
func SecretValues(raw json.RawMessage, paths [][]string) []string {
	_, found := RedactJSON(raw, paths)
	return found
}

func decodeNumbers(raw []byte) (any, bool) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}

func redactAt(v any, path []string, found *[]string, hit *bool) any {
	switch t := v.(type) {
	case map[string]any:
		if len(path) == 0 {
			break
		}
		for k, child := range t {
			if path[0] != "*" && path[0] != k {
				continue
			}
			if len(path) == 1 {
				secretLeaves(child, found)
				t[k] = SecretText
				*hit = true
			} else {
				t[k] = redactAt(child, path[1:], found, hit)
			}
		}
	case []any:
		for i := range t {
			t[i] = redactAt(t[i], path, found, hit)
		}
	}
	return v
}

// secretLeaves appends every string and number leaf of v, as text.
func secretLeaves(v any, found *[]string) {
	switch t := v.(type) {
	case string:
		*found = append(*found, t)
	case json.Number:
		*found = append(*found, t.String())
	case map[string]any:
		for _, c := range t {
			secretLeaves(c, found)
		}
	case []any:
		for _, c := range t {
			secretLeaves(c, found)
		}
	}
}

// Scrub replaces every one of values that is at least min bytes long in
// s, quoted ("v", as JSON or Go would print it), JSON-escaped, or plain,
// by "(secret)". Longer values go first, so a value containing another is
// replaced whole. A value shorter than MinScrub (only with min below it)
// is replaced only where it stands alone, not inside a longer word or
// number: "5" in "key:5}" but not in "25 errors".
func Scrub(s string, values []string, min int) string {
	if len(values) == 0 || s == "" || !holdsAny(s, values, min) {
		return s
	}
	var long, short []string
	seen := map[string]bool{}
	for _, v := range values {
		if len(v) < min || v == "" {
			continue
		}
		q, _ := json.Marshal(v)
		for _, f := range []string{string(q), string(q[1 : len(q)-1]), v} {
			if seen[f] {
				continue
			}
			seen[f] = true
			if len(v) < MinScrub {
				short = append(short, f)
			} else {
				long = append(long, f)
			}
		}
	}
	if len(long) > 0 {
		sort.SliceStable(long, func(i, j int) bool { return len(long[i]) > len(long[j]) })
		pairs := make([]string, 0, 2*len(long))
		for _, f := range long {
			pairs = append(pairs, f, SecretText)
		}
		s = strings.NewReplacer(pairs...).Replace(s)
	}
	sort.SliceStable(short, func(i, j int) bool { return len(short[i]) > len(short[j]) })
	for _, f := range short {
		s = replaceWord(s, f)
	}
	return s
}

// holdsAny reports whether s holds one of values (at least min bytes),
// plain or JSON-escaped: the cheap test before building a replacer.
func holdsAny(s string, values []string, min int) bool {
	for _, v := range values {
		if len(v) < min || v == "" {
			continue
		}
		if strings.Contains(s, v) {
			return true
		}
		if q, _ := json.Marshal(v); !strings.Contains(s, string(q[1:len(q)-1])) {
			continue
		}
		return true
	}
	return false
}

// replaceWord replaces each occurrence of w in s that no letter, digit or
// '.' touches on either side by "(secret)".
func replaceWord(s, w string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, w)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(w)
		if (i > 0 && wordByte(s[i-1]) && wordByte(w[0])) || (end < len(s) && wordByte(s[end]) && wordByte(w[len(w)-1])) {
			b.WriteString(s[:i+1])
			s = s[i+1:]
			continue
		}
		b.WriteString(s[:i])
		b.WriteString(SecretText)
		s = s[end:]
	}
}

func wordByte(c byte) bool {
	return c == '.' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// ResourceSecrets returns the secret values of r under k: those at k's
// secret paths in r's declared spec, spec and status, and in config (r's
// provider config, nil if none). Nil if k has no secret field.
func ResourceSecrets(k *Kind, r *Resource, config json.RawMessage) []string {
	if k == nil || len(k.Secret) == 0 {
		return nil
	}
	p := k.SecretPaths()
	var vals []string
	vals = append(vals, SecretValues(r.Declared, p.Spec)...)
	vals = append(vals, SecretValues(r.Spec, p.Spec)...)
	vals = append(vals, SecretValues(r.Status, p.Status)...)
	vals = append(vals, SecretValues(config, p.Config)...)
	return vals
}

// ScrubJSON is Scrub for a JSON document: every string of raw (member
// names too) that holds one of values (at least min bytes) has it
// replaced by "(secret)", and the result is JSON still. raw is returned
// as is when nothing changed or it is not JSON.
func ScrubJSON(raw json.RawMessage, values []string, min int) json.RawMessage {
	var plain []string
	for _, v := range values {
		if len(v) < min || v == "" {
			continue
		}
		// Cheap test first: the value as it appears inside a JSON string.
		q, _ := json.Marshal(v)
		if bytes.Contains(raw, q[1:len(q)-1]) {
			plain = append(plain, v)
		}
	}
	if len(plain) == 0 {
		return raw
	}
	sort.SliceStable(plain, func(i, j int) bool { return len(plain[i]) > len(plain[j]) })
	v, ok := decodeNumbers(raw)
	if !ok {
		return raw
	}
	changed := false
	scrub := func(s string) string {
		for _, p := range plain {
			s = strings.ReplaceAll(s, p, SecretText)
		}
		return s
	}
	var walk func(any) any
	walk = func(x any) any {
		switch t := x.(type) {
		case string:
			if s := scrub(t); s != t {
				changed = true
				return s
			}
		case map[string]any:
			for _, k := range sortedKeys(t) {
				c := t[k]
				if nk := scrub(k); nk != k {
					changed = true
					delete(t, k)
					k = nk
				}
				t[k] = walk(c)
			}
		case []any:
			for i := range t {
				t[i] = walk(t[i])
			}
		}
		return x
	}
	v = walk(v)
	if !changed {
		return raw
	}
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`"` + SecretText + `"`)
	}
	return b
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
