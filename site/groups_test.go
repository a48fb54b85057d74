package site

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"path/filepath"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/statetest"
)

// TestGroups drills down from a big root's graph: each kind box opens the
// root's groups (and links its kind's list); the groups are the
// functional domains (each named after its transit gateway, with counts
// by phase), a domain too big to draw lists its teams as subgroups of
// three resources, and a domain small enough is drawn node by node.
func TestGroups(t *testing.T) {
	tests := []struct {
		name       string
		graphNodes int
		wantSubs   bool
	}{
		{"domains cut into teams", 40, true}, // a domain: 1 tgw, 1 host, 3×30 team resources
		{"domains drawn whole", 100, false},  // the root's 277 resources still need groups
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := statetest.Open(t)
			fill(t, s, 3, 30)
			dir := filepath.Join(t.TempDir(), "site")
			if _, err := Build(context.Background(), s, dir, Options{Now: fixedNow, GraphNodes: tc.graphNodes, PageSize: 10}); err != nil {
				t.Fatal(err)
			}
			files := readSite(t, dir)
			checkLinks(t, files)
			root := converge.ID("classicbom/classic")
			if !bytes.Contains(files[GraphPath(root)], []byte(`href="../../`+GroupsPath(root, 1)+`"`)) {
				t.Error("the kind graph does not link the root's groups")
			}
			// Each kind box opens the groups; its "list" corner, the kind.
			for _, k := range []string{"account", "vpc", "route", "tgw"} {
				box := `<a href="../../` + GroupsPath(root, 1) + `" target="_top"><g><title>` + k + `: `
				if !bytes.Contains(files[GraphPath(root)], []byte(box)) {
					t.Errorf("the %s box of the kind graph does not open the root's groups", k)
				}
				list := `<a href="../../` + listKey{Kind: k}.path(1) + `" target="_top"><title>every ` + k + `</title>`
				if !bytes.Contains(files[GraphPath(root)], []byte(list)) {
					t.Errorf("the %s box of the kind graph does not link the list of %s", k, k)
				}
			}
			list := files[GroupsPath(root, 1)]
			if !bytes.Contains(list, []byte("3 groups: the parts of its 276 resources")) {
				t.Errorf("groups page does not count 3 groups of 276 resources:\n%s", list)
			}
			for d := range 3 {
				hub := converge.ID(fmt.Sprintf("tgw/fd%d-tgw", d))
				if !bytes.Contains(list, []byte(`<a href="../../`+groupPath(root, hub, 1)+`">`+string(hub)+` (92)</a>`)) {
					t.Errorf("groups page does not link the group of %s with its 92 resources", hub)
				}
				page := files[groupPath(root, hub, 1)]
				_, hasSVG := files[groupGraphPath(root, hub)]
				if hasSVG == tc.wantSubs {
					t.Errorf("group %s drawn = %v, want %v", hub, hasSVG, !tc.wantSubs)
				}
				if !tc.wantSubs {
					continue
				}
				if !bytes.Contains(page, []byte("and 31 subgroups that depend on it")) {
					t.Errorf("group %s does not count its 31 subgroups (30 teams and the host)", hub)
				}
				if _, ok := files[groupPath(root, hub, 4)]; !ok || !bytes.Contains(page, []byte("page 1 of 4")) {
					t.Errorf("group %s: 31 subgroups not on 4 pages of 10", hub)
				}
				team := fmt.Sprintf("fd%d-team0", d)
				want := fmt.Sprintf(`<td>account/%s (3)</td>`, team)
				if !bytes.Contains(page, []byte(want)) {
					t.Errorf("group %s page 1 lacks the subgroup %s", hub, want)
				}
				for _, k := range []string{"account", "vpc", "route"} {
					if !strings.Contains(string(page), `">`+k+"/"+team+"</a>") {
						t.Errorf("subgroup of %s does not link %s/%s", team, k, team)
					}
				}
			}
		})
	}
}

// TestGroupRowsEscapeAsTemplate checks that the hand-written rows of a
// groups page escape labels exactly as html/template, which wrote them
// before, does.
func TestGroupRowsEscapeAsTemplate(t *testing.T) {
	label := "vpc/a+b<c>&'\"\x00é (3)"
	tmpl := template.Must(template.New("").Parse(`{{.}}`))
	var want strings.Builder
	if err := tmpl.Execute(&want, label); err != nil {
		t.Fatal(err)
	}
	if got := tmplEscape.Replace(label); got != want.String() {
		t.Errorf("tmplEscape(%q) = %q, html/template = %q", label, got, want.String())
	}
}
