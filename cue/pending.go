package cue

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/convergehq/converge"
)

// ValidateSpecPending is ValidateSpec for a spec some of whose fields are
// "known after apply": a value flow fills each of pending (dotted field
// paths below spec, a flow's To) once its producer is Ready. Such a field
// may be absent; everything else, and a pending field that is present, is
// checked at once. The flowed values are checked when the flow writes
// them (ValidateSpec on the flowed spec).
func (s *Schemas) ValidateSpecPending(ref converge.KindRef, spec json.RawMessage, pending []string) error {
	if len(pending) == 0 {
		return s.ValidateSpec(ref, spec)
	}
	key := schemaKey{ref, "spec"}
	if s == nil {
		return fmt.Errorf("%w %s", ErrUnknownKind, key.ref)
	}
	if _, ok := s.kinds[key.ref]; !ok {
		return fmt.Errorf("%w %s", ErrUnknownKind, key.ref)
	}
	if len(spec) == 0 {
		spec = json.RawMessage("{}")
	}
	if f := s.fast[key]; f != nil && f.acceptsPending(spec, pending) {
		return nil
	}
	return s.validateCUE(key, spec, pending)
}

// dropPending returns errs without the missing fields a value flow will
// fill: a required field absent at a pending path, or below one.
func dropPending(errs []fieldError, pending []string) []fieldError {
	if len(pending) == 0 {
		return errs
	}
	out := errs[:0:0]
	for _, e := range errs {
		if e.msg == "field is required but not present" && underPending(joinPath("", e.path), pending) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// underPending reports whether path is one of pending or below one.
func underPending(path string, pending []string) bool {
	for _, p := range pending {
		if path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[") {
			return true
		}
	}
	return false
}

// acceptsPending is accepts where the top-level required fields named in
// pending may be absent. A nested pending path is left to CUE.
func (n *fastNode) acceptsPending(data []byte, pending []string) bool {
	if n.kind != fastStruct {
		return false
	}
	var allow uint64
	for _, p := range pending {
		f := n.fields[p]
		if f == nil {
			if strings.ContainsAny(p, ".[") {
				return false
			}
			continue // not a declared field: CUE words what is wrong
		}
		allow |= 1 << f.index
	}
	p := fastParser{b: data, allow: allow}
	p.space()
	if !p.value(n) {
		return false
	}
	p.space()
	return p.i == len(p.b)
}
