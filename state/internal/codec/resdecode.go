package codec

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/convergehq/converge"
)

// decodeResourceJSON decodes a resource document into a new
// converge.Resource exactly as json.Unmarshal does, without reflection:
// it is the read path's counterpart of appendResourceJSON (a million-row
// scan spent most of its time in encoding/json). It reports false when
// the document holds anything it does not handle: invalid JSON, a key that
// is not one of Resource's exactly (encoding/json would also match it
// case-insensitively, or ignore it), a key twice, a value of the wrong
// type, a number that is not an integer where one is wanted. The caller
// then uses encoding/json, which also gives the error. Strings with
// escapes or invalid UTF-8 are unquoted by encoding/json, one string at a
// time. FuzzDecodeResourceJSON checks that whatever it accepts,
// encoding/json accepts and decodes to the same value.
//
// With head set, declared, spec and status are checked but not copied:
// they are left nil, for callers that show a resource without them (a
// root's spec can be megabytes).
func decodeResourceJSON(b []byte, head bool) (*converge.Resource, bool) {
	d := jdec{b: b}
	r := new(converge.Resource)
	d.space()
	if !d.byte('{') {
		return nil, false
	}
	var seen uint32
	d.space()
	if d.peek() == '}' {
		d.i++
	} else {
		for {
			key, ok := d.key()
			if !ok {
				return nil, false
			}
			f := resourceField(key)
			if f < 0 || seen&(1<<f) != 0 {
				return nil, false
			}
			seen |= 1 << f
			if !d.field(r, f, head) {
				return nil, false
			}
			d.space()
			if d.byte(',') {
				d.space()
				continue
			}
			if !d.byte('}') {
				return nil, false
			}
			break
		}
	}
	d.space()
	if d.i != len(d.b) {
		return nil, false
	}
	return r, true
}

// The fields of converge.Resource, in declaration order.
const (
	fUID = iota
	fKind
	fKindVersion
	fName
	fDeclared
	fSpec
	fStatus
	fPhase
	fReason
	fGeneration
	fObservedGeneration
	fOwner
	fOrigin
	fProviderConfigRef
	fAttempts
	fLastError
	fNextAttempt
	fDeleting
	fDeletedAt
	fLease
	fSource
	fCreatedAt
	fUpdatedAt
	fComposedBy
	fDriftPolicy
	fDrift
	fRollout
)

// resourceField returns the field whose JSON key is exactly key, or -1.
func resourceField(key []byte) int {
	switch string(key) {
	case "uid":
		return fUID
	case "kind":
		return fKind
	case "kind_version":
		return fKindVersion
	case "name":
		return fName
	case "declared":
		return fDeclared
	case "spec":
		return fSpec
	case "status":
		return fStatus
	case "phase":
		return fPhase
	case "reason":
		return fReason
	case "generation":
		return fGeneration
	case "observed_generation":
		return fObservedGeneration
	case "owner":
		return fOwner
	case "origin":
		return fOrigin
	case "provider_config_ref":
		return fProviderConfigRef
	case "attempts":
		return fAttempts
	case "last_error":
		return fLastError
	case "next_attempt":
		return fNextAttempt
	case "deleting":
		return fDeleting
	case "deleted_at":
		return fDeletedAt
	case "lease":
		return fLease
	case "source":
		return fSource
	case "created_at":
		return fCreatedAt
	case "updated_at":
		return fUpdatedAt
	case "composed_by":
		return fComposedBy
	case "drift_policy":
		return fDriftPolicy
	case "drift":
		return fDrift
	case "rollout":
		return fRollout
	}
	return -1
}

// field decodes the value of field f into r.
func (d *jdec) field(r *converge.Resource, f int, head bool) bool {
	switch f {
	case fUID:
		return d.str(&r.UID)
	case fKind:
		return d.str(&r.Kind)
	case fName:
		return d.str(&r.Name)
	case fReason:
		return d.str(&r.Reason)
	case fProviderConfigRef:
		return d.str(&r.ProviderConfigRef)
	case fLastError:
		return d.str(&r.LastError)
	case fSource:
		return d.str(&r.Source)
	case fComposedBy:
		return d.str(&r.ComposedBy)
	case fDriftPolicy:
		return d.str(&r.DriftPolicy)
	case fDrift:
		// Rare (a drifted row): encoding/json decodes the object.
		start := d.i
		if !d.skip(0) {
			return false
		}
		v := d.b[start:d.i]
		if string(v) == "null" {
			r.Drift = nil
			return true
		}
		r.Drift = new(converge.DriftReport)
		return json.Unmarshal(v, r.Drift) == nil
	case fRollout:
		// Rare (a composer's declaration): encoding/json decodes it.
		start := d.i
		if !d.skip(0) {
			return false
		}
		v := d.b[start:d.i]
		if string(v) == "null" {
			r.Rollout = nil
			return true
		}
		r.Rollout = new(converge.Rollout)
		return json.Unmarshal(v, r.Rollout) == nil
	case fOwner:
		s := string(r.Owner)
		ok := d.str(&s)
		r.Owner = converge.ID(s)
		return ok
	case fPhase:
		s := string(r.Phase)
		ok := d.str(&s)
		r.Phase = converge.Phase(s)
		return ok
	case fOrigin:
		s := string(r.Origin)
		ok := d.str(&s)
		r.Origin = converge.Origin(s)
		return ok
	case fKindVersion:
		v, ok := d.int(int64(r.KindVersion))
		r.KindVersion = int(v)
		return ok
	case fAttempts:
		v, ok := d.int(int64(r.Attempts))
		r.Attempts = int(v)
		return ok
	case fGeneration:
		var ok bool
		r.Generation, ok = d.int(r.Generation)
		return ok
	case fObservedGeneration:
		var ok bool
		r.ObservedGeneration, ok = d.int(r.ObservedGeneration)
		return ok
	case fDeclared:
		return d.raw(&r.Declared, head)
	case fSpec:
		return d.raw(&r.Spec, head)
	case fStatus:
		return d.raw(&r.Status, head)
	case fNextAttempt:
		return d.time(&r.NextAttempt)
	case fDeletedAt:
		return d.time(&r.DeletedAt)
	case fCreatedAt:
		return d.time(&r.CreatedAt)
	case fUpdatedAt:
		return d.time(&r.UpdatedAt)
	case fDeleting:
		switch {
		case d.lit("true"):
			r.Deleting = true
		case d.lit("false"):
			r.Deleting = false
		case d.lit("null"):
		default:
			return false
		}
		return true
	case fLease:
		if d.lit("null") {
			r.Lease = nil
			return true
		}
		l, ok := d.lease()
		r.Lease = l
		return ok
	}
	return false
}

// lease decodes a Lease object.
func (d *jdec) lease() (*converge.Lease, bool) {
	if !d.byte('{') {
		return nil, false
	}
	l := new(converge.Lease)
	d.space()
	if d.byte('}') {
		return l, true
	}
	var seen uint8
	for {
		key, ok := d.key()
		if !ok {
			return nil, false
		}
		var f uint8
		switch string(key) {
		case "task_id":
			f, ok = 1, d.str(&l.TaskID)
		case "reaction":
			f, ok = 2, d.str(&l.Reaction)
		case "worker":
			f, ok = 4, d.str(&l.Worker)
		case "expires":
			f, ok = 8, d.time(&l.Expires)
		}
		if f == 0 || seen&f != 0 || !ok {
			return nil, false
		}
		seen |= f
		d.space()
		if d.byte(',') {
			d.space()
			continue
		}
		return l, d.byte('}')
	}
}

// decodeEdgesJSON decodes a row's edges section (JSON []StoredEdge) as
// json.Unmarshal does, or reports false (see decodeResourceJSON).
func decodeEdgesJSON(b []byte) ([]StoredEdge, bool) {
	d := jdec{b: b}
	d.space()
	if d.lit("null") {
		d.space()
		return nil, d.i == len(d.b)
	}
	if !d.byte('[') {
		return nil, false
	}
	es := []StoredEdge{}
	d.space()
	if !d.byte(']') {
		for {
			var e StoredEdge
			if !d.edge(&e) {
				return nil, false
			}
			es = append(es, e)
			d.space()
			if d.byte(',') {
				d.space()
				continue
			}
			if !d.byte(']') {
				return nil, false
			}
			break
		}
	}
	d.space()
	return es, d.i == len(d.b)
}

// edge decodes one StoredEdge object.
func (d *jdec) edge(e *StoredEdge) bool {
	if !d.byte('{') {
		return false
	}
	d.space()
	if d.byte('}') {
		return true
	}
	var seen uint8
	for {
		key, ok := d.key()
		if !ok {
			return false
		}
		var f uint8
		switch string(key) {
		case "producer":
			s := string(e.Producer)
			f, ok = 1, d.str(&s)
			e.Producer = converge.ID(s)
		case "flows":
			f, ok = 2, d.flows(&e.Flows)
		}
		if f == 0 || seen&f != 0 || !ok {
			return false
		}
		seen |= f
		d.space()
		if d.byte(',') {
			d.space()
			continue
		}
		return d.byte('}')
	}
}

// flows decodes a []ValueFlow (null: nil; [] is empty, not nil).
func (d *jdec) flows(out *[]converge.ValueFlow) bool {
	if d.lit("null") {
		*out = nil
		return true
	}
	if !d.byte('[') {
		return false
	}
	fs := []converge.ValueFlow{}
	d.space()
	if d.byte(']') {
		*out = fs
		return true
	}
	for {
		var f converge.ValueFlow
		if !d.flow(&f) {
			return false
		}
		fs = append(fs, f)
		d.space()
		if d.byte(',') {
			d.space()
			continue
		}
		if !d.byte(']') {
			return false
		}
		*out = fs
		return true
	}
}

func (d *jdec) flow(f *converge.ValueFlow) bool {
	if !d.byte('{') {
		return false
	}
	d.space()
	if d.byte('}') {
		return true
	}
	var seen uint8
	for {
		key, ok := d.key()
		if !ok {
			return false
		}
		var bit uint8
		switch string(key) {
		case "from":
			bit, ok = 1, d.str(&f.From)
		case "to":
			bit, ok = 2, d.str(&f.To)
		}
		if bit == 0 || seen&bit != 0 || !ok {
			return false
		}
		seen |= bit
		d.space()
		if d.byte(',') {
			d.space()
			continue
		}
		return d.byte('}')
	}
}

// jdec reads JSON from b at i. Every method reports false for input it
// does not handle, leaving i undefined.
type jdec struct {
	b []byte
	i int
}

func (d *jdec) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *jdec) peek() byte {
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// byte consumes c if it is next.
func (d *jdec) byte(c byte) bool {
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// lit consumes the literal s if it is next.
func (d *jdec) lit(s string) bool {
	if len(d.b)-d.i >= len(s) && string(d.b[d.i:d.i+len(s)]) == s {
		d.i += len(s)
		return true
	}
	return false
}

// key reads a member's key and its colon. Only plain keys (no escapes)
// are handled: every key converge writes is one.
func (d *jdec) key() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		if c == '"' {
			k := d.b[start:d.i]
			d.i++
			d.space()
			if !d.byte(':') {
				return nil, false
			}
			d.space()
			return k, true
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			return nil, false
		}
		d.i++
	}
	return nil, false
}

// str decodes a string into *s; null leaves *s as it is, as
// encoding/json does.
func (d *jdec) str(s *string) bool {
	if d.lit("null") {
		return true
	}
	if !d.byte('"') {
		return false
	}
	start := d.i
	plain, ascii := true, true
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			body := d.b[start:d.i]
			d.i++
			if plain && (ascii || utf8.Valid(body)) {
				*s = string(body)
				return true
			}
			// Escapes or invalid UTF-8: let encoding/json unquote this
			// one string.
			return json.Unmarshal(d.b[start-1:d.i], s) == nil
		case c == '\\':
			plain = false
			d.i += 2
			continue
		case c < 0x20:
			return false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		d.i++
	}
	return false
}

// int decodes an integer; null keeps old. A number with a fraction or an
// exponent, or out of int64's range, is refused (encoding/json refuses
// it too).
func (d *jdec) int(old int64) (int64, bool) {
	if d.lit("null") {
		return old, true
	}
	start := d.i
	if !d.number() {
		return 0, false
	}
	v, err := strconv.ParseInt(string(d.b[start:d.i]), 10, 64)
	return v, err == nil
}

// time decodes a time as encoding/json does, with time.Time's own
// UnmarshalJSON, except the form appendTime writes for UTC, which
// parseUTC reads several times faster.
func (d *jdec) time(t *time.Time) bool {
	start := d.i
	if !d.skip(0) {
		return false
	}
	if u, ok := parseUTC(d.b[start:d.i]); ok {
		*t = u
		return true
	}
	return t.UnmarshalJSON(d.b[start:d.i]) == nil
}

// parseUTC parses a quoted "YYYY-MM-DDTHH:MM:SS[.F]Z" (F one to nine
// digits), a date that exists and a time of day before 24:00, as
// time.Time.UnmarshalJSON does; anything else it reports false for.
func parseUTC(q []byte) (time.Time, bool) {
	const n = len(`"2006-01-02T15:04:05Z"`)
	if len(q) < n || q[0] != '"' || q[len(q)-1] != '"' || q[len(q)-2] != 'Z' ||
		q[5] != '-' || q[8] != '-' || q[11] != 'T' || q[14] != ':' || q[17] != ':' {
		return time.Time{}, false
	}
	num := func(b []byte) (int, bool) {
		v := 0
		for _, c := range b {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		return v, true
	}
	year, ok1 := num(q[1:5])
	month, ok2 := num(q[6:8])
	day, ok3 := num(q[9:11])
	hour, ok4 := num(q[12:14])
	minute, ok5 := num(q[15:17])
	sec, ok6 := num(q[18:20])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	days := [...]int{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}[month-1]
	if month == 2 && year%4 == 0 && (year%100 != 0 || year%400 == 0) {
		days = 29
	}
	if day > days {
		return time.Time{}, false
	}
	nsec := 0
	if frac := q[20 : len(q)-2]; len(frac) > 0 {
		if len(frac) < 2 || len(frac) > 10 || frac[0] != '.' {
			return time.Time{}, false
		}
		f, ok := num(frac[1:])
		if !ok {
			return time.Time{}, false
		}
		for range 10 - len(frac) {
			f *= 10
		}
		nsec = f
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true
}

// raw decodes a json.RawMessage: a copy of the value's bytes as they are
// (null included, as encoding/json keeps it). With skip, the value is
// checked and left out.
func (d *jdec) raw(m *json.RawMessage, skip bool) bool {
	start := d.i
	if !d.skip(0) {
		return false
	}
	if !skip {
		*m = append(json.RawMessage(nil), d.b[start:d.i]...)
	}
	return true
}

// maxDecodeDepth bounds nesting in skip; deeper values go to
// encoding/json.
const maxDecodeDepth = 1000

// skip moves past one JSON value, checking its syntax as encoding/json
// does (strings' UTF-8 is not checked: encoding/json does not either).
func (d *jdec) skip(depth int) bool {
	if d.i >= len(d.b) || depth > maxDecodeDepth {
		return false
	}
	switch c := d.b[d.i]; {
	case c == '{':
		d.i++
		d.space()
		if d.byte('}') {
			return true
		}
		for {
			if d.peek() != '"' || !d.skipString() {
				return false
			}
			d.space()
			if !d.byte(':') {
				return false
			}
			d.space()
			if !d.skip(depth + 1) {
				return false
			}
			d.space()
			if d.byte(',') {
				d.space()
				continue
			}
			return d.byte('}')
		}
	case c == '[':
		d.i++
		d.space()
		if d.byte(']') {
			return true
		}
		for {
			if !d.skip(depth + 1) {
				return false
			}
			d.space()
			if d.byte(',') {
				d.space()
				continue
			}
			return d.byte(']')
		}
	case c == '"':
		return d.skipString()
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	case c == 't':
		return d.lit("true")
	case c == 'f':
		return d.lit("false")
	case c == 'n':
		return d.lit("null")
	}
	return false
}

// skipString moves past a string, checking its escapes and that it holds
// no control character.
func (d *jdec) skipString() bool {
	d.i++ // the opening quote
	for d.i < len(d.b) {
		c := d.b[d.i]
		if c >= 0x20 && c != '"' && c != '\\' {
			d.i++
			continue
		}
		switch c {
		case '"':
			d.i++
			return true
		case '\\':
			if d.i+1 >= len(d.b) {
				return false
			}
			switch d.b[d.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				d.i += 2
			case 'u':
				if d.i+6 > len(d.b) {
					return false
				}
				for _, h := range d.b[d.i+2 : d.i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false
					}
				}
				d.i += 6
			default:
				return false
			}
		default: // a control character
			return false
		}
	}
	return false
}

// number moves past a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (d *jdec) number() bool {
	digits := func() int {
		n := 0
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	d.byte('-')
	if d.i >= len(d.b) {
		return false
	}
	if d.b[d.i] == '0' {
		d.i++
	} else if digits() == 0 {
		return false
	}
	if d.byte('.') && digits() == 0 {
		return false
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}
