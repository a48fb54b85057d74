package scheduler

import "github.com/convergehq/converge"

// scrubMessage removes the secret values a worker's result message may
// repeat (a password in an error, a provider config's bucket) before it
// becomes a reason, an event or a delivery's error: the values at the
// secret paths of the task's resource (spec, status, provider config),
// of a delivery's subject, and of every provider config. Kinds declare
// their secret fields (converge.Kind.Secret); with none, msg is returned
// as is without looking.
func (s *Scheduler) scrubMessage(rec *taskRec, msg string) string {
	if msg == "" {
		return msg
	}
	var vals []string
	for _, c := range s.configs {
		if k := s.kinds[c.Ref()]; k != nil && len(k.Secret) > 0 {
			vals = append(vals, converge.SecretValues(c.Config, k.SecretPaths().Config)...)
		}
	}
	add := func(id converge.ID) {
		n := s.nodes[id]
		if n == nil {
			return
		}
		if k := s.kinds[n.r.Ref()]; k != nil && len(k.Secret) > 0 {
			vals = append(vals, converge.ResourceSecrets(k, n.r, s.resolveConfig(n.r))...)
		}
	}
	add(rec.id)
	if rec.key != "" {
		if d := s.deliveries[rec.key]; d != nil {
			add(d.Subject.Resource)
		}
	}
	return converge.Scrub(msg, vals, converge.MinScrub)
}
