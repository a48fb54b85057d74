// Package onprem is the provider set of examples/onprem: a BOM of
// functional domains × service teams (onprembom) that gives every team a
// PostgreSQL login role, a database owned by it and a DNS record for it,
// on real servers. The leaves live in their own packages, one per client
// library: postgres (pgx) and dnsrecord (miekg/dns); servertest starts
// the servers for tests.
//
// Read first: Providers, BOMSpec, ComposeBOM.
package onprem

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/onprem/dnsrecord"
	"github.com/convergehq/converge/providers/onprem/postgres"
	"github.com/convergehq/converge/providers/sdk"
)

// BOMKind is the composer's kind.
const BOMKind = "onprembom"

// BOMSpec is an onprembom's spec.
type BOMSpec struct {
	FunctionalDomains []Domain `json:"functional_domains"`
}

// Domain is one functional domain and its teams.
type Domain struct {
	Name         string `json:"name"`
	ServiceTeams []Team `json:"service_teams"`
}

// Team is one service team. ConnectionLimit is its role's (10 when 0).
type Team struct {
	Name            string `json:"name"`
	ConnectionLimit int    `json:"connection_limit,omitempty"`
}

// Providers returns onprembom v1, pgrole v1, pgdatabase v1 and
// dnsrecord v1.
func Providers() []sdk.Provider {
	return append([]sdk.Provider{
		{Kind: BOMKind, Version: 1, ComposeStream: sdk.Composer(composeBOM), Parts: bomParts, ComposePart: composePart},
	}, append(postgres.Providers(), dnsrecord.Provider())...)
}

// label is a name part: a DNS label that is also a plain SQL identifier
// once its hyphens are underscores.
var label = regexp.MustCompile(`^[a-z][a-z0-9-]{0,20}[a-z0-9]$`)

// ComposeBOM is the BOM's composition, children in BOM order: per team a
// pgrole, a pgdatabase owned by it (owner ← role's status.name) and a
// dnsrecord for it (target ← database's status.host), all named
// DOMAIN-TEAM. Names depend only on the domain and team, so a team added
// or removed leaves every other child as it is. An invalid name, or two
// entries with one name, is a permanent error naming both.
func ComposeBOM(spec BOMSpec) (*sdk.Composition, error) {
	c := &sdk.Composition{}
	out := func(ch converge.Child) error { c.Children = append(c.Children, ch); return nil }
	edge := func(e converge.Edge) error { c.Edges = append(c.Edges, e); return nil }
	seen := map[string]string{}
	for i, d := range spec.FunctionalDomains {
		if err := composeDomain(i, d, seen, out, edge); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func composeBOM(_ context.Context, _ *sdk.Request, spec BOMSpec, out *sdk.Emitter) error {
	seen := map[string]string{}
	for i, d := range spec.FunctionalDomains {
		if err := composeDomain(i, d, seen, out.Child, out.Edge); err != nil {
			return err
		}
	}
	return nil
}

// bomParts cuts a BOM into its domains (sdk.Provider.Parts): a domain's
// children depend on it alone.
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

func composePart(_ context.Context, r *sdk.Request, p sdk.Part, out *sdk.Emitter) error {
	var d Domain
	if err := json.Unmarshal(p.Spec, &d); err != nil {
		return sdk.Permanent(fmt.Errorf("%s/%s: spec: functional_domains[%d]: %w", r.Kind, r.Name, p.Index, err))
	}
	return composeDomain(p.Index, d, map[string]string{}, out.Child, out.Edge)
}

func composeDomain(i int, d Domain, seen map[string]string, child func(converge.Child) error, edge func(converge.Edge) error) error {
	at := fmt.Sprintf("functional_domains[%d]", i)
	if !label.MatchString(d.Name) {
		return sdk.Permanent(fmt.Errorf("compose: %s.name %q: want %s", at, d.Name, label))
	}
	for j, t := range d.ServiceTeams {
		at := fmt.Sprintf("%s.service_teams[%d]", at, j)
		if !label.MatchString(t.Name) {
			return sdk.Permanent(fmt.Errorf("compose: %s.name %q: want %s", at, t.Name, label))
		}
		name := d.Name + "-" + t.Name
		if prev, ok := seen[name]; ok {
			return sdk.Permanent(fmt.Errorf("compose: %s and %s both map to %s", prev, at, name))
		}
		seen[name] = at
		sqlName := sqlIdent(name)
		limit := t.ConnectionLimit
		if limit == 0 {
			limit = 10
		}
		role, err := sdk.NewChild(postgres.RoleKind, 1, name, postgres.RoleSpec{Name: sqlName, ConnectionLimit: &limit})
		if err != nil {
			return err
		}
		db, err := sdk.NewChild(postgres.DatabaseKind, 1, name, postgres.DatabaseSpec{Name: sqlName})
		if err != nil {
			return err
		}
		rec, err := sdk.NewChild(dnsrecord.Kind, 1, name, dnsrecord.Spec{Name: t.Name + "." + d.Name + ".db"})
		if err != nil {
			return err
		}
		for _, c := range []converge.Child{role, db, rec} {
			if err := child(c); err != nil {
				return err
			}
		}
		roleID, dbID, recID := sdk.NewID(role.Kind, name), sdk.NewID(db.Kind, name), sdk.NewID(rec.Kind, name)
		if err := edge(sdk.Flow(dbID, roleID, "name", "owner")); err != nil {
			return err
		}
		if err := edge(sdk.Flow(recID, dbID, "host", "target")); err != nil {
			return err
		}
	}
	return nil
}

// sqlIdent turns a child name into its role and database name.
func sqlIdent(name string) string {
	b := []byte(name)
	for i, c := range b {
		if c == '-' {
			b[i] = '_'
		}
	}
	return string(b)
}
