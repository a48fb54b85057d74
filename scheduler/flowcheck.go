package scheduler

import (
	"errors"
	"strings"

	"github.com/convergehq/converge"
)

// checkFlowed validates n's spec once its value flows wrote it: the
// flowed fields were "known after apply" when n was declared (only the
// rest was validated then, see PendingValidator), so this is where a
// flowed value meets the schema. The error names the flow (producer and
// field) and the schema's rule.
func (s *Scheduler) checkFlowed(n *node) error {
	if s.validator == nil {
		return nil
	}
	err := s.validator.ValidateSpec(n.res().Ref(), n.res().Spec)
	if err == nil {
		return nil
	}
	return flowError(err, n.adj.prod())
}

// flowError words a spec validation error after flows: each violation at
// a flowed field (a flow's To, or below it) is prefixed with the flow
// that wrote it ("value flow from vpc/x status.vpc_id to spec.vpc_id").
func flowError(err error, prods []*converge.Edge) error {
	parts := strings.Split(err.Error(), "; ")
	named := false
	for i, p := range parts {
		for _, e := range prods {
			for _, f := range e.Flows {
				at := "spec." + f.To
				if rest, ok := strings.CutPrefix(p, at); ok && (rest == "" || rest[0] == ':' || rest[0] == '.' || rest[0] == '[') {
					parts[i] = "value flow from " + string(e.Producer) + " status." + f.From + " to " + at + ": " + p
					named = true
				}
			}
		}
	}
	if !named {
		return errors.New("spec after value flows: " + err.Error())
	}
	return errors.New(strings.Join(parts, "; "))
}
