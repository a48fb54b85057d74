package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"runtime"
	"strings"
	gosync "sync"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

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

// lintReport is the JSON of `converge lint -o json` (see "Stable JSON
// output" in docs/ARCHITECTURE.md): add fields freely, never rename these.
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
// first-parent commit of base..head against its first parent, and the
// range as a whole. Exit 1 when any commit (or the range) has a breaking
// change or invalid documents, 0 when every change is additive, 2 on a
// usage or repository error.
func newLintCommand(g *globals) *cobra.Command {
	var base, head, output string
	c := &cobra.Command{
		Use:   "lint --base REV --head REV",
		Short: "Refuse breaking kind schema changes in a range of commits",
		Long: `Lint compares the kinds of every first-parent commit in base..head (as
git rev-list --first-parent lists them) with its parent's, and head's with
those of the first commit's parent (base, or where a branch behind base forked). For the same (kind, kind_version), a removed field, an optional field
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
			ctx := c.Context()
			if err := checkOutput(output, "text", "json", "github"); err != nil {
				return err
			}
			if base == "" {
				return usageErr("lint: --base is required")
			}
			if isRemote(g.repo) {
				return usageErr("lint %s: lint reads a local repository (clone it and pass its path)", g.repo)
			}
			// The repository, path and state every command resolves alike.
			if err := resolveSource(ctx, g); err != nil {
				return err
			}
			if err := checkLocalPath(g); err != nil {
				return err
			}
			notePathFromState(c.ErrOrStderr(), g, "lint")
			src, err := gitsync.OpenLocal(g.repo, g.ref)
			if err != nil {
				return fmt.Errorf("lint: %w", err)
			}
			sb, err := g.sandbox()
			if err != nil {
				return err
			}
			groups, n, err := lintRange(c.Context(), sb, src, g.path, base, head)
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
	c.Flags().StringVar(&output, "format", "text", "the same as --output")
	c.Flags().MarkHidden("format")
	return c
}

// loaded is one revision's documents below the linted path.
type loaded struct {
	tree     fs.FS // nil when the path does not exist at the revision
	kinds    []*converge.Kind
	findings []converge.Finding
}

// lintRange lints each first-parent commit of base..head against its first
// parent, and head against the first commit's parent (the range as a
// whole). It returns one group per commit, oldest first, then the range
// group (left out when the range is a single commit: it would repeat it),
// and the number of commits.
//
// Loading (validating every document) is most of the cost: each distinct
// tree below sub is loaded once, on GOMAXPROCS goroutines; reads of the git
// object database are serialized (go-git is not safe for concurrent use).
func lintRange(ctx context.Context, sb *cue.Sandbox, src *gitsync.Source, sub, base, head string) ([]lintGroup, int, error) {
	commits, err := src.FirstParents(base, head)
	if err != nil {
		return nil, 0, err
	}
	// revs[0] is the first commit's parent (zero for a root commit),
	// revs[i+1] is commits[i]: along the first-parent chain, each commit's
	// parent is the one before it.
	revs := make([]converge.Revision, 0, len(commits)+2)
	if len(commits) > 0 {
		p, ok, err := src.FirstParent(commits[0])
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			p = converge.Revision{}
		}
		revs = append(revs, p)
	}
	revs = append(revs, commits...)
	keys := make([]string, len(revs))
	jobs := map[string]converge.Revision{}
	for i, r := range revs {
		if r.Hash == "" {
			continue // before the root commit: no documents
		}
		if keys[i], err = src.TreeHash(r, sub); err != nil {
			return nil, 0, err
		}
		if keys[i] != "" {
			jobs[keys[i]] = r
		}
	}
	trees, err := loadTrees(ctx, sb, src, sub, jobs)
	if err != nil {
		return nil, 0, err
	}
	at := func(i int) *loaded {
		if l, ok := trees[keys[i]]; ok {
			return l
		}
		return &loaded{}
	}
	var groups []lintGroup
	for i, c := range commits {
		prev, cur := at(i), at(i+1)
		fs := append([]converge.Finding{}, cur.findings...)
		fs = append(fs, lintLoaded(prev, cur)...)
		groups = append(groups, lintGroup{header: "commit " + short(c.Hash) + " " + c.Subject, id: c.Hash, findings: fs})
	}
	if len(commits) > 1 {
		// The range as a whole starts at the first commit's parent: base
		// itself when head descends from it, else the point where head's
		// first-parent chain joins base's history (a branch behind main).
		h := commits[len(commits)-1]
		rng := short(revs[0].Hash) + ".." + short(h.Hash)
		groups = append(groups, lintGroup{header: "range " + rng, id: rng, findings: lintLoaded(at(0), at(len(commits)))})
	}
	return groups, len(commits), nil
}

// loadTrees loads the documents of each job (tree hash to a revision
// holding it) concurrently, each under the load budget (sb).
func loadTrees(ctx context.Context, sb *cue.Sandbox, src *gitsync.Source, sub string, jobs map[string]converge.Revision) (map[string]*loaded, error) {
	var mu gosync.Mutex // guards src and every tree read from it
	out := make(map[string]*loaded, len(jobs))
	var outMu gosync.Mutex // guards out
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for key, rev := range jobs {
		g.Go(func() error {
			mu.Lock()
			tree, err := src.FS(rev, sub)
			mu.Unlock()
			if err != nil {
				return err
			}
			tree = &lockedFS{mu: &mu, fsys: tree}
			res, err := sb.Load(ctx, tree, ".", cue.Options{})
			if err != nil {
				return fmt.Errorf("load %s: %w", rev, err)
			}
			outMu.Lock()
			out[key] = &loaded{tree: tree, kinds: res.Desired.Kinds, findings: res.Findings}
			outMu.Unlock()
			return nil
		})
	}
	return out, g.Wait()
}

// lockedFS serializes every access to a git tree FS (including DirEntry.Info,
// which reads blob sizes) with mu. It serves ReadDir, ReadFile and Stat,
// all that cue.Load and the lint locator use; Open reads the whole file
// under mu.
type lockedFS struct {
	mu   *gosync.Mutex
	fsys fs.FS
}

func (l *lockedFS) Open(name string) (fs.File, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fi, err := fs.Stat(l.fsys, name)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, &fs.PathError{Op: "open", Path: name, Err: errors.New("directory: use ReadDir")}
	}
	b, err := fs.ReadFile(l.fsys, name)
	if err != nil {
		return nil, err
	}
	return &memFile{Reader: bytes.NewReader(b), info: fi}, nil
}

func (l *lockedFS) ReadFile(name string) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fs.ReadFile(l.fsys, name)
}

func (l *lockedFS) Stat(name string) (fs.FileInfo, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fs.Stat(l.fsys, name)
}

func (l *lockedFS) ReadDir(name string) ([]fs.DirEntry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	es, err := fs.ReadDir(l.fsys, name)
	for i, e := range es {
		es[i] = lockedEntry{DirEntry: e, mu: l.mu}
	}
	return es, err
}

// lockedEntry is a DirEntry whose Info takes the tree's lock.
type lockedEntry struct {
	fs.DirEntry
	mu *gosync.Mutex
}

func (e lockedEntry) Info() (fs.FileInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.DirEntry.Info()
}

// memFile is a file read into memory.
type memFile struct {
	*bytes.Reader
	info fs.FileInfo
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *memFile) Close() error               { return nil }

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
