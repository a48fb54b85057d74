package sdk

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Helpers for Provider.Parts: cutting a big spec into parts must cost
// less than composing them, so these find a field's raw bytes with a
// scan that only tracks strings and nesting, never decoding what they
// skip. The spec a worker receives was validated as JSON by the control
// plane; malformed input is an error, never a wrong cut.

var errJSON = errors.New("malformed JSON")

// ArrayField returns the raw elements of the array that is the value of
// the top-level field of the JSON object obj (nil when the field is
// absent or null).
func ArrayField(obj json.RawMessage, field string) ([]json.RawMessage, error) {
	// The scan below tracks strings and nesting only: whole-document
	// validity first, or `{"a":[tru, 1x]}` and trailing garbage pass.
	if !json.Valid(obj) {
		return nil, errJSON
	}
	v, ok, err := rawField(obj, field)
	if err != nil || !ok {
		return nil, err
	}
	i := skipWS(v, 0)
	if i < len(v) && v[i] == 'n' {
		return nil, nil
	}
	if i >= len(v) || v[i] != '[' {
		return nil, fmt.Errorf("%s: not an array", field)
	}
	var out []json.RawMessage
	i = skipWS(v, i+1)
	if i < len(v) && v[i] == ']' {
		return out, nil
	}
	for {
		end, err := skipValue(v, i)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", field, len(out), err)
		}
		out = append(out, v[i:end])
		i = skipWS(v, end)
		if i >= len(v) {
			return nil, fmt.Errorf("%s: %w", field, errJSON)
		}
		if v[i] == ']' {
			return out, nil
		}
		if v[i] != ',' {
			return nil, fmt.Errorf("%s: %w", field, errJSON)
		}
		i = skipWS(v, i+1)
	}
}

// StringField returns the string value of the top-level field of the
// JSON object obj, and whether it is there.
func StringField(obj json.RawMessage, field string) (string, bool, error) {
	v, ok, err := rawField(obj, field)
	if err != nil || !ok {
		return "", ok, err
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", false, fmt.Errorf("%s: %w", field, err)
	}
	return s, true, nil
}

// rawField returns the raw value of the top-level field of object b (the
// last one, as encoding/json decodes duplicates).
func rawField(b []byte, field string) ([]byte, bool, error) {
	i := skipWS(b, 0)
	if i+4 <= len(b) && string(b[i:i+4]) == "null" && skipWS(b, i+4) == len(b) {
		return nil, false, nil // no fields, as encoding/json decodes it
	}
	if i >= len(b) || b[i] != '{' {
		return nil, false, errors.New("not a JSON object")
	}
	i = skipWS(b, i+1)
	var found []byte
	ok := false
	if i < len(b) && b[i] == '}' {
		return nil, false, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, false, errJSON
		}
		kend, err := skipString(b, i)
		if err != nil {
			return nil, false, err
		}
		key := b[i+1 : kend-1]
		match := string(key) == field
		if !match && bytesHasEscape(key) {
			var k string
			if json.Unmarshal(b[i:kend], &k) == nil {
				match = k == field
			}
		}
		i = skipWS(b, kend)
		if i >= len(b) || b[i] != ':' {
			return nil, false, errJSON
		}
		i = skipWS(b, i+1)
		end, err := skipValue(b, i)
		if err != nil {
			return nil, false, err
		}
		if match {
			found, ok = b[i:end], true
		}
		i = skipWS(b, end)
		if i >= len(b) {
			return nil, false, errJSON
		}
		if b[i] == '}' {
			return found, ok, nil
		}
		if b[i] != ',' {
			return nil, false, errJSON
		}
		i = skipWS(b, i+1)
	}
}

func bytesHasEscape(b []byte) bool {
	for _, c := range b {
		if c == '\\' {
			return true
		}
	}
	return false
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i].
func skipString(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errJSON
}

// skipValue returns the index after the JSON value starting at b[i]:
// strings and nesting are tracked, scalars run to the next delimiter.
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errJSON
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := skipString(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errJSON
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	if j == i {
		return 0, errJSON
	}
	return j, nil
}
