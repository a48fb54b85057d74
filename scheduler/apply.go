package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"sort"

	"github.com/convergehq/converge"
)

// PlanItem is one resource a plan changes.
type PlanItem struct {
	ID       converge.ID
	From, To converge.KindRef
	// Fields lists the changed top-level spec fields (Update, Flip), plus
	// "provider_config_ref" when the resource's config reference changed.
	Fields []string
	// Reason says why an item is Refused, or notes a special case.
	Reason string
	// KnownAfter lists the spec fields of a resource to create or update
	// that value flows fill once their producers are Ready.
	KnownAfter []KnownAfter `json:",omitempty"`
}

// Plan is what applying a desired state does.
type Plan struct {
	Create, Update, Flip, Delete []PlanItem
	// Refused lists declared resources Apply does not change: a flip whose
	// spec does not validate under the new version, a name owned by a
	// composer, a duplicate.
	Refused []PlanItem
	// Definitions lists kinds, provider configs and bindings added,
	// changed or removed, sorted: "kind vpc/v2 added", "config
	// vpc-v1-default changed", "binding bom-synced removed".
	Definitions []string
	// Prune lists the composed children that recomposing the changed
	// composers would remove. Only Fanout fills it (with the children it
	// would create, update and flip, added to Create, Update and Flip with
	// Reason "composed by OWNER"); Apply leaves the fan-out to the
	// composes it dispatches.
	Prune []PlanItem
	// Unanswered lists the changed composers whose dry-run compose gave no
	// answer (no worker, a transient error, a timeout): what recomposing
	// them would do is unknown. Reason says why.
	Unanswered []PlanItem
}

// Empty reports whether the plan changes nothing.
func (p *Plan) Empty() bool {
	return len(p.Create) == 0 && len(p.Update) == 0 && len(p.Flip) == 0 && len(p.Delete) == 0 &&
		len(p.Definitions) == 0 && len(p.Prune) == 0
}

// definitions diffs the kinds, configs and bindings of a desired state
// against the stored ones.
func definitions(kinds []*converge.Kind, configs []*converge.ProviderConfig, bindings []*converge.Binding, d *converge.Desired) []string {
	var out []string
	diffSet := func(what string, old, cur map[string]any) {
		for k, v := range cur {
			if o, ok := old[k]; !ok {
				out = append(out, what+" "+k+" added")
			} else if !sameJSON(o, v) {
				out = append(out, what+" "+k+" changed")
			}
		}
		for k := range old {
			if _, ok := cur[k]; !ok {
				out = append(out, what+" "+k+" removed")
			}
		}
	}
	ok, ck := map[string]any{}, map[string]any{}
	for _, k := range kinds {
		ok[k.Ref().String()] = k
	}
	for _, k := range d.Kinds {
		ck[k.Ref().String()] = k
	}
	diffSet("kind", ok, ck)
	oc, cc := map[string]any{}, map[string]any{}
	for _, c := range configs {
		oc[c.Name] = c
	}
	for _, c := range d.Configs {
		cc[c.Name] = c
	}
	diffSet("config", oc, cc)
	ob, cb := map[string]any{}, map[string]any{}
	for _, b := range bindings {
		ob[b.Name] = b
	}
	for _, b := range d.Bindings {
		cb[b.Name] = b
	}
	diffSet("binding", ob, cb)
	sort.Strings(out)
	return out
}

// Diff returns what Apply would do to the resources of snap to reach d
// (without validating flips). It changes nothing.
func Diff(snap *converge.Snapshot, d *converge.Desired) *Plan {
	byID := make(map[converge.ID]*converge.Resource, len(snap.Resources))
	for _, r := range snap.Resources {
		byID[r.ID()] = r
	}
	p := diff(func(id converge.ID) *converge.Resource { return byID[id] },
		func(f func(*converge.Resource)) {
			for _, r := range snap.Resources {
				f(r)
			}
		}, d)
	p.Definitions = definitions(snap.Kinds, snap.Configs, snap.Bindings, d)
	noteKnownAfter(p, d)
	return p
}

func diff(get func(converge.ID) *converge.Resource, each func(func(*converge.Resource)), d *converge.Desired) *Plan {
	p := &Plan{}
	declared := make(map[converge.ID]bool, len(d.Resources))
	for _, r := range d.Resources {
		id := r.ID()
		if declared[id] {
			p.Refused = append(p.Refused, PlanItem{ID: id, To: r.Ref(), Reason: "declared twice"})
			continue
		}
		declared[id] = true
		e := get(id)
		switch {
		case e == nil:
			p.Create = append(p.Create, PlanItem{ID: id, To: r.Ref()})
		case e.Owner != "" || e.Origin == converge.OriginComposed:
			p.Refused = append(p.Refused, PlanItem{ID: id, From: e.Ref(), To: r.Ref(), Reason: "already exists, owned by " + string(e.Owner)})
		case e.Deleting:
			p.Create = append(p.Create, PlanItem{ID: id, To: r.Ref(), Reason: "created again once its teardown finishes"})
		case e.KindVersion != r.KindVersion:
			p.Flip = append(p.Flip, PlanItem{ID: id, From: e.Ref(), To: r.Ref(), Fields: changedFields(e, r)})
		case !jsonEqual(e.Declared, r.Declared) || e.ProviderConfigRef != r.ProviderConfigRef:
			p.Update = append(p.Update, PlanItem{ID: id, From: e.Ref(), To: r.Ref(), Fields: changedFields(e, r)})
		}
	}
	each(func(e *converge.Resource) {
		if e.Origin == converge.OriginGit && e.Owner == "" && !e.Deleting && !declared[e.ID()] {
			p.Delete = append(p.Delete, PlanItem{ID: e.ID(), From: e.Ref()})
		}
	})
	for _, l := range []*[]PlanItem{&p.Create, &p.Update, &p.Flip, &p.Delete, &p.Refused} {
		sort.Slice(*l, func(i, j int) bool { return (*l)[i].ID < (*l)[j].ID })
	}
	return p
}

func changedFields(e, r *converge.Resource) []string {
	f := topLevelDiff(e.Declared, r.Declared)
	if e.ProviderConfigRef != r.ProviderConfigRef {
		f = append(f, "provider_config_ref")
	}
	return f
}

// Apply makes d the desired state: kinds, provider configs, bindings, the
// git-declared resources and the applied revision, all committed in one
// batch before it returns. New resources are created, changed ones get a
// new generation, version changes flip in place (refused, with an event,
// when v rejects the spec under the new version), and resources no longer
// declared are cascade-deleted. Resources whose resolved provider config
// changed run again. Nothing is dispatched for unchanged resources. It is
// safe to call while Run runs.
func (s *Scheduler) Apply(ctx context.Context, d *converge.Desired, v Validator) (*Plan, error) {
	var plan *Plan
	var err error
	e := s.exec(ctx, func(s *Scheduler) {
		plan = s.apply(d, v)
		err = s.flush()
	})
	if e != nil {
		return nil, e
	}
	return plan, err
}

func (s *Scheduler) apply(d *converge.Desired, v Validator) *Plan {
	if v != nil {
		s.setValidator(v)
	}
	resyncDefault := s.settings.ResyncInterval != d.Settings.ResyncInterval
	s.settings = d.Settings
	defs := s.definitionsNow(d)
	changedKinds := s.applyKinds(d.Kinds)
	s.refreshKinds()
	nConfigs, nDeleted := len(s.batch.meta.Configs), len(s.batch.meta.DeletedConfigs)
	oldConfigs, oldDefaults := s.applyConfigs(d.Configs)
	s.applyBindings(d.Bindings)

	// The diff only reads: a row it looks at stays packed.
	plan := diff(nodeView{s}.Get, func(f func(*converge.Resource)) {
		for _, n := range s.graph.gitRoots {
			f(n.peek())
		}
	}, d)
	plan.Definitions = defs
	noteKnownAfter(plan, d)
	desired := make(map[converge.ID]*converge.Resource, len(d.Resources))
	for _, r := range d.Resources {
		if _, ok := desired[r.ID()]; !ok {
			desired[r.ID()] = r
		}
	}
	touched := make(map[converge.ID]bool)
	for _, it := range plan.Create {
		r := desired[it.ID]
		nr := &converge.Resource{
			UID:               s.newUID(),
			Kind:              r.Kind,
			KindVersion:       r.KindVersion,
			Name:              r.Name,
			Declared:          converge.CloneJSON(r.Declared),
			Generation:        1,
			Phase:             converge.PhasePending,
			Origin:            converge.OriginGit,
			ProviderConfigRef: r.ProviderConfigRef,
			Source:            r.Source,
			DriftPolicy:       r.DriftPolicy,
			Rollout:           r.Rollout,
			CreatedAt:         s.now,
		}
		if e := s.graph.nodes[it.ID]; e != nil {
			if s.graph.recreate == nil {
				s.graph.recreate = make(map[*node]*converge.Resource)
			}
			s.graph.recreate[e] = nr
			continue
		}
		s.addNode(nr, nr.ID(), nil, "created from "+sourceOr(r.Source))
		touched[it.ID] = true
	}
	flips := plan.Flip[:0:0]
	for _, it := range plan.Flip {
		r := desired[it.ID]
		n := s.graph.nodes[it.ID]
		if s.validator != nil {
			if err := validateDeclared(s.validator, d, r); err != nil {
				it.Reason = "flip to " + r.Ref().String() + " refused: " + err.Error()
				plan.Refused = append(plan.Refused, it)
				s.event(it.ID, "FlipRefused", it.Reason)
				if n.res().Phase == converge.PhaseReady {
					s.setReason(n, it.Reason)
				}
				continue
			}
		}
		flips = append(flips, it)
		s.updateDeclared(n, r.KindVersion, converge.CloneJSON(r.Declared), r.ProviderConfigRef)
		touched[it.ID] = true
	}
	plan.Flip = flips
	sort.Slice(plan.Refused, func(i, j int) bool { return plan.Refused[i].ID < plan.Refused[j].ID })
	for _, it := range plan.Update {
		r := desired[it.ID]
		n := s.graph.nodes[it.ID]
		if s.updateDeclared(n, r.KindVersion, converge.CloneJSON(r.Declared), r.ProviderConfigRef) {
			s.event(it.ID, "Updated", "declared spec changed")
		}
		touched[it.ID] = true
	}
	s.applyGitEdges(d)
	for id, r := range desired {
		n := s.graph.nodes[id]
		if n == nil {
			continue
		}
		p := n.peek() // compared, then decoded only to change
		if p.Origin != converge.OriginGit {
			continue
		}
		if p.Source != r.Source {
			n.res().Source = r.Source
			s.markDirty(n)
		}
		if p.DriftPolicy != r.DriftPolicy {
			s.setDriftPolicy(n, r.DriftPolicy)
		}
		if !reflect.DeepEqual(p.Rollout, r.Rollout) {
			s.setRollout(n, r.Rollout)
		}
	}
	var del []*node
	for _, it := range plan.Delete {
		del = append(del, s.graph.nodes[it.ID])
	}
	if len(del) > 0 {
		s.cascade(del, "no longer declared")
	}
	// Re-run resources whose resolved provider config changed; re-arm
	// resyncs whose interval changed. None of that, and no re-declared
	// row to forget: a million rows are not walked for nothing.
	configsChanged := len(s.batch.meta.Configs) != nConfigs || len(s.batch.meta.DeletedConfigs) != nDeleted ||
		!sameDefaults(oldDefaults, s.defaults)
	if resyncDefault && len(changedKinds) == 0 && !configsChanged && len(s.graph.recreate) == 0 {
		// Only the default resync interval changed (or became known:
		// the first apply of a process): the resyncs are re-armed in
		// chunks beside other work (rearmChunk), not in one walk that
		// holds the loop for a second at a million rows.
		s.rearmQueue = s.rearmQueue[:0]
		for _, n := range s.graph.nodes {
			s.rearmQueue = append(s.rearmQueue, n)
		}
		resyncDefault = false
	}
	if !resyncDefault && len(changedKinds) == 0 && !configsChanged && len(s.graph.recreate) == 0 {
		s.setApplied(d)
		return plan
	}
	for _, n := range s.graph.nodes {
		// Read, not decoded to keep: a million packed rows stay
		// packed (a change below decodes its row through res).
		r := n.peek()
		if _, ok := s.graph.recreate[n]; ok && desired[n.id] == nil {
			// Declared again while it was torn down, and no longer
			// declared now: it stays gone.
			delete(s.graph.recreate, n)
		}
		if (resyncDefault || changedKinds[r.Ref()]) && r.Phase == converge.PhaseReady && !r.Deleting {
			s.scheduleResync(n)
		}
		if changedKinds[r.Ref()] && permanent(r) && !r.Deleting {
			// A changed kind (a schema, max_children) may be what
			// the permanent failure was about: try again.
			s.event(n.id, "Retrying", "its kind "+r.Ref().String()+" changed")
			n.res().Attempts = 0
			s.setReason(n, "")
			s.setPhase(n, converge.PhasePending)
			s.markDirty(n)
			s.lease.enqueue(n)
		}
		if r.Deleting || touched[n.id] || r.ObservedGeneration == 0 {
			continue
		}
		if !bytes.Equal(resolveWith(oldConfigs, oldDefaults, r), s.resolveConfig(r)) {
			s.event(n.id, "ConfigChanged", "provider config changed")
			s.bumpGeneration(n)
		}
	}
	s.setApplied(d)
	return plan
}

// setApplied makes d's revision the applied one, written with its record
// (d.Record, copied: its caller goes on changing it) in one batch.
func (s *Scheduler) setApplied(d *converge.Desired) {
	rev := d.Revision
	s.applied = &rev
	s.batch.meta.Applied = &rev
	s.batch.meta.Record = d.Record.Clone()
	s.batch.armFlush(s.now)
}

// definitionsNow diffs d's definitions against the scheduler's (retiring
// kinds count as stored).
func (s *Scheduler) definitionsNow(d *converge.Desired) []string {
	var ks []*converge.Kind
	for ref, k := range s.kinds {
		if !s.retiring[ref] {
			ks = append(ks, k)
		}
	}
	var cs []*converge.ProviderConfig
	for _, c := range s.configs {
		cs = append(cs, c)
	}
	var bs []*converge.Binding
	for _, b := range s.react.bindings {
		bs = append(bs, b)
	}
	return definitions(ks, cs, bs, d)
}

func sourceOr(src string) string {
	if src == "" {
		return "git"
	}
	return src
}

// applyKinds replaces the kinds and returns the refs that changed.
func (s *Scheduler) applyKinds(ks []*converge.Kind) map[converge.KindRef]bool {
	defer func() { s.secrets = nil }() // secretInfo computes again
	changed := make(map[converge.KindRef]bool)
	want := make(map[converge.KindRef]bool, len(ks))
	for _, k := range ks {
		ref := k.Ref()
		want[ref] = true
		delete(s.retiring, ref)
		if old := s.kinds[ref]; old == nil || !sameJSON(old, k) {
			s.batch.meta.Kinds = append(s.batch.meta.Kinds, k)
			changed[ref] = true
		}
		s.kinds[ref] = k
	}
	for ref := range s.kinds {
		if want[ref] {
			continue
		}
		if s.refState(ref).count > 0 {
			s.retiring[ref] = true
			continue
		}
		delete(s.kinds, ref)
		s.batch.meta.DeletedKinds = append(s.batch.meta.DeletedKinds, ref)
	}
	return changed
}

// applyConfigs replaces the provider configs and returns the previous
// ones (by name, and defaults by KindRef).
func (s *Scheduler) applyConfigs(cs []*converge.ProviderConfig) (map[string]*converge.ProviderConfig, map[converge.KindRef]*converge.ProviderConfig) {
	defer func() { s.secrets = nil }() // secretInfo computes again
	oldC := make(map[string]*converge.ProviderConfig, len(s.configs))
	for k, v := range s.configs {
		oldC[k] = v
	}
	oldD := make(map[converge.KindRef]*converge.ProviderConfig, len(s.defaults))
	for k, v := range s.defaults {
		oldD[k] = v
	}
	want := make(map[string]bool, len(cs))
	for _, c := range cs {
		want[c.Name] = true
		if old := s.configs[c.Name]; old == nil || !sameJSON(old, c) {
			s.batch.meta.Configs = append(s.batch.meta.Configs, c)
		}
		s.configs[c.Name] = c
	}
	for name := range s.configs {
		if !want[name] {
			delete(s.configs, name)
			s.batch.meta.DeletedConfigs = append(s.batch.meta.DeletedConfigs, name)
		}
	}
	s.rebuildDefaults()
	return oldC, oldD
}

// sameDefaults reports whether two default-config maps name the same
// configs with the same content.
func sameDefaults(a, b map[converge.KindRef]*converge.ProviderConfig) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w := b[k]
		if w == nil || w.Name != v.Name || !bytes.Equal(w.Config, v.Config) {
			return false
		}
	}
	return true
}

func resolveWith(cs map[string]*converge.ProviderConfig, ds map[converge.KindRef]*converge.ProviderConfig, r *converge.Resource) []byte {
	if r.ProviderConfigRef != "" {
		if c := cs[r.ProviderConfigRef]; c != nil {
			return c.Config
		}
		return nil
	}
	if c := ds[r.Ref()]; c != nil {
		return c.Config
	}
	return nil
}

func (s *Scheduler) applyBindings(bs []*converge.Binding) {
	want := make(map[string]bool, len(bs))
	for _, b := range bs {
		want[b.Name] = true
		if old := s.react.bindings[b.Name]; old == nil || *old != *b {
			s.batch.meta.Bindings = append(s.batch.meta.Bindings, b)
		}
		s.react.bindings[b.Name] = b
	}
	for name := range s.react.bindings {
		if !want[name] {
			delete(s.react.bindings, name)
			s.batch.meta.DeletedBindings = append(s.batch.meta.DeletedBindings, name)
		}
	}
	s.react.rebuildByKind()
}

func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
