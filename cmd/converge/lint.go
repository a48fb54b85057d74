package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
	gitsync "github.com/convergehq/converge/sync"
)

// lintFinding is one finding of `converge lint -o json`: the stable
// Finding fields plus the commit it was found on ("<base>..<head>" for the
// range as a whole).
type lintFinding struct {
	converge.Finding
	Commit string `json:"commit"`
}

// lintReport is the JSON of `converge lint -o json` (DESIGN.md section 6):
// add fields freely, never rename these.
type lintReport struct {
	Findings []lintFinding `json:"findings"`
	// Commits counts the commits linted (base excluded).
	Commits int `json:"commits"`
	// Breaking counts the commits with findings.
	Breaking int `json:"breaking"`
}

// lintGroup is the findings of one commit, or of the whole range.
type lintGroup struct {
	header   string // "commit abc1234 subject" or "range abc1234..def5678"
	id       string // the JSON commit field
	findings []converge.Finding
}

// newLintCommand builds `converge lint --base REV --head REV`: lint every
// first-parent commit of base..head against its first parent, and head
// against base. Exit 1 when any commit (or the range) has a breaking
// change or invalid documents, 0 when every change is additive, 2 on a
// usage or repository error.
func newLintCommand(g *globals) *cobra.Command {
	var base, head, output string
	c := &cobra.Command{
		Use:   "lint --base REV --head REV",
		Short: "Refuse breaking kind schema changes in a range of commits",
		Long: `Lint compares the kinds of every first-parent commit in base..head (as
git rev-list --first-parent lists them) with its parent's, and head's with
base's. For the same (kind, kind_version), a removed field, an optional field
made required, a new required field, a changed type or default, a narrowed
constraint or list element, a closed struct, and a removed kind_version are
breaking: ship such a change as a new kind_version. A commit whose documents
are invalid gets its validation errors as findings too.

Documents are read from the commits' trees (below --path), never from a
checkout. Output: text (file:line:col: RULE: message, grouped per commit),
json, or github (workflow annotations; files relative to the repository
root).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if err := checkOutput(output, "text", "json", "github"); err != nil {
				return err
			}
			if base == "" {
				return usageErr("lint: --base is required")
			}
			if isRemote(g.repo) {
				return usageErr("lint %s: lint reads a local repository (clone it and pass its path)", g.repo)
			}
			src, err := gitsync.OpenLocal(g.repo, g.ref)
			if err != nil {
				return fmt.Errorf("lint: %w", err)
			}
			groups, n, err := lintRange(src, g.path, base, head)
			if err != nil {
				return fmt.Errorf("lint: %w", err)
			}
			if err := printLint(c.OutOrStdout(), output, g.path, groups, n); err != nil {
				return err
			}
			for _, gr := range groups {
				if len(gr.findings) > 0 {
					return errFailed{errSilent}
				}
			}
			return nil
		},
	}
	c.Flags().StringVar(&base, "base", "", "the revision the range starts after (e.g. origin/main)")
	c.Flags().StringVar(&head, "head", "HEAD", "the newest revision of the range")
	c.Flags().StringVarP(&output, "output", "o", "text", "output format: text|json|github")
	return c
}

// loaded is one revision's documents below the linted path.
type loaded struct {
	tree     fs.FS // nil when the path does not exist at the revision
	kinds    []*converge.Kind
	findings []converge.Finding
}

// lintRange lints each first-parent commit of base..head and the range as
// a whole. It returns one group per commit, oldest first, then the range
// group (left out when the range is a single commit: it would repeat it),
// and the number of commits.
func lintRange(src *gitsync.Source, sub, base, head string) ([]lintGroup, int, error) {
	commits, err := src.FirstParents(base, head)
	if err != nil {
		return nil, 0, err
	}
	cache := map[string]*loaded{}
	load := func(rev converge.Revision) (*loaded, error) {
		if l, ok := cache[rev.Hash]; ok {
			return l, nil
		}
		l := &loaded{}
		tree, err := src.FS(rev, sub)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// The path does not exist yet (or any more): no documents.
		case err != nil:
			return nil, err
		default:
			res, err := cue.Load(tree, ".", cue.Options{})
			if err != nil {
				return nil, fmt.Errorf("load %s: %w", rev, err)
			}
			l.tree, l.kinds, l.findings = tree, res.Desired.Kinds, res.Findings
		}
		cache[rev.Hash] = l
		return l, nil
	}
	var groups []lintGroup
	for _, c := range commits {
		cur, err := load(c)
		if err != nil {
			return nil, 0, err
		}
		prev := &loaded{}
		if p, ok, err := src.FirstParent(c); err != nil {
			return nil, 0, err
		} else if ok {
			if prev, err = load(p); err != nil {
				return nil, 0, err
			}
		}
		fs := append([]converge.Finding{}, cur.findings...)
		fs = append(fs, lintLoaded(prev, cur)...)
		groups = append(groups, lintGroup{header: "commit " + short(c.Hash) + " " + c.Subject, id: c.Hash, findings: fs})
	}
	if len(commits) > 1 {
		b, err := src.Revision(base)
		if err != nil {
			return nil, 0, err
		}
		h := commits[len(commits)-1]
		lb, err := load(b)
		if err != nil {
			return nil, 0, err
		}
		lh, err := load(h)
		if err != nil {
			return nil, 0, err
		}
		rng := short(b.Hash) + ".." + short(h.Hash)
		groups = append(groups, lintGroup{header: "range " + rng, id: rng, findings: lintLoaded(lb, lh)})
	}
	return groups, len(commits), nil
}

// lintLoaded lints cur's kinds against prev's. A kind version that is only
// missing because its document in cur is invalid (the file still has
// validation findings) is not reported as removed: its validation
// findings say what is wrong.
func lintLoaded(prev, cur *loaded) []converge.Finding {
	bad := map[string]bool{}
	for _, f := range cur.findings {
		bad[f.File] = true
	}
	var out []converge.Finding
	for _, f := range cue.LintTrees(prev.kinds, cur.kinds, prev.tree, cur.tree) {
		if f.Rule == cue.RuleKVRemoved && bad[f.File] {
			continue
		}
		out = append(out, f)
	}
	return out
}

func short(hash string) string {
	if len(hash) > 7 {
		return hash[:7]
	}
	return hash
}

func printLint(w io.Writer, format, sub string, groups []lintGroup, commits int) error {
	breaking, total := 0, 0
	for _, g := range groups {
		if len(g.findings) > 0 && strings.HasPrefix(g.header, "commit ") {
			breaking++
		}
		total += len(g.findings)
	}
	switch format {
	case "json":
		rep := lintReport{Findings: []lintFinding{}, Commits: commits, Breaking: breaking}
		for _, g := range groups {
			for _, f := range g.findings {
				rep.Findings = append(rep.Findings, lintFinding{Finding: f, Commit: g.id})
			}
		}
		return writeData(w, "json", rep)
	case "github":
		sub = strings.Trim(path.Clean("/"+strings.ReplaceAll(sub, `\`, "/")), "/")
		for _, g := range groups {
			for _, f := range g.findings {
				file := f.File
				if sub != "" && file != "" {
					file = sub + "/" + file
				}
				fmt.Fprintf(w, "::error file=%s,line=%d,col=%d,title=%s::%s\n",
					ghProperty(file), max(f.Line, 1), max(f.Column, 1), ghProperty(f.Rule), ghData(g.header+": "+lintMessage(f)))
			}
		}
	default:
		for _, g := range groups {
			if len(g.findings) == 0 {
				continue
			}
			fmt.Fprintf(w, "%s:\n", g.header)
			for _, f := range g.findings {
				pos := f.File
				if f.Line > 0 {
					pos = fmt.Sprintf("%s:%d:%d", f.File, f.Line, f.Column)
				}
				fmt.Fprintf(w, "%s: %s: %s\n", pos, f.Rule, lintMessage(f))
			}
		}
	}
	verdict := "no breaking changes"
	if total > 0 {
		verdict = fmt.Sprintf("%d breaking, %s", breaking, plural(total, "finding"))
	}
	_, err := fmt.Fprintf(w, "%s linted: %s\n", plural(commits, "commit"), verdict)
	return err
}

// lintMessage is f's message led by its field path (lint messages already
// start with it; validation messages do not).
func lintMessage(f converge.Finding) string {
	if f.Path == "" || strings.HasPrefix(f.Message, f.Path) {
		return f.Message
	}
	return f.Path + ": " + f.Message
}

// ghData escapes a workflow command's message.
func ghData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

// ghProperty escapes a workflow command's property value.
func ghProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}
