package scheduler

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"

	"github.com/convergehq/converge/proto/rawjson"
)

// Value flows cut specs and statuses without decoding them: they run for
// every consumer, and encoding/json's map decoding dominated the engine's
// profile. The bytes are cut by proto/rawjson, converge's one JSON layer:
// a worker's status and composed specs are checked there once, when
// they arrive (checkObject), and every cut scans with the same grammar,
// so a malformed status never flows into a spec (FuzzSplitObject
// compares the cuts with encoding/json).

// maxDepth is the nesting limit of every JSON document: encoding/json's.
const maxDepth = rawjson.MaxDepth

type field struct {
	key string
	val []byte
}

// splitObject returns the fields of the JSON object b (later duplicates
// win, as with encoding/json, for bytes kept before checkObject refused
// duplicates). An empty b and null have no fields; any other value, and
// anything that is not exactly one valid JSON value, is an error.
func splitObject(b []byte) ([]field, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var out []field
	err := rawjson.Fields(b, func(k rawjson.Key, val []byte) error {
		out = setField(out, k.String(), val)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func setField(fs []field, key string, val []byte) []field {
	for k := range fs {
		if fs[k].key == key {
			fs[k].val = val
			return fs
		}
	}
	return append(fs, field{key, val})
}

// getField returns the raw value at the dotted path of object b. It
// scans b in place (no field list is built: a start checks a million
// consumers' flows with it); an invalid b has no fields, as
// splitObject would say.
func getField(b []byte, path string) ([]byte, bool) {
	seg, rest, more := strings.Cut(path, ".")
	v, ok, err := rawjson.Field(b, seg)
	if err != nil || !ok {
		return nil, false
	}
	if !more {
		return v, true
	}
	return getField(v, rest)
}

// setFields writes each value at its dotted path into object b and
// returns the object with keys sorted; it does not modify b.
func setFields(b []byte, sets []flowSet) ([]byte, error) {
	fs, err := splitObject(b)
	if err != nil {
		return nil, err
	}
	for _, s := range sets {
		seg, rest, more := strings.Cut(s.path, ".")
		if !more {
			fs = setField(fs, seg, s.value)
			continue
		}
		var sub []byte
		for _, f := range fs {
			if f.key == seg {
				sub = f.val
			}
		}
		nv, err := setFields(sub, []flowSet{{rest, s.value}})
		if err != nil {
			return nil, errors.New("flow into " + s.path + ": " + seg + " is not an object")
		}
		fs = setField(fs, seg, nv)
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].key < fs[j].key })
	n := 2
	for _, f := range fs {
		n += len(f.key) + len(f.val) + 4
	}
	out := make([]byte, 0, n)
	out = append(out, '{')
	for i, f := range fs {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendKey(out, f.key)
		out = append(out, ':')
		out = append(out, f.val...)
	}
	return append(out, '}'), nil
}

func appendKey(out []byte, k string) []byte {
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(k)
			return append(out, q...)
		}
	}
	out = append(out, '"')
	out = append(out, k...)
	return append(out, '"')
}
