package main

import (
	"fmt"
	"strings"
	gosync "sync"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/convergehq/converge/sync/forge/forgetest"
)

// forgeFakes are the fake forges scenarios started, by script and name.
var forgeFakes gosync.Map // map[forgeFakeKey]*forgetest.Server

type forgeFakeKey struct {
	ts   *testscript.TestScript
	name string
}

// cmdForgeFake starts a fake forge (forgetest) for the rest of the
// script: forge-fake github|gitea|gitlab NAME sets $NAME_URL to its root
// and $CONVERGE_FORGE_TOKEN to the token it takes; $NAME_REPO is the
// repository (OWNER/NAME, or GitLab's project path) it serves.
func cmdForgeFake(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: forge-fake github|gitea|gitlab NAME")
	}
	var f *forgetest.Server
	repo := forgetest.Owner + "/" + forgetest.Repo
	switch args[0] {
	case "github", "gitea":
		f = &forgetest.StartGitHub(args[0] == "gitea").Server
	case "gitlab":
		f, repo = &forgetest.StartGitLab().Server, forgetest.Project
	default:
		ts.Fatalf("forge-fake: unknown forge %q", args[0])
	}
	ts.Defer(f.Close)
	forgeFakes.Store(forgeFakeKey{ts, args[1]}, f)
	ts.Setenv(args[1]+"_URL", f.URL())
	ts.Setenv(args[1]+"_REPO", repo)
	ts.Setenv(forgeTokenEnv, forgetest.Token)
}

// cmdForgeComments prints the comments fake NAME keeps, oldest first,
// each as "#PR id N: BODY" with the body's lines joined by " | ", then
// what it refused ("refused: …").
func cmdForgeComments(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: forge-comments NAME")
	}
	v, ok := forgeFakes.Load(forgeFakeKey{ts, args[0]})
	if !ok {
		ts.Fatalf("forge-comments: no fake %q", args[0])
	}
	f := v.(*forgetest.Server)
	for _, c := range f.Comments() {
		fmt.Fprintf(ts.Stdout(), "#%d id %d: %s\n", c.PR, c.ID, strings.ReplaceAll(c.Body, "\n", " | "))
	}
	for _, r := range f.Refusals() {
		fmt.Fprintf(ts.Stdout(), "refused: %s\n", r)
	}
}
