// Package complete finds the candidates of converge's shell completion
// in the state: the kinds it knows (Kinds), the KIND/NAME ids beginning
// with what was typed, read by seeks in the store's id order and grouped
// by their next part when there are many (Names), and the operator verbs
// of a resource's kind version (Verbs). A candidate it cannot read is
// left out: completion never fails loudly.
package complete

import (
	"context"
	"slices"
	"strings"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/stateapi"
)

// Reader is what completion reads: the store or a daemon's admin API.
type Reader interface {
	Resource(ctx context.Context, id converge.ID) (*converge.Resource, error)
	Kinds(ctx context.Context) ([]*converge.Kind, error)
}

// Kinds lists the kinds rd knows, each name once, sorted.
func Kinds(ctx context.Context, rd Reader) []string {
	ks, err := rd.Kinds(ctx)
	if err != nil {
		return nil
	}
	var names []string
	for _, k := range ks {
		if !slices.Contains(names, k.Name) {
			names = append(names, k.Name)
		}
	}
	slices.Sort(names)
	return names
}

// Max is the most names a completion offers; beyond it, it
// offers their beginnings (see Names).
const Max = 1000

// Names returns the IDs of kind whose name begins with prefix,
// read from the store in ID order from the prefix on (a seek, not a scan
// of the kind). When more than Max match it returns instead, and
// grouped, each match's beginning up to the first separator ("-", ".",
// "_") after prefix, one per beginning ("vpc/fd-", "vpc/sample-"), each
// found by one seek past the last: a shell then completes the next part.
func Names(ctx context.Context, rd Reader, kind, prefix string) (ids []string, grouped bool) {
	hs, ok := rd.(stateapi.HeadScanner)
	if !ok {
		return nil, false
	}
	from := converge.ID(kind + "/" + prefix)
	var exact []string // the prefix itself, which ResourceHeadsAfter skips
	if prefix != "" {
		if _, err := rd.Resource(ctx, from); err == nil {
			exact = []string{string(from)}
		}
	}
	rows, err := hs.ResourceHeadsAfter(ctx, kind, from, Max+1)
	if err != nil {
		return nil, false
	}
	out := exact
	for _, row := range rows {
		if !strings.HasPrefix(row.Resource.Name, prefix) {
			break
		}
		out = append(out, string(row.Resource.ID()))
	}
	if len(out) <= Max {
		return out, false
	}
	out = exact
	for after := from; len(out) < Max; {
		rows, err := hs.ResourceHeadsAfter(ctx, kind, after, 1)
		if err != nil || len(rows) == 0 || !strings.HasPrefix(rows[0].Resource.Name, prefix) {
			break
		}
		name := rows[0].Resource.Name
		part := name
		if i := strings.IndexAny(name[len(prefix):], "-._"); i >= 0 {
			part = name[:len(prefix)+i+1]
		}
		out = append(out, kind+"/"+part)
		after = converge.ID(kind + "/" + part)
		if part != name {
			after += "\xff" // past every name beginning with part
		}
	}
	return out, true
}

// Verbs lists the operator verbs of id's kind version: its reactions
// other than the engine's own.
func Verbs(ctx context.Context, rd Reader, id converge.ID) []string {
	r, err := rd.Resource(ctx, id)
	if err != nil {
		return nil
	}
	ks, err := rd.Kinds(ctx)
	if err != nil {
		return nil
	}
	var out []string
	for _, k := range ks {
		if k.Name != r.Kind || k.Version != r.KindVersion {
			continue
		}
		for _, re := range k.Reactions {
			switch re {
			case converge.ReactionReconcile, converge.ReactionCompose, converge.ReactionTeardown, converge.ReactionReact:
			default:
				out = append(out, re)
			}
		}
	}
	return out
}
