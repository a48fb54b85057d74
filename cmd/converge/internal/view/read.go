package view

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/stateapi"
)

// Reader is what the read commands read the state through: the store
// itself or, while a daemon holds it, the daemon's admin API.
type Reader interface {
	stateapi.Reader
	Kinds(ctx context.Context) ([]*converge.Kind, error)
}

// ReadTree reads id and, down to depth levels below it (0: all), what
// it owns; a node with more than group children (group > 0) gets them
// counted by kind and phase instead.
func ReadTree(ctx context.Context, rd Reader, id converge.ID, depth, group int) (*TreeNode, error) {
	r, err := rd.Resource(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", id, err)
	}
	return readSubtree(ctx, rd, r, depth, group)
}

func readSubtree(ctx context.Context, rd Reader, r *converge.Resource, depth, group int) (*TreeNode, error) {
	id := r.ID()
	n := &TreeNode{ID: id, Version: r.KindVersion, Phase: r.Phase, Reason: r.Reason, Drift: r.Drift}
	consumes, _, err := rd.EdgesOf(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, e := range consumes {
		n.DependsOn = append(n.DependsOn, e.Producer)
	}
	kids, err := rd.Resources(ctx, state.Filter{Owner: id, Head: true})
	if err != nil {
		return nil, err
	}
	if len(kids) == 0 {
		return n, nil
	}
	if group > 0 && len(kids) > group {
		byKind := map[string]*TreeGroup{}
		for _, k := range kids {
			gr := byKind[k.Kind]
			if gr == nil {
				gr = &TreeGroup{Kind: k.Kind, Phases: map[converge.Phase]int{}}
				byKind[k.Kind] = gr
				n.Groups = append(n.Groups, gr)
			}
			gr.Count++
			gr.Phases[k.Phase]++
			if k.Drift != nil {
				gr.Drifted++
			}
		}
		sort.Slice(n.Groups, func(i, j int) bool { return n.Groups[i].Kind < n.Groups[j].Kind })
		return n, nil
	}
	next := depth - 1
	for _, k := range kids {
		if depth == 1 {
			kn := &TreeNode{ID: k.ID(), Version: k.KindVersion, Phase: k.Phase, Reason: k.Reason, Drift: k.Drift}
			consumes, _, err := rd.EdgesOf(ctx, kn.ID)
			if err != nil {
				return nil, err
			}
			for _, e := range consumes {
				kn.DependsOn = append(kn.DependsOn, e.Producer)
			}
			n.Children = append(n.Children, kn)
			continue
		}
		kn, err := readSubtree(ctx, rd, k, max(next, 0), group)
		if err != nil {
			return nil, err
		}
		n.Children = append(n.Children, kn)
	}
	return n, nil
}

// HeldBy returns the suspension holding r back (everything's, or its
// root's), from rd's Control; nil when none does or rd keeps none.
func HeldBy(ctx context.Context, rd Reader, r *converge.Resource) *converge.Suspension {
	cr, ok := rd.(stateapi.ControlReader)
	if !ok {
		return nil
	}
	ctl, err := cr.Control(ctx)
	if err != nil || len(ctl.Suspended) == 0 {
		return nil
	}
	if s, ok := ctl.Suspension(""); ok {
		return &s
	}
	for a := r; a != nil; {
		if s, ok := ctl.Suspension(converge.NewID(a.Kind, a.Name)); ok {
			return &s
		}
		if a.Owner == "" {
			break
		}
		if a, err = rd.Resource(ctx, a.Owner); err != nil {
			return nil
		}
	}
	return nil
}

// ReadGet reads id with its edges and newest events, its secrets hidden
// by x; the lease is its worker's claim (for the table only). found is
// false when rd has no resource id (err nil).
func ReadGet(ctx context.Context, rd Reader, x *Redactor, id converge.ID) (v Get, lease *converge.Lease, found bool, err error) {
	r, err := rd.Resource(ctx, id)
	if errors.Is(err, converge.ErrNotFound) {
		return Get{}, nil, false, nil
	}
	if err != nil {
		return Get{}, nil, false, err
	}
	consumes, producedFor, err := rd.EdgesOf(ctx, id)
	if err != nil {
		return Get{}, nil, false, err
	}
	evs, err := rd.Events(ctx, id, DescribeEvents)
	if err != nil {
		return Get{}, nil, false, err
	}
	v = Get{
		Resource: x.Resource(r, x.FlowPaths(consumes)),
		// Flowed fields not known yet: shown, never stored.
		KnownAfter: scheduler.KnownAfterApply(r.Spec, consumes),
		DependsOn:  Edges(consumes, func(e converge.Edge) converge.ID { return e.Producer }),
		UsedBy:     Edges(producedFor, func(e converge.Edge) converge.ID { return e.Consumer }),
		Events:     make([]Event, len(evs)),
		Suspended:  HeldBy(ctx, rd, r),
	}
	if !r.CreatedAt.IsZero() {
		v.CreatedAt = &r.CreatedAt
	}
	if !r.UpdatedAt.IsZero() {
		v.UpdatedAt = &r.UpdatedAt
	}
	for i, e := range evs {
		v.Events[i] = EventOf(e)
	}
	return v, r.Lease, true, nil
}

// ResourceWithEdges is x.Resource, also hiding the spec fields a value
// flow fills from a producer's secret status field (rd's edges of r).
func (x *Redactor) ResourceWithEdges(ctx context.Context, rd Reader, r *converge.Resource) (Resource, error) {
	if !x.FlowsMatter(r) {
		return x.Resource(r, nil), nil
	}
	consumes, _, err := rd.EdgesOf(ctx, r.ID())
	if err != nil {
		return Resource{}, err
	}
	return x.Resource(r, x.FlowPaths(consumes)), nil
}

// RevisionByPrefix returns the one record whose commit hash starts with
// prefix (at least 7 hex digits), or converge.ErrNotFound.
func RevisionByPrefix(ctx context.Context, rv stateapi.Revisioner, prefix string) (*converge.RevisionRecord, error) {
	if len(prefix) < 7 {
		return nil, converge.ErrNotFound
	}
	recs, err := rv.Revisions(ctx, 0)
	if err != nil {
		return nil, err
	}
	var found *converge.RevisionRecord
	for _, r := range recs {
		if strings.HasPrefix(r.Revision.Hash, prefix) && !r.Revision.Dirty {
			if found != nil && found.Revision.Hash != r.Revision.Hash {
				return nil, fmt.Errorf("status %s: more than one recorded commit starts so: give more of the hash", prefix)
			}
			found = r
		}
	}
	if found == nil {
		return nil, converge.ErrNotFound
	}
	return found, nil
}

// ListQuery is what list asks for: the resources of a kind, in a phase,
// the roots only (All false: each with its child count) or every one, at
// most Limit (0: all), only the drifted ones (every resource looked at,
// Limit counting the drifted); Table leaves specs and statuses in the
// store (a root's spec can be megabytes) and reads the applied revision
// that heads the table.
type ListQuery struct {
	Kind    string
	Phase   converge.Phase
	All     bool
	Limit   int
	Drifted bool
	Table   bool
}

// List is what list shows: the resources (secrets hidden), when each was
// created, the pin and suspensions (when rd keeps them) and, for the
// table, the applied revision.
type List struct {
	Resources []Resource
	Created   []time.Time
	Control   *converge.Control
	Applied   *converge.AppliedSource
}

// ReadList reads what list shows for q.
func ReadList(ctx context.Context, rd Reader, q ListQuery) (*List, error) {
	// The table shows no spec or status: leave them in the store
	// (a root's spec can be megabytes).
	f := state.Filter{Kind: q.Kind, Phase: q.Phase, RootsOnly: !q.All, Limit: q.Limit, Head: q.Table}
	if q.Drifted {
		// Drift is a leaf's: every resource is looked at, and
		// the limit counts the drifted ones.
		f.RootsOnly, f.Limit, q.All = false, 0, true
	}
	rs, err := rd.Resources(ctx, f)
	if err != nil {
		return nil, err
	}
	if q.Drifted {
		kept := rs[:0]
		for _, r := range rs {
			if r.Drift != nil && (q.Limit <= 0 || len(kept) < q.Limit) {
				kept = append(kept, r)
			}
		}
		rs = kept
	}
	x, err := NewRedactor(ctx, rd)
	if err != nil {
		return nil, err
	}
	views := make([]Resource, 0, len(rs))
	for _, r := range rs {
		v := x.Resource(r, nil)
		if !q.Table && x.FlowsMatter(r) {
			if v, err = x.ResourceWithEdges(ctx, rd, r); err != nil {
				return nil, err
			}
		}
		if !q.All {
			n, err := rd.ChildCount(ctx, r.ID())
			if err != nil {
				return nil, err
			}
			v.Children = &n
		}
		views = append(views, v)
	}
	l := &List{Resources: views, Created: make([]time.Time, len(rs))}
	for i, r := range rs {
		l.Created[i] = r.CreatedAt
	}
	if cr, ok := rd.(stateapi.ControlReader); ok {
		l.Control, _ = cr.Control(ctx) // the pin and suspensions, shown when known
	}
	if q.Table {
		// The store keeps no revision per resource: the applied one
		// heads the table.
		if src, ok := rd.(interface {
			Source(ctx context.Context) (*converge.AppliedSource, error)
		}); ok {
			if s, err := src.Source(ctx); err == nil {
				l.Applied = s
			}
		}
	}
	return l, nil
}

// WriteData prints l as list -o json|yaml: the resources, and the pin
// and the suspensions when there are any.
func (l *List) WriteData(w io.Writer, format string) error {
	out := map[string]any{"resources": l.Resources}
	if ctl := l.Control; ctl != nil && ctl.Pin != nil {
		out["pin"] = ctl.Pin
	}
	if ctl := l.Control; ctl != nil && len(ctl.Suspended) > 0 {
		out["suspended"] = ctl.Suspended
	}
	return WriteData(w, format, out)
}

// WriteTable prints l as list's table (WriteList).
func (l *List) WriteTable(w io.Writer, now time.Time) error {
	return WriteList(w, l.Applied, l.Control, l.Resources, l.Created, now)
}

// ReadKind reads the resources of kind, in name order, at most limit (0:
// all; more says there are more), their secrets hidden, and when each
// was created (nil when unknown). For a table it leaves specs and
// statuses in the store.
func ReadKind(ctx context.Context, rd Reader, kind string, limit int, table bool) (views []Resource, created []*time.Time, more bool, err error) {
	f := state.Filter{Kind: kind, Head: table}
	if limit > 0 {
		f.Limit = limit + 1 // one more: are there more?
	}
	rs, err := rd.Resources(ctx, f)
	if err != nil {
		return nil, nil, false, err
	}
	more = limit > 0 && len(rs) > limit
	if more {
		rs = rs[:limit]
	}
	x, err := NewRedactor(ctx, rd)
	if err != nil {
		return nil, nil, false, err
	}
	views = make([]Resource, len(rs))
	created = make([]*time.Time, len(rs))
	for i, r := range rs {
		views[i] = x.Resource(r, nil)
		if !table && x.FlowsMatter(r) {
			if views[i], err = x.ResourceWithEdges(ctx, rd, r); err != nil {
				return nil, nil, false, err
			}
		}
		if !r.CreatedAt.IsZero() {
			created[i] = &r.CreatedAt
		}
	}
	return views, created, more, nil
}
