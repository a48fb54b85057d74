package codec

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/convergehq/converge"
)

// appendResourceJSON appends r's JSON to buf: the same document
// encoding/json writes for converge.Resource (same keys, omitempty and
// omitzero rules, string escaping), without reflection; raw JSON fields
// are compacted like json.Compact does (appendCompactJSON), not HTML-escaped (a decoder
// sees no difference). It is Commit's hot path: a resource is encoded on every
// write. It reports false, leaving buf's content undefined, when r needs
// what it does not handle (invalid raw JSON, a time outside years
// 0-9999 or with an odd zone offset); the caller then uses encoding/json, which gives the error.
// TestResourceJSONMatchesEncodingJSON fails when converge.Resource or
// converge.Lease gains a field this function does not write.
func appendResourceJSON(buf *bytes.Buffer, r *converge.Resource) bool {
	buf.WriteString(`{"uid":`)
	appendString(buf, r.UID)
	buf.WriteString(`,"kind":`)
	appendString(buf, r.Kind)
	buf.WriteString(`,"kind_version":`)
	appendInt(buf, int64(r.KindVersion))
	buf.WriteString(`,"name":`)
	appendString(buf, r.Name)
	if len(r.Declared) > 0 {
		buf.WriteString(`,"declared":`)
		if !appendRaw(buf, r.Declared) {
			return false
		}
	}
	buf.WriteString(`,"spec":`)
	if r.Spec == nil {
		buf.WriteString("null")
	} else if !appendRaw(buf, r.Spec) {
		return false
	}
	if len(r.Status) > 0 {
		buf.WriteString(`,"status":`)
		if !appendRaw(buf, r.Status) {
			return false
		}
	}
	buf.WriteString(`,"phase":`)
	appendString(buf, string(r.Phase))
	if r.Reason != "" {
		buf.WriteString(`,"reason":`)
		appendString(buf, r.Reason)
	}
	buf.WriteString(`,"generation":`)
	appendInt(buf, r.Generation)
	buf.WriteString(`,"observed_generation":`)
	appendInt(buf, r.ObservedGeneration)
	if r.Owner != "" {
		buf.WriteString(`,"owner":`)
		appendString(buf, string(r.Owner))
	}
	buf.WriteString(`,"origin":`)
	appendString(buf, string(r.Origin))
	if r.ProviderConfigRef != "" {
		buf.WriteString(`,"provider_config_ref":`)
		appendString(buf, r.ProviderConfigRef)
	}
	buf.WriteString(`,"attempts":`)
	appendInt(buf, int64(r.Attempts))
	if r.LastError != "" {
		buf.WriteString(`,"last_error":`)
		appendString(buf, r.LastError)
	}
	if !r.NextAttempt.IsZero() && !appendTime(buf, `,"next_attempt":`, r.NextAttempt) {
		return false
	}
	if r.Deleting {
		buf.WriteString(`,"deleting":true`)
	}
	if !r.DeletedAt.IsZero() && !appendTime(buf, `,"deleted_at":`, r.DeletedAt) {
		return false
	}
	if l := r.Lease; l != nil {
		buf.WriteString(`,"lease":{"task_id":`)
		appendString(buf, l.TaskID)
		buf.WriteString(`,"reaction":`)
		appendString(buf, l.Reaction)
		buf.WriteString(`,"worker":`)
		appendString(buf, l.Worker)
		if !appendTime(buf, `,"expires":`, l.Expires) {
			return false
		}
		buf.WriteByte('}')
	}
	if r.Source != "" {
		buf.WriteString(`,"source":`)
		appendString(buf, r.Source)
	}
	if !r.CreatedAt.IsZero() && !appendTime(buf, `,"created_at":`, r.CreatedAt) {
		return false
	}
	if !r.UpdatedAt.IsZero() && !appendTime(buf, `,"updated_at":`, r.UpdatedAt) {
		return false
	}
	if r.ComposedBy != "" {
		buf.WriteString(`,"composed_by":`)
		appendString(buf, r.ComposedBy)
	}
	if r.DriftPolicy != "" {
		buf.WriteString(`,"drift_policy":`)
		appendString(buf, r.DriftPolicy)
	}
	if r.Drift != nil {
		// Rare (a drifted row) and small: encoding/json writes it.
		j, err := json.Marshal(r.Drift)
		if err != nil {
			return false
		}
		buf.WriteString(`,"drift":`)
		buf.Write(j)
	}
	if r.Rollout != nil {
		// Rare (a composer's declaration) and small: encoding/json.
		j, err := json.Marshal(r.Rollout)
		if err != nil {
			return false
		}
		buf.WriteString(`,"rollout":`)
		buf.Write(j)
	}
	buf.WriteByte('}')
	return true
}

// appendEventsJSON appends the JSON array of evs as encoding/json writes
// it, or reports false (see appendResourceJSON) for a time it would
// refuse.
func appendEventsJSON(buf *bytes.Buffer, evs []converge.Event) bool {
	buf.WriteByte('[')
	for i := range evs {
		e := &evs[i]
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"seq":`)
		var a [20]byte
		buf.Write(strconv.AppendUint(a[:0], e.Seq, 10))
		if !appendTime(buf, `,"time":`, e.Time) {
			return false
		}
		buf.WriteString(`,"resource":`)
		appendString(buf, string(e.Resource))
		buf.WriteString(`,"type":`)
		appendString(buf, e.Type)
		buf.WriteString(`,"message":`)
		appendString(buf, e.Message)
		buf.WriteByte('}')
	}
	buf.WriteByte(']')
	return true
}

// appendRaw writes raw JSON compacted, or reports false if it is invalid.
func appendRaw(buf *bytes.Buffer, raw []byte) bool {
	b, ok := appendCompactJSON(buf.AvailableBuffer(), raw)
	if ok {
		buf.Write(b)
	}
	return ok
}

func appendInt(buf *bytes.Buffer, v int64) {
	var a [20]byte
	buf.Write(strconv.AppendInt(a[:0], v, 10))
}

// appendTime writes key and t as time.Time.MarshalJSON does (RFC 3339
// with nanoseconds), or reports false for a year it would refuse.
func appendTime(buf *bytes.Buffer, key string, t time.Time) bool {
	if y := t.Year(); y < 0 || y > 9999 {
		return false
	}
	if _, off := t.Zone(); off%60 != 0 || off <= -24*3600 || off >= 24*3600 {
		return false
	}
	buf.WriteString(key)
	var a [40]byte
	b := append(a[:0], '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	buf.Write(append(b, '"'))
	return true
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string escaped as encoding/json does:
// HTML-safe (<, >, & as \u00XX), U+2028 and U+2029 escaped, invalid UTF-8
// replaced by U+FFFD.
func appendString(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			buf.WriteString(s[start:i])
			switch c {
			case '"', '\\':
				buf.WriteByte('\\')
				buf.WriteByte(c)
			case '\n':
				buf.WriteString(`\n`)
			case '\r':
				buf.WriteString(`\r`)
			case '\t':
				buf.WriteString(`\t`)
			case '\b':
				buf.WriteString(`\b`)
			case '\f':
				buf.WriteString(`\f`)
			default:
				buf.WriteString(`\u00`)
				buf.WriteByte(hexDigits[c>>4])
				buf.WriteByte(hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf.WriteString(s[start:i])
			buf.WriteString(`\ufffd`)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			buf.WriteString(s[start:i])
			buf.WriteString(`\u202`)
			buf.WriteByte(hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	buf.WriteString(s[start:])
	buf.WriteByte('"')
}
