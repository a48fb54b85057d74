package view

import (
	"bytes"
	"testing"

	"github.com/convergehq/converge"
	gitsync "github.com/convergehq/converge/sync"
)

// TestPrintLintGithub checks the workflow-command escaping: a message may
// hold newlines and percent signs, a file name commas and colons, and the
// file is made relative to the repository root with --path.
func TestPrintLintGithub(t *testing.T) {
	groups := []gitsync.LintGroup{{Header: "commit abc1234 subject", ID: "abc1234", Findings: []converge.Finding{
		{File: "kinds/a,b:c.cue", Line: 3, Column: 2, Path: "vpc/v1 spec.a", Rule: "TYPE_CHANGED", Message: "vpc/v1 spec.a: 100% changed\nsecond line"},
		{File: "r.yaml", Rule: "SYNTAX", Message: "bad"},
	}}}
	tests := []struct {
		name, sub string
		want      string
	}{
		{name: "root", sub: "", want: "::error file=kinds/a%2Cb%3Ac.cue,line=3,col=2,title=TYPE_CHANGED::commit abc1234 subject: vpc/v1 spec.a: 100%25 changed%0Asecond line\n" +
			"::error file=r.yaml,line=1,col=1,title=SYNTAX::commit abc1234 subject: bad\n" +
			"1 commit linted: 1 breaking, 2 findings\n"},
		{name: "below --path", sub: "./platform/", want: "::error file=platform/kinds/a%2Cb%3Ac.cue,line=3,col=2,title=TYPE_CHANGED::commit abc1234 subject: vpc/v1 spec.a: 100%25 changed%0Asecond line\n" +
			"::error file=platform/r.yaml,line=1,col=1,title=SYNTAX::commit abc1234 subject: bad\n" +
			"1 commit linted: 1 breaking, 2 findings\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := WriteLint(&out, "github", tt.sub, groups, 1); err != nil {
				t.Fatal(err)
			}
			if got, want := out.String(), tt.want; got != want {
				t.Errorf("output:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}
