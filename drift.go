package converge

import (
	"bytes"
	"encoding/json"
	"sort"
)

// Drift returns the dotted paths of the fields of actual (an
// Observation's Actual) whose values differ from spec's, sorted: the
// declared object and the real one disagree there. Only fields actual
// holds are compared, each down to its leaves (a list is one leaf);
// a field actual holds and spec leaves out is not drift (the provider
// read a default the author did not declare). It names fields and never
// their values, so secret fields can be reported too. Invalid JSON on
// either side is reported as the whole object ("").
func Drift(spec, actual json.RawMessage) []string {
	if len(actual) == 0 {
		return nil
	}
	var s, a any
	if len(spec) == 0 {
		spec = json.RawMessage("{}")
	}
	if json.Unmarshal(spec, &s) != nil || json.Unmarshal(actual, &a) != nil {
		return []string{""}
	}
	var out []string
	drift("", s, a, &out)
	sort.Strings(out)
	return out
}

func drift(path string, s, a any, out *[]string) {
	am, ok := a.(map[string]any)
	if !ok {
		if !jsonEqual(s, a) {
			*out = append(*out, path)
		}
		return
	}
	sm, ok := s.(map[string]any)
	if !ok {
		if s != nil || path == "" {
			*out = append(*out, path)
		}
		return
	}
	for k, av := range am {
		sv, declared := sm[k]
		if !declared {
			continue
		}
		p := k
		if path != "" {
			p = path + "." + k
		}
		drift(p, sv, av, out)
	}
}

func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
