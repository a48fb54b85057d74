package scheduler

import (
	"encoding/json"
	"strconv"

	"github.com/convergehq/converge"
)

// KnownAfter is one spec field a value flow fills that is not known yet:
// its producer has not produced it.
type KnownAfter struct {
	// Field is the consumer's spec path ("spec.account_id").
	Field string `json:"field"`
	// From is the producer and its status path
	// ("account/team-a status.account_id").
	From string `json:"from"`
}

// String renders the field as plan and get show it: "spec.account_id
// (known after apply: account/team-a status.account_id)".
func (k KnownAfter) String() string { return k.Field + " " + k.Placeholder() }

// Placeholder is what plan and get show in place of the value.
func (k KnownAfter) Placeholder() string { return "(known after apply: " + k.From + ")" }

// KnownAfterApply returns the fields of spec that the flows of consumes
// (the edges whose consumer spec is) fill and that spec does not hold
// yet, in the edges' order.
func KnownAfterApply(spec json.RawMessage, consumes []converge.Edge) []KnownAfter {
	var out []KnownAfter
	for _, e := range consumes {
		for _, f := range e.Flows {
			if _, ok := getField(spec, f.To); ok {
				continue
			}
			out = append(out, KnownAfter{Field: "spec." + f.To, From: string(e.Producer) + " status." + f.From})
		}
	}
	return out
}

// ShowKnownAfter returns spec with each field of known (from
// KnownAfterApply) set to its placeholder string, for display only; spec
// itself when known is empty or spec cannot be rewritten.
func ShowKnownAfter(spec json.RawMessage, known []KnownAfter) json.RawMessage {
	if len(known) == 0 {
		return spec
	}
	if len(spec) == 0 {
		spec = json.RawMessage("{}")
	}
	sets := make([]flowSet, 0, len(known))
	for _, k := range known {
		sets = append(sets, flowSet{k.Field[len("spec."):], json.RawMessage(strconv.Quote(k.Placeholder()))})
	}
	out, err := setFields(spec, sets)
	if err != nil {
		return spec
	}
	return out
}
