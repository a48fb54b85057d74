package view

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/stateapi"
)

// Redactor hides secret fields from what the read commands print: the
// values at a kind's secret paths become "(secret)" in a resource's spec
// and status, and any secret value of the resource or of any provider
// config is scrubbed from the rest of it (a worker may echo a config's
// secret into a status field that is not itself secret).
type Redactor struct {
	kinds      map[converge.KindRef]*converge.Kind
	configs    map[string]*converge.ProviderConfig
	defaults   map[converge.KindRef]*converge.ProviderConfig
	configVals []string // every provider config's secret values
	// statusByName are the secret status paths of each kind name, the
	// union over its versions: what a flow may copy from a producer.
	statusByName map[string][][]string
}

// NewRedactor reads the kinds and provider configs of rd (the store, or
// a daemon's admin API). A reader that holds none redacts nothing.
func NewRedactor(ctx context.Context, rd any) (*Redactor, error) {
	x := &Redactor{kinds: map[converge.KindRef]*converge.Kind{}, configs: map[string]*converge.ProviderConfig{},
		defaults: map[converge.KindRef]*converge.ProviderConfig{}}
	d, ok := rd.(stateapi.Definer)
	if !ok {
		return x, nil
	}
	ks, err := d.Kinds(ctx)
	if err != nil {
		return nil, err
	}
	x.statusByName = map[string][][]string{}
	for _, k := range ks {
		if len(k.Secret) > 0 {
			x.kinds[k.Ref()] = k
			x.statusByName[k.Name] = append(x.statusByName[k.Name], k.SecretPaths().Status...)
		}
	}
	if len(x.kinds) == 0 {
		return x, nil
	}
	cs, err := d.Configs(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		if k := x.kinds[c.Ref()]; k != nil {
			x.configVals = append(x.configVals, converge.SecretValues(c.Config, k.SecretPaths().Config)...)
		}
		x.configs[c.Name] = c
		if c.IsDefault {
			x.defaults[c.Ref()] = c
		}
	}
	return x, nil
}

// config returns r's provider config, nil if none.
func (x *Redactor) config(r *converge.Resource) json.RawMessage {
	if r.ProviderConfigRef != "" {
		if c := x.configs[r.ProviderConfigRef]; c != nil {
			return c.Config
		}
		return nil
	}
	if c := x.defaults[r.Ref()]; c != nil {
		return c.Config
	}
	return nil
}

// FlowPaths returns the fields of consumes' consumer's spec that a value
// flow fills from a producer's secret status field.
func (x *Redactor) FlowPaths(consumes []converge.Edge) [][]string {
	var out [][]string
	for _, e := range consumes {
		ps := x.statusByName[e.Producer.Kind()]
		if len(ps) == 0 {
			continue
		}
		for _, f := range e.Flows {
			if converge.UnderSecret(strings.Split(f.From, "."), ps) {
				out = append(out, strings.Split(f.To, "."))
			}
		}
	}
	return out
}

// FlowsMatter reports whether r's spec may hold a value a flow copied
// from a producer's secret status field: some kind has one, and r's spec
// is not its declared spec (flows filled something in).
func (x *Redactor) FlowsMatter(r *converge.Resource) bool {
	return len(x.statusByName) > 0 && !bytes.Equal(r.Spec, r.Declared)
}

// Resource is ResourceOf with r's secrets hidden, and the spec fields at flows
// (flowPaths).
func (x *Redactor) Resource(r *converge.Resource, flows [][]string) Resource {
	v := ResourceOf(r)
	k := x.kinds[r.Ref()]
	vals := x.configVals
	if len(flows) > 0 {
		var found []string
		v.Spec, found = converge.RedactJSON(v.Spec, flows)
		vals = append(found, vals...)
	}
	if k != nil {
		vals = append(converge.ResourceSecrets(k, r, x.config(r)), vals...)
		p := k.SecretPaths()
		v.Spec, _ = converge.RedactJSON(v.Spec, p.Spec)
		v.Status, _ = converge.RedactJSON(v.Status, p.Status)
	}
	if len(vals) == 0 {
		return v
	}
	v.Spec = converge.ScrubJSON(v.Spec, vals, converge.MinScrub)
	v.Status = converge.ScrubJSON(v.Status, vals, converge.MinScrub)
	v.Reason = converge.Scrub(v.Reason, vals, converge.MinScrub)
	v.LastError = converge.Scrub(v.LastError, vals, converge.MinScrub)
	return v
}

// Status returns a status of r's kind with its secret fields hidden.
func (x *Redactor) Status(r *converge.Resource, status json.RawMessage) json.RawMessage {
	vals := x.configVals
	if k := x.kinds[r.Ref()]; k != nil {
		vals = append(converge.ResourceSecrets(k, r, x.config(r)), vals...)
		status, _ = converge.RedactJSON(status, k.SecretPaths().Status)
	}
	return converge.ScrubJSON(status, vals, converge.MinScrub)
}
