package main

import (
	"encoding/json"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/stateapi"
)

// redactor hides secret fields from what the read commands print: the
// values at a kind's secret paths become "(secret)" in a resource's spec
// and status, and any secret value of the resource or of any provider
// config is scrubbed from the rest of it (a worker may echo a config's
// secret into a status field that is not itself secret).
type redactor struct {
	kinds      map[converge.KindRef]*converge.Kind
	configs    map[string]*converge.ProviderConfig
	defaults   map[converge.KindRef]*converge.ProviderConfig
	configVals []string // every provider config's secret values
}

// newRedactor reads the kinds and provider configs of rd (the store, or
// a daemon's admin API). A reader that holds none redacts nothing.
func newRedactor(rd any) (*redactor, error) {
	x := &redactor{kinds: map[converge.KindRef]*converge.Kind{}, configs: map[string]*converge.ProviderConfig{},
		defaults: map[converge.KindRef]*converge.ProviderConfig{}}
	d, ok := rd.(stateapi.Definer)
	if !ok {
		return x, nil
	}
	ks, err := d.Kinds()
	if err != nil {
		return nil, err
	}
	for _, k := range ks {
		if len(k.Secret) > 0 {
			x.kinds[k.Ref()] = k
		}
	}
	if len(x.kinds) == 0 {
		return x, nil
	}
	cs, err := d.Configs()
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
func (x *redactor) config(r *converge.Resource) json.RawMessage {
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

// view is viewOf with r's secrets hidden.
func (x *redactor) view(r *converge.Resource) resourceView {
	v := viewOf(r)
	k := x.kinds[r.Ref()]
	vals := x.configVals
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

// status returns a status of r's kind with its secret fields hidden.
func (x *redactor) status(r *converge.Resource, status json.RawMessage) json.RawMessage {
	vals := x.configVals
	if k := x.kinds[r.Ref()]; k != nil {
		vals = append(converge.ResourceSecrets(k, r, x.config(r)), vals...)
		status, _ = converge.RedactJSON(status, k.SecretPaths().Status)
	}
	return converge.ScrubJSON(status, vals, converge.MinScrub)
}
