package sync

import (
	"fmt"
	"strings"
)

// MarkdownHead is the top of a pull request's plan comment, marker first
// (the forge package's Marker, given as marker: sync does not know the
// forge): the summary, the blast radius (resources changed and torn
// down, per BOM row level, the rows they come from, per kind), the
// breaking-change findings and why sync would hold it. The detail (the
// text of WriteText) goes below it, folded (forge.FitComment).
func (rv *Review) MarkdownHead(marker, base, head string) string {
	var b strings.Builder
	s := rv.Summary
	fmt.Fprintf(&b, "%s\n### converge plan\n\n`%s` → `%s`\n\n", marker, base, head)
	t := s.Totals()
	changed := t.Create + t.Update + t.Flip + t.Delete + t.Prune
	if changed == 0 && len(rv.Definitions) == 0 {
		b.WriteString("**No changes.**\n")
	} else {
		fmt.Fprintf(&b, "**%d to create, %d to update, %d to flip, %d to delete, %d to prune** (tearing down %s of %s resources)\n",
			s.Create, s.Update, s.Flip, s.Delete, s.Prune, Thousands(s.TornDown), Thousands(s.Total))
	}
	b.WriteString("\n#### Blast radius\n\n")
	fmt.Fprintf(&b, "- **%s resources** change; **%s deletions** (%s resources torn down)\n",
		Thousands(changed), Thousands(t.Delete+t.Prune), Thousands(s.TornDown))
	for _, l := range s.Levels {
		fmt.Fprintf(&b, "- **%s %s** of `%s`\n", Thousands(l.Rows), l.Level, l.Owner)
	}
	for _, line := range rv.waveLines() {
		fmt.Fprintf(&b, "- rolled out in %s\n", line)
	}
	if len(s.Rows) > 0 {
		b.WriteString("\n| BOM row | changes |\n|---|---|\n")
		const maxRows = 20
		for i, r := range s.Rows {
			if i == maxRows {
				fmt.Fprintf(&b, "| … | %s more rows (in the detail) |\n", Thousands(len(s.Rows)-maxRows))
				break
			}
			fmt.Fprintf(&b, "| `%s` %s | %s |\n", r.Owner, r.Row, r.ChangeCounts.String())
		}
	}
	if len(s.ByKind) > 0 {
		b.WriteString("\n| kind | changes |\n|---|---|\n")
		for _, k := range s.ByKind {
			fmt.Fprintf(&b, "| %s | %s |\n", k.Kind, k.ChangeCounts.String())
		}
	}
	b.WriteString("\n#### Breaking changes\n\n")
	if len(rv.Breaking) == 0 {
		b.WriteString("None.\n")
	}
	for _, f := range rv.Breaking {
		fmt.Fprintf(&b, "- :x: `%s`\n", f)
	}
	if rv.Held != "" {
		fmt.Fprintf(&b, "\n**sync would not apply it:** %s\n", rv.Held)
	}
	return b.String()
}
