package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/repopath"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/cue"
)

func newExplainCommand(g *globals) *cobra.Command {
	var (
		version int
		output  string
	)
	c := &cobra.Command{
		Use:   "explain KIND[.spec|.status|.config][.FIELD…]",
		Short: "Describe a kind's fields from its CUE schema, as kubectl explain does",
		Long: `explain shows one field of a kind's schema: its type (the CUE constraint), whether
a document must set it, may leave it out or gets it from the schema, its default,
whether it is secret, its doc comment, and the fields below it. The path starts
at the kind (spec when nothing follows), then status or config if not spec, then
field names; [] steps into a list's elements, * into a map's values
(vpc.spec.subnets.[].cidr).

The kinds are the state's (what live resources were applied under) or, before
anything was synced, the repository's work tree's. --kind-version picks a
version (default: the newest).`,
		Example: `  converge explain vpc
  converge explain vpc.spec.cidr
  converge explain route.status
  converge explain account --kind-version 2 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			name, path, _ := strings.Cut(args[0], ".")
			kinds, where, err := explainKinds(c.Context(), g, c.ErrOrStderr())
			if err != nil {
				return err
			}
			k := pickKind(kinds, name, version)
			if k == nil {
				if version > 0 {
					return failed("kind %s/v%d is not in %s", name, version, where)
				}
				if err := checkKind(ctx, staticKinds(kinds), name); err != nil {
					return err
				}
				return failed("kind %q is not in %s", name, where)
			}
			d, err := cue.Explain(k, path)
			if err != nil {
				return failed("%v", err)
			}
			if output != "table" {
				return view.WriteData(c.OutOrStdout(), output, view.Explain{Kind: k.Name, KindVersion: k.Version, Source: k.Source, Field: d})
			}
			view.WriteExplain(c.OutOrStdout(), k, d)
			return nil
		},
	}
	c.Flags().IntVar(&version, "kind-version", 0, "the kind version to explain (default: the newest)")
	c.Flags().StringVarP(&output, "output", "o", "table", "output: table, json or yaml")
	return c
}

// staticKinds is a kindLister over kinds already read.
type staticKinds []*converge.Kind

func (s staticKinds) Kinds(context.Context) ([]*converge.Kind, error) { return s, nil }

// explainKinds returns the state's kinds or, with no state yet, the work
// tree's, and says which.
func explainKinds(ctx context.Context, g *globals, errOut io.Writer) ([]*converge.Kind, string, error) {
	if err := resolveSource(ctx, g); err != nil {
		return nil, "", err
	}
	if rd, done, err := openReader(g, errOut); err == nil {
		defer done()
		ks, err := rd.Kinds(ctx)
		if err != nil {
			return nil, "", err
		}
		if len(ks) > 0 {
			return ks, "the state", nil
		}
	}
	if repopath.IsRemote(g.repo) {
		return nil, "", usageErr("explain: no state yet, and --repo %s is remote: sync first", g.repo)
	}
	if err := checkLocalPath(g); err != nil {
		return nil, "", err
	}
	dir := documentsDir(g)
	sb, err := g.sandbox()
	if err != nil {
		return nil, "", err
	}
	res, err := sb.Load(ctx, os.DirFS(dir), ".", cue.Options{})
	if err != nil {
		return nil, "", fmt.Errorf("explain: %w", err)
	}
	return res.Desired.Kinds, "the work tree " + dir, nil
}

// pickKind returns kind name at version, or its newest version when
// version is 0; nil if there is none.
func pickKind(kinds []*converge.Kind, name string, version int) *converge.Kind {
	var best *converge.Kind
	for _, k := range kinds {
		if k.Name != name || (version > 0 && k.Version != version) {
			continue
		}
		if best == nil || k.Version > best.Version {
			best = k
		}
	}
	return best
}
