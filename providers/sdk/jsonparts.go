package sdk

import (
	"encoding/json"
	"fmt"

	"github.com/convergehq/converge/proto/rawjson"
)

// Helpers for Provider.Parts: cutting a big spec into parts must cost
// less than composing them, so these find a field's raw bytes with
// converge's JSON layer (proto/rawjson), never decoding what they skip.
// The spec a worker receives was checked by the control plane; the cut
// scans with the same grammar, so malformed input is an error, never a
// wrong cut.

// ArrayField returns the raw elements of the array that is the value of
// the top-level field of the JSON object obj (nil when the field is
// absent or null).
func ArrayField(obj json.RawMessage, field string) ([]json.RawMessage, error) {
	v, ok, err := rawjson.Field(obj, field)
	if err != nil || !ok {
		return nil, err
	}
	if string(v) == "null" {
		return nil, nil
	}
	var out []json.RawMessage
	err = rawjson.Elements(v, func(el []byte) error {
		out = append(out, el)
		return nil
	})
	if err == rawjson.ErrNotArray {
		return nil, fmt.Errorf("%s: not an array", field)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return out, nil
}

// StringField returns the string value of the top-level field of the
// JSON object obj, and whether it is there.
func StringField(obj json.RawMessage, field string) (string, bool, error) {
	v, ok, err := rawjson.Field(obj, field)
	if err != nil || !ok {
		return "", ok, err
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", false, fmt.Errorf("%s: %w", field, err)
	}
	return s, true, nil
}
