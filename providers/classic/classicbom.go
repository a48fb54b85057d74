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

// Placeholders the composer writes into fields that value flows fill.
// Children are validated against their kind's schema before flows run, so
// each placeholder satisfies the schema (vpc.account_id is exactly 12
// characters). A leaf that still sees one fails permanently.
const (
	PlaceholderAccountID = "000000000000"
	PlaceholderID        = "pending"
)

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
	seen := make(map[converge.ID]string) // child → BOM path that emitted it
	add := func(from, kind string, version int, name string, spec any) (converge.ID, error) {
		id := converge.NewID(kind, name)
		if prev, ok := seen[id]; ok {
			return "", sdk.Permanent(fmt.Errorf("compose: %s and %s both map to %s", prev, from, id))
		}
		seen[id] = from
		b, err := json.Marshal(spec)
		if err != nil {
			return "", sdk.Permanent(fmt.Errorf("compose %s: %w", id, err))
		}
		c.Children = append(c.Children, converge.Child{Kind: kind, KindVersion: version, Name: name, Spec: b})
		return id, nil
	}
	for i, fd := range spec.FunctionalDomains {
		at := fmt.Sprintf("functional_domains[%d]", i)
		if strings.TrimSpace(fd.Name) == "" {
			return nil, sdk.Permanent(fmt.Errorf("compose: %s.name: empty", at))
		}
		var tgw converge.ID
		if fd.Networking {
			name := childName(fd.Name, "tgw")
			var err error
			if tgw, err = add(at, "tgw", 1, name, TGWSpec{Name: name}); err != nil {
				return nil, err
			}
			host := childName(fd.Name, "tgw-host")
			hostID, err := add(at, "account", 1, host, AccountSpec{TeamName: host})
			if err != nil {
				return nil, err
			}
			c.Edges = append(c.Edges, converge.Edge{Consumer: tgw, Producer: hostID})
		}
		for j, team := range fd.ServiceTeams {
			at := fmt.Sprintf("%s.service_teams[%d]", at, j)
			if strings.TrimSpace(team.Name) == "" {
				return nil, sdk.Permanent(fmt.Errorf("compose: %s.name: empty", at))
			}
			name := childName(fd.Name, team.Name)
			acct, err := add(at, "account", 1, name, AccountSpec{TeamName: name})
			if err != nil {
				return nil, err
			}
			vpc, err := add(at, "vpc", 1, name, VPCSpec{AccountID: PlaceholderAccountID, CIDR: cidrFor(name)})
			if err != nil {
				return nil, err
			}
			c.Edges = append(c.Edges, converge.Edge{Consumer: vpc, Producer: acct,
				Flows: []converge.ValueFlow{{From: "account_id", To: "account_id"}}})
			if !fd.Networking {
				continue
			}
			route, err := add(at, "route", 1, name, RouteSpec{VPCID: PlaceholderID, TGWID: PlaceholderID})
			if err != nil {
				return nil, err
			}
			c.Edges = append(c.Edges,
				converge.Edge{Consumer: route, Producer: vpc, Flows: []converge.ValueFlow{{From: "vpc_id", To: "vpc_id"}}},
				converge.Edge{Consumer: route, Producer: tgw, Flows: []converge.ValueFlow{{From: "tgw_id", To: "tgw_id"}}})
		}
	}
	return c, nil
}

// composeBOM is classicbom's compose reaction. It is never faulted.
func composeBOM(_ context.Context, r *sdk.Request) (*sdk.Composition, error) {
	var spec BOMSpec
	if err := r.DecodeSpec(&spec); err != nil {
		return nil, sdk.Permanent(fmt.Errorf("%s/%s: %w", r.Kind, r.Name, err))
	}
	return ComposeBOM(spec)
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
