package scheduler

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
)

// Row is where in its composer's spec a composed child comes from: the
// names along the path of a list element (a BOM's domain "fd-00" and
// team "team-002") and the lists they are in ("functional_domains",
// "service_teams"). A plan counts changes per row; a rollout's waves
// select children by row.
type Row struct {
	Names  []string `json:"names"`
	Levels []string `json:"levels"`
}

// Label is the row's names joined: "fd-00/team-002".
func (r Row) Label() string { return strings.Join(r.Names, "/") }

// maxRowDepth bounds the walk of a spec (outside input): a BOM is a few
// levels deep.
const maxRowDepth = 16

// SpecRows returns the rows of spec: every element of a list of objects
// that each have a distinct, non-empty "name", nested ones too, in the
// order of the spec's keys (sorted) and lists.
func SpecRows(spec json.RawMessage) []Row {
	if len(bytes.TrimSpace(spec)) == 0 {
		return nil
	}
	var v any
	if json.Unmarshal(spec, &v) != nil {
		return nil
	}
	var out []Row
	var walk func(v any, names, levels []string, depth int)
	walk = func(v any, names, levels []string, depth int) {
		if depth > maxRowDepth {
			return
		}
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			l, ok := m[k].([]any)
			if !ok {
				walk(m[k], names, levels, depth+1)
				continue
			}
			if !namedList(l) {
				continue
			}
			lv := append(levels[:len(levels):len(levels)], k)
			for _, e := range l {
				n := append(names[:len(names):len(names)], e.(map[string]any)["name"].(string))
				out = append(out, Row{Names: n, Levels: lv})
				walk(e, n, lv, depth+1)
			}
		}
	}
	walk(v, nil, nil, 0)
	return out
}

// namedList reports whether l is a non-empty list of objects, each with
// a distinct, non-empty string "name".
func namedList(l []any) bool {
	if len(l) == 0 {
		return false
	}
	seen := make(map[string]bool, len(l))
	for _, e := range l {
		o, ok := e.(map[string]any)
		if !ok {
			return false
		}
		name, ok := o["name"].(string)
		if !ok || name == "" || seen[name] {
			return false
		}
		seen[name] = true
	}
	return true
}

// RowIndex finds the row a child comes from by the child's name: the
// deepest row whose names all appear in the name, in order, each between
// word boundaries ("fd-00-team-002-vpc" is of fd-00/team-002,
// "fd-00-tgw" of fd-00). A lookup costs a few map probes per level,
// whatever the number of rows.
type RowIndex struct {
	top rowLevel
}

type rowLevel map[string]*rowEntry

type rowEntry struct {
	row  Row
	kids rowLevel
}

// NewRowIndex indexes rows (SpecRows, of one spec or several: the first
// row of a path wins).
func NewRowIndex(rows []Row) *RowIndex {
	x := &RowIndex{top: rowLevel{}}
	for _, r := range rows {
		lv := x.top
		for i, name := range r.Names {
			e := lv[name]
			if e == nil {
				e = &rowEntry{row: Row{Names: r.Names[:i+1], Levels: r.Levels[:min(i+1, len(r.Levels))]}}
				lv[name] = e
			}
			if i == len(r.Names)-1 {
				break
			}
			if e.kids == nil {
				e.kids = rowLevel{}
			}
			lv = e.kids
		}
	}
	return x
}

// Of returns the row name comes from, or false.
func (x *RowIndex) Of(name string) (Row, bool) {
	if x == nil || len(x.top) == 0 {
		return Row{}, false
	}
	e, _ := x.top.deepest(name, 0)
	if e == nil {
		return Row{}, false
	}
	return e.row, true
}

// deepest returns the deepest entry of lv (or its descendants) whose
// names appear in s from at on, and its depth.
func (lv rowLevel) deepest(s string, at int) (*rowEntry, int) {
	var best *rowEntry
	depth := 0
	for i := at; i < len(s); i++ {
		if i > 0 && alnum(s[i-1]) {
			continue // a word starts here only after a non-word byte
		}
		for end := i + 1; end <= len(s); end++ {
			if end < len(s) && alnum(s[end]) {
				continue // and ends only before one
			}
			e := lv[s[i:end]]
			if e == nil {
				continue
			}
			d := 1
			if e.kids != nil {
				if k, kd := e.kids.deepest(s, end); k != nil {
					if kd+1 > depth {
						best, depth = k, kd+1
					}
					continue
				}
			}
			if d > depth {
				best, depth = e, d
			}
		}
	}
	return best, depth
}

func alnum(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}
