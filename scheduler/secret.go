package scheduler

import (
	"slices"

	"github.com/convergehq/converge"
)

// ownWords are the event types whose messages converge makes of IDs,
// sources, versions and counts alone: they cannot hold a secret, and a
// big converge writes millions of them, so event does not scrub them.
// Every other event's message (reasons, worker messages, refusals) is
// scrubbed.
var ownWords = map[string]bool{
	"Created": true, "Ready": true, "Pending": true, "Composed": true, "Deleted": true, "Updated": true,
	"Flipped": true, "ConfigChanged": true, "Recompose": true, "Transition": true, "Reacted": true,
}

// secretCache is what scrubMessage needs to know of the kinds and
// provider configs, computed once after each change of either.
type secretCache struct {
	any        bool     // some kind has secret fields
	configVals []string // every provider config's secret values
}

// secretInfo returns the cache, computing it if kinds or configs changed.
func (s *Scheduler) secretInfo() *secretCache {
	if s.secrets != nil {
		return s.secrets
	}
	c := &secretCache{}
	for _, k := range s.kinds {
		if len(k.Secret) > 0 {
			c.any = true
			break
		}
	}
	if c.any {
		for _, pc := range s.configs {
			if k := s.kinds[pc.Ref()]; k != nil && len(k.Secret) > 0 {
				c.configVals = append(c.configVals, converge.SecretValues(pc.Config, k.SecretPaths().Config)...)
			}
		}
	}
	s.secrets = c
	return c
}

// scrubMessage removes the secret values a message may repeat (a worker's
// error quoting a password, a status refused for a provider config's
// bucket) before it becomes a reason, an event or a delivery's error:
// the values at the secret paths of resource id (spec, status, provider
// config), of the subject of the delivery with key (if any), and of every
// provider config. Kinds declare their secret fields
// (converge.Kind.Secret); with none, msg is returned as is.
func (s *Scheduler) scrubMessage(id converge.ID, key, msg string) string {
	if msg == "" {
		return msg
	}
	c := s.secretInfo()
	if !c.any {
		return msg
	}
	vals := slices.Clip(c.configVals)
	add := func(id converge.ID) {
		n := s.graph.nodes[id]
		if n == nil {
			return
		}
		if k := s.kinds[n.rs.ref]; k != nil && len(k.Secret) > 0 {
			r := n.peek()
			vals = append(vals, converge.ResourceSecrets(k, r, s.resolveConfig(r))...)
		}
	}
	add(id)
	if key != "" {
		if d := s.react.deliveries[key]; d != nil {
			add(d.Subject.Resource)
		}
	}
	return converge.Scrub(msg, vals, converge.MinScrub)
}
