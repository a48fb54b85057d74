package sync

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/sync/gittest"
)

// lintRange lints base..HEAD of the repository dir, in this process.
func lintRange(t *testing.T, dir, base string) ([]LintGroup, int) {
	t.Helper()
	src, err := OpenLocal(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	groups, n, err := LintRange(context.Background(), nil, src, "", base, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	return groups, n
}

// TestLintRange walks a real repository's history: an additive commit, a
// breaking one, one whose documents are invalid, and the range as a whole
// against the first commit's parent.
func TestLintRange(t *testing.T) {
	dir := gittest.Repo(t, map[string]string{"kinds/tgw.cue": tgwKind, "resources/a.cue": tgwResource("a")})
	base := gittest.Run(t, dir, "rev-parse", "HEAD")
	commit := func(files map[string]string, msg string) string { return gittest.Commit(t, dir, files, msg) }
	kind := func(spec string) map[string]string {
		return map[string]string{"kinds/tgw.cue": strings.Replace(tgwKind, "spec: name: string", spec, 1)}
	}
	withSize := kind("spec: {name: string, size?: int}")
	withSize["resources/a.cue"] = tgwResource("a") + "spec: size: 1\n"
	additive := commit(withSize, "tgw: optional size")
	breaking := commit(kind("spec: {name: string, size: int}"), "tgw: size required")
	invalid := commit(map[string]string{"resources/b.cue": `type: "resource", kind: "tgw", kind_version: 1, name: "b", spec: {name: 5, size: 1}` + "\n"}, "b: a number for a name")

	groups, n := lintRange(t, dir, base)
	if got, want := n, 3; got != want {
		t.Errorf("commits = %d, want %d", got, want)
	}
	rules := func(g LintGroup) string {
		var rs []string
		for _, f := range g.Findings {
			rs = append(rs, f.Rule)
		}
		return strings.Join(rs, ",")
	}
	tests := []struct {
		header    string
		id        string
		wantRange bool
		wantRules string
	}{
		{header: "commit " + additive[:7] + " tgw: optional size", id: additive, wantRules: ""},
		{header: "commit " + breaking[:7] + " tgw: size required", id: breaking, wantRules: cue.RuleFieldBecameRequired},
		{header: "commit " + invalid[:7] + " b: a number for a name", id: invalid, wantRules: "invalid"},
		{header: "range " + base[:7] + ".." + invalid[:7], id: base[:7] + ".." + invalid[:7], wantRange: true, wantRules: cue.RuleRequiredFieldAdded},
	}
	if len(groups) != len(tests) {
		t.Fatalf("%d groups, want %d: %+v", len(groups), len(tests), groups)
	}
	for i, tt := range tests {
		g := groups[i]
		if g.Header != tt.header || g.ID != tt.id || g.Range != tt.wantRange {
			t.Errorf("group %d = %q %q range %v, want %q %q range %v", i, g.Header, g.ID, g.Range, tt.header, tt.id, tt.wantRange)
		}
		got := rules(g)
		if tt.wantRules == "invalid" {
			// A validation finding, not a lint rule: on the file it is in.
			if len(g.Findings) == 0 || g.Findings[0].File != "resources/b.cue" {
				t.Errorf("group %d findings = %+v, want the invalid document's", i, g.Findings)
			}
			continue
		}
		if got != tt.wantRules {
			t.Errorf("group %d rules = %q, want %q", i, got, tt.wantRules)
		}
	}
}

// TestLintRangeOneCommit: a range of one commit has no range group (it
// would repeat the commit's), and a kind document made invalid is not
// also reported as a removed kind version.
func TestLintRangeOneCommit(t *testing.T) {
	dir := gittest.Repo(t, map[string]string{"kinds/tgw.cue": tgwKind})
	base := gittest.Run(t, dir, "rev-parse", "HEAD")
	if err := os.WriteFile(filepath.Join(dir, "kinds", "tgw.cue"), []byte(tgwKind+"spec: name: int\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Run(t, dir, "commit", "-q", "-a", "-m", "tgw: conflicting name")
	groups, n := lintRange(t, dir, base)
	if n != 1 || len(groups) != 1 {
		t.Fatalf("%d commits, %d groups; want 1 and 1: %+v", n, len(groups), groups)
	}
	if len(groups[0].Findings) == 0 {
		t.Fatal("no findings for an invalid kind document")
	}
	for _, f := range groups[0].Findings {
		if f.Rule == cue.RuleKVRemoved {
			t.Errorf("finding %+v: the kind version is invalid, not removed", f)
		}
	}
}
