package site

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"

	"github.com/convergehq/converge"
)

// secretText replaces every secret value the site would otherwise write.
const secretText = "(secret)"

// minScrub is the shortest secret string that is also scrubbed from free
// text; shorter values would mangle unrelated words.
const minScrub = 3

// secretPaths are the dotted paths of one kind (the union over its
// versions) whose values the site never writes.
type secretPaths struct {
	spec, status [][]string
}

// secretsByKind reads each kind's Secret list. A path "spec.a.b" applies to
// the spec, "status.a.b" to the status, "config.…" to the provider config
// (never read by the site); a path without one of these prefixes applies
// to both spec and status. Unprefixed paths are also applied literally,
// so a field really named "spec" is covered too.
func secretsByKind(kinds []*converge.Kind) map[string]*secretPaths {
	out := make(map[string]*secretPaths)
	for _, k := range kinds {
		if len(k.Secret) == 0 {
			continue
		}
		sp := out[k.Name]
		if sp == nil {
			sp = new(secretPaths)
			out[k.Name] = sp
		}
		for _, p := range k.Secret {
			parts := strings.Split(p, ".")
			if len(parts) == 0 || parts[0] == "" {
				continue
			}
			sp.spec = append(sp.spec, parts)
			sp.status = append(sp.status, parts)
			if len(parts) > 1 {
				switch parts[0] {
				case "spec":
					sp.spec = append(sp.spec, parts[1:])
				case "status":
					sp.status = append(sp.status, parts[1:])
				}
			}
		}
	}
	return out
}

// configSecrets returns the secret values of the provider configs r
// holds (sorted, without duplicates), if r can list them
// (*state.Store can): the values at each config's kind's "config."
// secret paths.
func configSecrets(ctx context.Context, r Reader, kinds []*converge.Kind) ([]string, error) {
	lister, ok := r.(interface {
		Configs(ctx context.Context) ([]*converge.ProviderConfig, error)
	})
	if !ok {
		return nil, nil
	}
	byRef := make(map[converge.KindRef]*converge.Kind)
	for _, k := range kinds {
		if len(k.Secret) > 0 {
			byRef[k.Ref()] = k
		}
	}
	if len(byRef) == 0 {
		return nil, nil
	}
	cs, err := lister.Configs(ctx)
	if err != nil {
		return nil, err
	}
	var vals []string
	for _, c := range cs {
		if k := byRef[c.Ref()]; k != nil {
			vals = append(vals, converge.SecretValues(c.Config, k.SecretPaths().Config)...)
		}
	}
	sort.Strings(vals)
	return slices.Compact(vals), nil
}

// hasPath reports whether paths holds p.
func hasPath(paths [][]string, p string) bool {
	for _, q := range paths {
		if strings.Join(q, ".") == p {
			return true
		}
	}
	return false
}

// redact returns raw indented for display, with the value at every path
// replaced by "(secret)", and the secret strings it removed. A path
// through a list applies to each element. Invalid JSON is shown as is (it
// cannot hold a path).
func redact(raw json.RawMessage, paths [][]string) (string, []string) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return "", nil
	}
	if len(paths) == 0 {
		if out, ok := indentJSON(make([]byte, 0, 2*len(raw)), raw); ok {
			return string(out), nil
		}
		var buf bytes.Buffer
		if err := json.Indent(&buf, raw, "", "  "); err != nil {
			return string(raw), nil
		}
		return buf.String(), nil
	}
	red, found := converge.RedactJSON(raw, paths)
	var buf bytes.Buffer
	if err := json.Indent(&buf, red, "", "  "); err != nil {
		return string(raw), nil // invalid JSON cannot hold a path
	}
	return buf.String(), found
}

// redactTo appends redact(raw, paths)'s text to dst: with no paths, raw
// indented straight into dst.
func redactTo(dst []byte, raw json.RawMessage, paths [][]string) []byte {
	if len(paths) == 0 && len(bytes.TrimSpace(raw)) > 0 {
		if out, ok := indentJSON(dst, raw); ok {
			return out
		}
	}
	s, _ := redact(raw, paths)
	return append(dst, s...)
}

// newScrubber returns a replacer of every value of at least minScrub
// bytes (and its JSON-escaped form) by "(secret)", longest first so a
// secret containing another is replaced whole; nil if there is none.
func newScrubber(values map[string]int) *strings.Replacer {
	var vs []string
	seen := make(map[string]bool)
	for v, n := range values {
		if n <= 0 || len(v) < minScrub {
			continue
		}
		forms := []string{v}
		if b, err := json.Marshal(v); err == nil {
			if e := string(b[1 : len(b)-1]); e != v {
				forms = append(forms, e)
			}
		}
		for _, f := range forms {
			if !seen[f] {
				seen[f] = true
				vs = append(vs, f)
			}
		}
	}
	if len(vs) == 0 {
		return nil
	}
	sort.Slice(vs, func(i, j int) bool {
		if len(vs[i]) != len(vs[j]) {
			return len(vs[i]) > len(vs[j])
		}
		return vs[i] < vs[j]
	})
	pairs := make([]string, 0, 2*len(vs))
	for _, v := range vs {
		pairs = append(pairs, v, secretText)
	}
	return strings.NewReplacer(pairs...)
}
