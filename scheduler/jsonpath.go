package scheduler

import (
	"bytes"
	"encoding/json"
	"reflect"
	"sort"
)

// flowSet is one value to write at a dotted path.
type flowSet struct {
	path  string
	value json.RawMessage
}

// jsonEqual reports whether a and b encode the same value.
func jsonEqual(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// topLevelDiff lists the top-level fields whose values differ.
func topLevelDiff(a, b json.RawMessage) []string {
	var x, y map[string]json.RawMessage
	_ = json.Unmarshal(a, &x)
	_ = json.Unmarshal(b, &y)
	var out []string
	for k, v := range x {
		if w, ok := y[k]; !ok || !jsonEqual(v, w) {
			out = append(out, k)
		}
	}
	for k := range y {
		if _, ok := x[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
