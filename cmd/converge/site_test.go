package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/site"
	"github.com/convergehq/converge/state"
)

// TestSiteBuildCommand runs `converge --state DIR site build --out OUT`
// in-process against a real store and checks what it wrote.
func TestSiteBuildCommand(t *testing.T) {
	stateDir := t.TempDir()
	st, err := state.Open(stateDir, state.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	b := &converge.Batch{Resources: []*converge.Resource{
		{Kind: "classicbom", KindVersion: 1, Name: "classic", Phase: converge.PhaseReady, Spec: json.RawMessage(`{}`)},
		{Kind: "vpc", KindVersion: 1, Name: "team-a", Owner: "classicbom/classic", Phase: converge.PhaseReady, Spec: json.RawMessage(`{}`)},
		{Kind: "vpc", KindVersion: 1, Name: "team-b", Owner: "classicbom/classic", Phase: converge.PhaseFailed, Reason: "<script>x</script>", Spec: json.RawMessage(`{}`)},
	}}
	if err := st.Commit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "site")
	tests := []struct {
		name      string
		args      []string
		wantUsage bool
		wantOut   string
	}{
		{name: "build", args: []string{"--state", stateDir, "site", "build", "--out", out}, wantOut: "for 3 resources to " + out + " in "},
		{name: "largest", args: []string{"--state", stateDir, "site", "build", "--out", out}, wantOut: "; largest assets/site.js ("}, // of 3 resources, the script (with the actions panel) is the largest file
		{name: "rebuild", args: []string{"--state", stateDir, "site", "build", "--out", out}, wantOut: "for 3 resources"},
		{name: "no out", args: []string{"--state", stateDir, "site", "build"}, wantUsage: true},
		{name: "foreign dir", args: []string{"--state", stateDir, "site", "build", "--out", stateDir}, wantUsage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newRootCommand()
			var buf bytes.Buffer
			c.SetArgs(tt.args)
			c.SetOut(&buf)
			c.SetErr(&buf)
			err := c.Execute()
			if got, want := err != nil, tt.wantUsage; got != want {
				t.Fatalf("error = %v, want error %v", err, want)
			}
			if tt.wantUsage && errors.As(err, new(errFailed)) {
				t.Errorf("err %v is exit 1, want a usage error", err)
			}
			if !strings.Contains(buf.String(), tt.wantOut) {
				t.Errorf("output %q lacks %q", buf.String(), tt.wantOut)
			}
		})
	}
	raw, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum site.Summary
	if err := json.Unmarshal(raw, &sum); err != nil {
		t.Fatal(err)
	}
	if got, want := sum.Counts, (converge.Counts{Total: 3, Ready: 2, Failed: 1}); got != want {
		t.Errorf("summary counts = %+v, want %+v", got, want)
	}
	file, frag, _ := strings.Cut(site.ResourcePath("vpc/team-b"), "#")
	page, err := os.ReadFile(filepath.Join(out, file))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(page, []byte(`id="`+frag+`"`)) {
		t.Errorf("%s has no section %s", file, frag)
	}
	if bytes.Contains(page, []byte("<script>x")) {
		t.Error("reason rendered unescaped")
	}
}
