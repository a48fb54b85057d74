package site

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/statetest"
)

func TestGraph(t *testing.T) {
	tests := []struct {
		name           string
		domains, teams int
		wantFull       bool
		wantMaxBytes   int
	}{
		{"one team drawn node by node", 1, 1, true, 10 << 10},
		{"small BOM drawn node by node", 1, 6, true, 40 << 10},
		{"classic BOM summarized by kind", 4, 303, false, 12 << 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := statetest.Open(t)
			fill(t, s, tc.domains, tc.teams)
			dir := filepath.Join(t.TempDir(), "site")
			if _, err := Build(context.Background(), s, dir, Options{Now: fixedNow}); err != nil {
				t.Fatal(err)
			}
			files := readSite(t, dir)
			svg := files[GraphPath("classicbom/classic")]
			if !bytes.HasPrefix(svg, []byte("<svg")) {
				t.Fatalf("no SVG graph for the root")
			}
			if got, max := len(svg), tc.wantMaxBytes; got > max {
				t.Errorf("SVG is %d bytes, want at most %d", got, max)
			}
			kids, err := s.Children(context.Background(), "classicbom/classic")
			if err != nil {
				t.Fatal(err)
			}
			links := 0
			for _, id := range kids {
				if bytes.Contains(svg, []byte(`href="../../`+ResourcePath(id)+`"`)) {
					links++
				}
			}
			if tc.wantFull {
				if got, want := links, len(kids); got != want {
					t.Errorf("graph links %d children, want all %d", got, want)
				}
				// One arrow per edge inside the subtree.
				edges := 0
				for _, id := range kids {
					c, _, err := s.EdgesOf(context.Background(), id)
					if err != nil {
						t.Fatal(err)
					}
					edges += len(c)
				}
				if got, want := bytes.Count(svg, []byte("<line ")), edges; got != want {
					t.Errorf("graph has %d edges, want %d", got, want)
				}
				return
			}
			if links != 0 {
				t.Errorf("summarized graph links %d resources, want kind boxes only", links)
			}
			for _, k := range []string{"account", "vpc", "route", "tgw"} {
				if !bytes.Contains(svg, []byte(`href="../../kinds/`+k+`.html"`)) {
					t.Errorf("summarized graph lacks a box for %s", k)
				}
			}
			if want := fmt.Sprintf("vpc — %d", tc.domains*tc.teams); !bytes.Contains(svg, []byte(want)) {
				t.Errorf("summarized graph lacks %q", want)
			}
			if !regexp.MustCompile(`<title>\d+ edges: vpc → route</title>`).Match(svg) {
				t.Errorf("summarized graph lacks the vpc → route edge count")
			}
		})
	}
}

func TestLayersOrderByDependency(t *testing.T) {
	deps := map[string][]string{
		"route": {"vpc", "tgw"}, "vpc": {"account"}, "tgw": {"host"}, "cycle-a": {"cycle-b"}, "cycle-b": {"cycle-a"},
	}
	ls := layers([]string{"route", "vpc", "account", "tgw", "host", "cycle-a", "cycle-b"},
		func(n string) []string { return deps[n] })
	depth := make(map[string]int)
	for i, l := range ls {
		for _, n := range l {
			depth[n] = i
		}
	}
	for n, ds := range deps {
		for _, d := range ds {
			if strings.HasPrefix(n, "cycle") {
				continue
			}
			if depth[d] >= depth[n] {
				t.Errorf("%s (layer %d) depends on %s (layer %d): want it in an earlier layer", n, depth[n], d, depth[d])
			}
		}
	}
	if len(depth) != 7 {
		t.Errorf("layers hold %d nodes, want 7", len(depth))
	}
}

// TestPhaseColors checks the graph fills each phase as the pages' badges
// do (site.css), so the colors TestContrast checks are the graph's too.
func TestPhaseColors(t *testing.T) {
	rules := cssRules(t)
	for _, ph := range []converge.Phase{converge.PhaseReady, converge.PhaseFailed, converge.PhasePending, converge.PhaseRunning, converge.PhaseDeleting} {
		want := rules[".ph-"+strings.ToLower(string(ph))+".phase"]["background"]
		if got := colorOf(ph); got != want {
			t.Errorf("colorOf(%s) = %s, want the badge's %q", ph, got, want)
		}
	}
}
