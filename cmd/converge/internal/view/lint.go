package view

import (
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/convergehq/converge"
	gitsync "github.com/convergehq/converge/sync"
)

// LintFinding is one finding of `converge lint -o json`: the stable
// Finding fields plus the commit it was found on ("<base>..<head>" for the
// range as a whole).
type LintFinding struct {
	converge.Finding
	Commit string `json:"commit"`
}

// Lint is the JSON of `converge lint -o json` (see "Stable JSON
// output" in docs/ARCHITECTURE.md): add fields freely, never rename these.
type Lint struct {
	Findings []LintFinding `json:"findings"`
	// Commits counts the commits linted (base excluded).
	Commits int `json:"commits"`
	// Breaking counts the commits with findings.
	Breaking int `json:"breaking"`
}

// WriteLint prints lint's findings in format: json (Lint), github (workflow
// commands that annotate the files, their paths below sub) or text; and
// the verdict line.
func WriteLint(w io.Writer, format, sub string, groups []gitsync.LintGroup, commits int) error {
	breaking, total := 0, 0
	for _, g := range groups {
		if len(g.Findings) > 0 && !g.Range {
			breaking++
		}
		total += len(g.Findings)
	}
	switch format {
	case "json":
		rep := Lint{Findings: []LintFinding{}, Commits: commits, Breaking: breaking}
		for _, g := range groups {
			for _, f := range g.Findings {
				rep.Findings = append(rep.Findings, LintFinding{Finding: f, Commit: g.ID})
			}
		}
		return WriteData(w, "json", rep)
	case "github":
		sub = strings.Trim(path.Clean("/"+strings.ReplaceAll(sub, `\`, "/")), "/")
		for _, g := range groups {
			for _, f := range g.Findings {
				file := f.File
				if sub != "" && file != "" {
					file = sub + "/" + file
				}
				fmt.Fprintf(w, "::error file=%s,line=%d,col=%d,title=%s::%s\n",
					ghProperty(file), max(f.Line, 1), max(f.Column, 1), ghProperty(f.Rule), ghData(g.Header+": "+lintMessage(f)))
			}
		}
	default:
		for _, g := range groups {
			if len(g.Findings) == 0 {
				continue
			}
			fmt.Fprintf(w, "%s:\n", g.Header)
			for _, f := range g.Findings {
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
		verdict = fmt.Sprintf("%d breaking, %s", breaking, converge.Plural(total, "finding"))
	}
	_, err := fmt.Fprintf(w, "%s linted: %s\n", converge.Plural(commits, "commit"), verdict)
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
