package classic

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/sdk"
)

// BOMSpec is the spec of a classicbom: functional domains × service teams.
type BOMSpec struct {
	FunctionalDomains []FunctionalDomain `json:"functional_domains"`
}

// FunctionalDomain is one business unit of a BOM. Networking gives it a
// shared transit gateway that each team's route attaches to.
type FunctionalDomain struct {
	Name         string        `json:"name"`
	Networking   bool          `json:"networking"`
	ServiceTeams []ServiceTeam `json:"service_teams"`
}

// ServiceTeam is one team of a functional domain.
type ServiceTeam struct {
	Name string `json:"name"`
}

// MaxNameLen is the longest child name the composer emits (a DNS label).
const MaxNameLen = 63

// ComposeBOM turns a BOM into its children and edges. It is a pure
// function: the same spec always yields the same composition, children in
// BOM order (per domain: tgw, tgw-host account, then per team: account,
// vpc, route). Child names depend only on the domain and team they come
// from, never on their position, so adding or removing a team leaves every
// other child unchanged. A BOM with an empty name, or two entries mapping
// to the same child, is a permanent error naming both.
func ComposeBOM(spec BOMSpec) (*sdk.Composition, error) {
	c := &sdk.Composition{}
	err := composeTo(spec,
		func(ch converge.Child) error { c.Children = append(c.Children, ch); return nil },
		func(e converge.Edge) error { c.Edges = append(c.Edges, e); return nil })
	if err != nil {
		return nil, err
	}
	return c, nil
}

// composeTo is ComposeBOM handing each child and edge to child and edge
// as it makes them, so a streamed composition is never held whole (a
// 333,000-team BOM is a million children). Only the set of child IDs is
// kept, to refuse two entries that map to the same child.
func composeTo(spec BOMSpec, child func(converge.Child) error, edge func(converge.Edge) error) error {
	// seen maps a child to the BOM entry that emitted it: the domain's
	// index, and the team's plus one (0: the domain itself).
	seen := make(map[converge.ID]uint64)
	for i, fd := range spec.FunctionalDomains {
		if err := composeDomain(i, fd, seen, child, edge); err != nil {
			return err
		}
	}
	return nil
}

// composeDomain composes functional domain i: its tgw and tgw host when
// it has networking, and per team an account, a VPC and a route. seen
// holds the children emitted so far and where from (see composeTo).
func composeDomain(i int, fd FunctionalDomain, seen map[converge.ID]uint64, child func(converge.Child) error, edge func(converge.Edge) error) error {
	// The path is formatted only for an error.
	path := func(at uint64) string {
		p := fmt.Sprintf("functional_domains[%d]", at>>32)
		if t := at & (1<<32 - 1); t > 0 {
			p += fmt.Sprintf(".service_teams[%d]", t-1)
		}
		return p
	}
	add := func(at uint64, kind string, version int, name string, spec any) (converge.ID, error) {
		id := converge.NewID(kind, name)
		if prev, ok := seen[id]; ok {
			return "", sdk.Permanent(fmt.Errorf("compose: %s and %s both map to %s", path(prev), path(at), id))
		}
		seen[id] = at
		b, err := json.Marshal(spec)
		if err != nil {
			return "", sdk.Permanent(fmt.Errorf("compose %s: %w", id, err))
		}
		return id, child(converge.Child{Kind: kind, KindVersion: version, Name: name, Spec: b})
	}
	accountFlow := []converge.ValueFlow{{From: "account_id", To: "account_id"}}
	vpcFlow := []converge.ValueFlow{{From: "vpc_id", To: "vpc_id"}}
	tgwFlow := []converge.ValueFlow{{From: "tgw_id", To: "tgw_id"}}
	at := uint64(i) << 32
	if strings.TrimSpace(fd.Name) == "" {
		return sdk.Permanent(fmt.Errorf("compose: %s.name: empty", path(at)))
	}
	var tgw converge.ID
	if fd.Networking {
		name := childName(fd.Name, "tgw")
		var err error
		if tgw, err = add(at, "tgw", 1, name, TGWSpec{Name: name}); err != nil {
			return err
		}
		host := childName(fd.Name, "tgw-host")
		hostID, err := add(at, "account", 1, host, AccountSpec{TeamName: host})
		if err != nil {
			return err
		}
		if err := edge(converge.Edge{Consumer: tgw, Producer: hostID}); err != nil {
			return err
		}
	}
	for j, team := range fd.ServiceTeams {
		at := at | uint64(j+1)
		if strings.TrimSpace(team.Name) == "" {
			return sdk.Permanent(fmt.Errorf("compose: %s.name: empty", path(at)))
		}
		name := childName(fd.Name, team.Name)
		acct, err := add(at, "account", 1, name, AccountSpec{TeamName: name})
		if err != nil {
			return err
		}
		vpc, err := add(at, "vpc", 1, name, VPCSpec{CIDR: cidrFor(name)})
		if err != nil {
			return err
		}
		if err := edge(converge.Edge{Consumer: vpc, Producer: acct, Flows: accountFlow}); err != nil {
			return err
		}
		if !fd.Networking {
			continue
		}
		route, err := add(at, "route", 1, name, RouteSpec{})
		if err != nil {
			return err
		}
		if err := edge(converge.Edge{Consumer: route, Producer: vpc, Flows: vpcFlow}); err != nil {
			return err
		}
		if err := edge(converge.Edge{Consumer: route, Producer: tgw, Flows: tgwFlow}); err != nil {
			return err
		}
	}
	return nil
}

// composeBOM is classicbom's compose reaction, streamed: the children
// and edges of a million-child BOM go out in parts as they are made. It
// is never faulted.
func composeBOM(_ context.Context, r *sdk.Request, out *sdk.Emitter) error {
	var spec BOMSpec
	if err := r.DecodeSpec(&spec); err != nil {
		return sdk.Permanent(fmt.Errorf("%s/%s: %w", r.Kind, r.Name, err))
	}
	return composeTo(spec, out.Child, out.Edge)
}

// bomParts cuts a BOM into its functional domains, keyed by name: a
// domain's children depend on that domain alone, so a recompose after a
// one-team change composes one domain, twice (sdk.Provider.Parts).
// Children of two domains that map to the same name (domain "a", team
// "b-c" and domain "a-b", team "c") are refused by the control plane in
// a delta, and by composeTo in a full compose.
func bomParts(spec json.RawMessage) ([]sdk.Part, error) {
	domains, err := sdk.ArrayField(spec, "functional_domains")
	if err != nil {
		return nil, sdk.Permanent(fmt.Errorf("spec: %w", err))
	}
	parts := make([]sdk.Part, len(domains))
	for i, raw := range domains {
		name, _, err := sdk.StringField(raw, "name")
		if err != nil {
			return nil, sdk.Permanent(fmt.Errorf("spec: functional_domains[%d]: %w", i, err))
		}
		parts[i] = sdk.Part{Key: name, Spec: raw, Index: i}
	}
	return parts, nil
}

// composeBOMPart composes one domain of a BOM (bomParts).
func composeBOMPart(_ context.Context, r *sdk.Request, p sdk.Part, out *sdk.Emitter) error {
	var fd FunctionalDomain
	if err := json.Unmarshal(p.Spec, &fd); err != nil {
		return sdk.Permanent(fmt.Errorf("%s/%s: spec: functional_domains[%d]: %w", r.Kind, r.Name, p.Index, err))
	}
	return composeDomain(p.Index, fd, make(map[converge.ID]uint64), out.Child, out.Edge)
}

// childName joins parts into a DNS label (lowercase letters, digits and
// inner hyphens, at most MaxNameLen). When the parts are already clean
// labels and short enough the result is just "part1-part2"; otherwise the
// cleaned, truncated join gets a suffix hashed from the raw parts, so
// different raw inputs stay apart.
func childName(parts ...string) string {
	labels := make([]string, 0, len(parts))
	clean := true
	for _, p := range parts {
		l := label(p)
		if l != p {
			clean = false
		}
		if l != "" {
			labels = append(labels, l)
		}
	}
	name := strings.Join(labels, "-")
	if clean && len(name) <= MaxNameLen {
		return name
	}
	suffix := shortHash(8, parts...)
	if max := MaxNameLen - len(suffix) - 1; len(name) > max {
		name = strings.TrimRight(name[:max], "-")
	}
	if name == "" {
		return suffix
	}
	return name + "-" + suffix
}

// label lowercases s, turns every run of other characters into one hyphen
// and trims hyphens at both ends.
func label(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			continue
		}
		dash = true
	}
	return b.String()
}

// cidrFor returns a /24 in 10.0.0.0/8 derived from the child's name alone,
// so it is stable when other teams come and go. Two teams may share a
// block (a fake VPC routes nothing; a real composer would ask an IPAM).
func cidrFor(name string) string {
	h := hashBytes(name)
	return fmt.Sprintf("10.%d.%d.0/24", h[0], h[1])
}
