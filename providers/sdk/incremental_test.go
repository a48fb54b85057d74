package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/convergehq/converge"
)

// groupsProvider composes {"groups":[{"name":G,"members":[M...]}]} into
// a hub per group and per member a child consuming the hub; part key:
// the group's name.
func groupsProvider(crossPart bool) *Provider {
	type group struct {
		Name    string   `json:"name"`
		Members []string `json:"members"`
	}
	composeGroup := func(g group, out *Emitter) error {
		hub := converge.Child{Kind: "hub", KindVersion: 1, Name: g.Name, Spec: json.RawMessage(`{"n":` + fmt.Sprint(len(g.Members)) + `}`)}
		if err := out.Child(hub); err != nil {
			return err
		}
		for _, m := range g.Members {
			if err := out.Child(converge.Child{Kind: "member", KindVersion: 1, Name: g.Name + "-" + m, Spec: json.RawMessage(`{}`)}); err != nil {
				return err
			}
			consumer := converge.NewID("member", g.Name+"-"+m)
			if crossPart {
				consumer = "member/elsewhere"
			}
			if err := out.Edge(converge.Edge{Consumer: consumer, Producer: converge.NewID("hub", g.Name)}); err != nil {
				return err
			}
		}
		return nil
	}
	return &Provider{
		Kind: "groups", Version: 1,
		ComposeStream: func(ctx context.Context, r *Request, out *Emitter) error {
			var doc struct{ Groups []group }
			if err := r.DecodeSpec(&doc); err != nil {
				return Permanent(err)
			}
			for _, g := range doc.Groups {
				if err := composeGroup(g, out); err != nil {
					return err
				}
			}
			return nil
		},
		Parts: func(spec json.RawMessage) ([]Part, error) {
			var doc struct{ Groups []json.RawMessage }
			if err := json.Unmarshal(spec, &doc); err != nil {
				return nil, err
			}
			var parts []Part
			for i, raw := range doc.Groups {
				var g group
				if err := json.Unmarshal(raw, &g); err != nil {
					return nil, err
				}
				parts = append(parts, Part{Key: g.Name, Spec: raw, Index: i})
			}
			return parts, nil
		},
		ComposePart: func(ctx context.Context, r *Request, p Part, out *Emitter) error {
			var g group
			if err := json.Unmarshal(p.Spec, &g); err != nil {
				return Permanent(err)
			}
			return composeGroup(g, out)
		},
	}
}

// TestComposeDelta: only the groups whose JSON changed are composed;
// added, changed and removed children come out, with the edges of the
// ones sent, and the unchanged ones do not.
func TestComposeDelta(t *testing.T) {
	base := json.RawMessage(`{"groups":[{"name":"a","members":["x","y"]},{"name":"b","members":["z"]},{"name":"c","members":["w"]}]}`)
	spec := json.RawMessage(`{"groups":[{"name":"b","members":["z"]},{"name":"a","members":["x","q"]},{"name":"d","members":[]}]}`)
	p := groupsProvider(false)
	r := &Request{Kind: "groups", KindVersion: 1, Name: "g", Spec: spec, BaseSpec: base, BaseRevision: revision()}
	out := &Emitter{ctx: context.Background(), all: &Composition{}}
	delta, err := p.composeParts(context.Background(), r, out)
	if err != nil || !delta {
		t.Fatalf("composeParts = %v, %v; want a delta", delta, err)
	}
	var sent []string
	for _, c := range out.all.Children {
		sent = append(sent, fmt.Sprintf("%s/%s added=%v", c.Kind, c.Name, c.Added))
	}
	// hub/a's spec changed (2 members still: unchanged!), a-q is new,
	// d is a new group; b moved but its JSON is the same.
	want := []string{"member/a-q added=true", "hub/d added=true"}
	if !slices.Equal(sent, want) {
		t.Errorf("children sent = %v, want %v", sent, want)
	}
	if got := fmt.Sprint(out.all.Edges); !strings.Contains(got, "member/a-q hub/a") || len(out.all.Edges) != 1 {
		t.Errorf("edges sent = %v, want only member/a-q's", got)
	}
	slices.Sort(out.removed)
	if got, want := fmt.Sprint(out.removed), "[hub/c member/a-y member/c-w]"; got != want {
		t.Errorf("removed = %v, want %v", got, want)
	}
}

// TestComposeDeltaRefusesCrossPartEdges: an edge whose consumer is not a
// child of the part that emits it breaks the part contract (a delta
// could not carry it); the compose fails permanently, naming the part.
func TestComposeDeltaRefusesCrossPartEdges(t *testing.T) {
	base := json.RawMessage(`{"groups":[{"name":"a","members":["x"]}]}`)
	spec := json.RawMessage(`{"groups":[{"name":"a","members":["x","y"]}]}`)
	p := groupsProvider(true)
	r := &Request{Kind: "groups", KindVersion: 1, Name: "g", Spec: spec, BaseSpec: base, BaseRevision: revision()}
	out := &Emitter{ctx: context.Background(), all: &Composition{}}
	_, err := p.composeParts(context.Background(), r, out)
	if err == nil || !strings.Contains(err.Error(), `part "a"`) || OutcomeOf(err) != converge.OutcomePermanent {
		t.Fatalf("err = %v, want a permanent error naming part \"a\"", err)
	}
}

// TestComposeStreamFallsBackToFull: a base of another revision, or a
// control plane that takes no parts, gets the whole composition.
func TestComposeStreamFallsBackToFull(t *testing.T) {
	spec := json.RawMessage(`{"groups":[{"name":"a","members":["x"]}]}`)
	p := groupsProvider(false)
	r := &Request{Kind: "groups", KindVersion: 1, Name: "g", Spec: spec, BaseSpec: spec, BaseRevision: "exe-other"}
	out := &Emitter{ctx: context.Background(), all: &Composition{}}
	if err := p.composeStream(context.Background(), r, out); err != nil {
		t.Fatal(err)
	}
	if out.delta || len(out.all.Children) != 2 {
		t.Errorf("delta=%v, %d children; want the full composition of 2", out.delta, len(out.all.Children))
	}
	if revision() == "" || !strings.HasPrefix(revision(), "go-") && !strings.HasPrefix(revision(), "exe-") {
		t.Errorf("revision() = %q, want the test binary's build ID or digest", revision())
	}
}

// TestGoBuildID reads the test binary's build ID as the go command
// prints it, and reads none from a file that is not an executable.
func TestGoBuildID(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the build ID is read from ELF executables; elsewhere the executable is digested")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "buildid", exe).Output()
	if err != nil {
		t.Fatalf("go tool buildid: %v", err)
	}
	if got, want := goBuildID(exe), strings.TrimSpace(string(out)); got != want {
		t.Errorf("goBuildID = %q, want %q", got, want)
	}
	if got, want := revision(), "go-"+strings.TrimSpace(string(out)); got != want {
		t.Errorf("revision() = %q, want %q", got, want)
	}
	other := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := goBuildID(other); got != "" {
		t.Errorf("goBuildID(a script) = %q, want none", got)
	}
}
