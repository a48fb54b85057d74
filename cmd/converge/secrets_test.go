package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/sync/forge/forgetest"
	"github.com/convergehq/converge/sync/gittest"

	gitsync "github.com/convergehq/converge/sync"
)

// The secrets planted by TestSecretsNeverShown: each appears in the
// repository (or the environment) and nowhere converge writes.
const (
	// plantedPassword is vpc/sample-vpc-v2's valid spec.password.
	plantedPassword = "qzvplantedpwxk"
	// plantedBad and plantedBadServe are invalid spec.password values of
	// two later commits: sync judges the first, serve the second.
	plantedBad      = "PLANTED-Bad-Pw-6a1f"
	plantedBadServe = "PLANTED-Serve-Pw-93c2"
	// plantedBucket is provider config vpc-v2-payments' flow_logs_bucket,
	// which the enable_flow_logs verb echoes into the vpc's status.
	plantedBucket = "planted-bucket-5d7e"
	// The daemon's credentials, which no worker may see.
	plantedWebhook = "planted-webhook-secret-0b4d"
	plantedToken   = "planted-worker-token-c81a"
)

// secretVPCKind is examples/classic's vpc/v2 with a secret password and a
// secret config bucket. status.flow_logs.bucket is deliberately not
// marked: the worker echoes the config's secret bucket into it.
const secretVPCKind = `type:         "kind"
kind:         "vpc"
kind_version: 2
reactions: ["reconcile", "teardown", "enable_flow_logs"]
finalizer:    true
spec: {
	account_id: =~"^.{12}$"
	cidr:       string
	region:     string
	password?:  =~"^[a-z]+$" @converge(secret)
	tags?: [string]: string
}
status: {
	vpc_id?: string
	region?: string
	flow_logs?: {enabled: bool, bucket: string}
}
config: {
	flow_logs_bucket: string @converge(secret)
	default_region:   string
}
`

func secretVPC(password string) string {
	return `type:         "resource"
kind:         "vpc"
kind_version: 2
name:         "sample-vpc-v2"
provider_config_ref: "vpc-v2-payments"
spec: {
	account_id: "123456789012"
	cidr:       "10.2.0.0/16"
	region:     "us-west-2"
	password:   "` + password + `"
}
`
}

// TestSecretsNeverShown plants secret values in a repository (a secret
// spec field, valid and invalid, and a provider config's secret bucket
// that a worker echoes into a status) and the daemon's credentials in its
// environment, runs every command over it — validate, lint in every
// format, plan, sync with a forge, do, serve with a forge, a webhook and
// its live site, get, list, tree, events, status, site build — and scans
// everything converge wrote: every command's output, serve's log and its
// workers' output, the git notes, the statuses the fake forge received,
// every file of the built site, every page of the live site, and the
// environment of every worker serve started.
func TestSecretsNeverShown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real workers, a daemon and a forge fake (~10 s)")
	}
	repo, c0 := classicRepo(t)
	// The default state: the one that owns the repository's git notes.
	stateDir := filepath.Join(repo, ".converge")
	if err := os.WriteFile(filepath.Join(repo, ".git", "info", "exclude"), []byte(".converge/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(rel, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(repo, rel), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(msg string) string {
		gittest.Run(t, repo, "add", "-A")
		gittest.Run(t, repo, "commit", "-q", "-m", msg)
		return gittest.Run(t, repo, "rev-parse", "HEAD")
	}
	cfg, err := os.ReadFile(filepath.Join(repo, "configs", "vpc.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	old := "flow_logs_bucket: flow-logs-payments\n  default_region: eu-west-1"
	if !bytes.Contains(cfg, []byte(old)) {
		t.Fatalf("configs/vpc.yaml changed: no %q", old)
	}
	write("configs/vpc.yaml", strings.Replace(string(cfg), old, "flow_logs_bucket: "+plantedBucket+"\n  default_region: eu-west-1", 1))
	write("kinds/vpc-v2.cue", secretVPCKind)
	// An account's id is secret too: a value flow copies it into its
	// vpc's spec, whose field is not marked.
	acct, err := os.ReadFile(filepath.Join(repo, "kinds", "account.cue"))
	if err != nil {
		t.Fatal(err)
	}
	if old := `status: account_id?: =~"^.{12}$"`; !bytes.Contains(acct, []byte(old)) {
		t.Fatalf("kinds/account.cue changed: no %q", old)
	}
	write("kinds/account.cue", strings.Replace(string(acct), `status: account_id?: =~"^.{12}$"`, `status: account_id?: =~"^.{12}$" @converge(secret)`, 1))
	write("resources/vpc-v2.cue", secretVPC(plantedPassword))
	c1 := commit("a secret password and bucket")

	gh := forgetest.NewGitHub(t, false)
	t.Setenv(forgeTokenEnv, forgetest.Token)
	t.Setenv("CONVERGE_WEBHOOK_SECRET", plantedWebhook)
	t.Setenv("CONVERGE_WORKER_TOKEN", plantedToken)
	forgeArgs := []string{"--forge", "github", "--forge-url", gh.URL(), "--forge-repo", forgetest.Owner + "/" + forgetest.Repo}

	// outputs collects every channel: name → what it held.
	outputs := map[string]string{}
	run := func(name string, wantErr bool, args ...string) string {
		t.Helper()
		out, err := runCLI(append([]string{"--repo", repo}, args...)...)
		if (err != nil) != wantErr {
			t.Fatalf("%s: err %v, want error %v\n%s", name, err, wantErr, out)
		}
		if err != nil {
			out += "\n" + err.Error()
		}
		outputs[name] = out
		return out
	}

	// plan shows a created resource's spec: the password as (secret).
	for _, format := range []string{"table", "json"} {
		if out := run("plan c1 "+format, false, "plan", "-o", format); !regexp.MustCompile(`\+ password: "\(secret\)"|"path": "password",\s+"new": "\(secret\)",\s+"secret": true`).MatchString(out) {
			t.Errorf("plan -o %s does not show the password as (secret):\n%s", format, out)
		}
	}
	run("sync c1", false, append([]string{"sync", "--timeout", "2m"}, forgeArgs...)...)
	run("do enable_flow_logs", false, "do", "vpc/sample-vpc-v2", "enable_flow_logs")
	get := run("get c1 -o json", false, "get", "vpc/sample-vpc-v2", "-o", "json")
	// Not vacuous: the fields are there, redacted, and the echo happened.
	for _, want := range []string{`"password": "(secret)"`, `"bucket": "(secret)"`} {
		if !strings.Contains(get, want) {
			t.Errorf("get -o json lacks %s:\n%s", want, get)
		}
	}

	write("resources/vpc-v2.cue", secretVPC(plantedBad))
	c2 := commit("an invalid secret password")
	if out := run("validate", true, "validate"); !strings.Contains(out, "spec.password: invalid value (secret)") {
		t.Errorf("validate does not name the invalid field:\n%s", out)
	}
	for _, format := range []string{"text", "json", "github"} {
		run("lint "+format, true, "lint", "--base", c0, "--head", c2, "-o", format)
	}
	run("plan", true, "plan")
	run("sync c2", true, append([]string{"sync", "--timeout", "1m"}, forgeArgs...)...)

	// serve, with the daemon's credentials in its environment.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var serveOut lockedBuffer
	done := make(chan error, 1)
	go func() {
		c := newRoot(&globals{})
		c.SetArgs(append([]string{"--repo", repo, "serve", "-v", "--listen", "127.0.0.1:0",
			"--workers-listen", "127.0.0.1:0", "--insecure", "--poll", "1h"}, forgeArgs...))
		c.SetOut(&serveOut)
		c.SetErr(&serveOut)
		done <- c.ExecuteContext(ctx)
	}()
	defer func() {
		if t.Failed() {
			t.Logf("serve:\n%s\nforge: %v refused %v", serveOut.String(), gh.Statuses(), gh.Refusals())
		}
	}()
	var addr string
	waitFor(t, "serve's HTTP address", func() bool {
		b, err := os.ReadFile(filepath.Join(stateDir, "http.addr"))
		addr = strings.TrimSpace(string(b))
		return err == nil && addr != ""
	})
	write("resources/vpc-v2.cue", secretVPC(plantedBadServe))
	c3 := commit("another invalid secret password")
	body := []byte(`{"ref":"refs/heads/main"}`)
	req, err := http.NewRequest("POST", "http://"+addr+"/hooks/git", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Hub-Signature-256", gitsync.Sign([]byte(plantedWebhook), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("webhook: %s", resp.Status)
	}
	waitFor(t, "serve's verdict on the third commit, on the forge", func() bool {
		for _, p := range gh.Statuses() {
			if p.SHA == c3 && p.State == "failure" {
				return true
			}
		}
		return false
	})
	// The read commands, answered by the daemon.
	for _, o := range []string{"json", "yaml", "table"} {
		run("get (daemon) -o "+o, false, "get", "vpc/sample-vpc-v2", "-o", o)
	}
	run("list (daemon)", false, "list", "--all", "-o", "json")
	run("get vpc (daemon)", false, "get", "vpc/fd-00-team-000", "-o", "json")
	run("events (daemon)", false, "events", "-o", "json")
	run("tree (daemon)", false, "tree", "vpc/sample-vpc-v2")
	live := crawl(t, "http://"+addr+"/")
	for page, text := range live {
		outputs["live site "+page] = text
	}
	if !strings.Contains(strings.Join(mapValues(live), "\n"), c3[:12]) {
		t.Errorf("the live site never shows the third commit: the crawl is not looking at the verdicts")
	}
	if runtime.GOOS == "linux" {
		outputs["worker environments"] = workerEnvirons(t, stateDir)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, serveOut.String())
	}
	outputs["serve log"] = serveOut.String()

	// After serve: the store's answers, the notes, the built site, the forge.
	for _, o := range []string{"json", "yaml", "table", "wide"} {
		run("get -o "+o, false, "get", "vpc/sample-vpc-v2", "-o", o)
		run("get account -o "+o, false, "get", "account/fd-00-team-000", "-o", o)
		run("get vpc -o "+o, false, "get", "vpc/fd-00-team-000", "-o", o)
		run("get several -o "+o, false, "get", "vpc/sample-vpc-v2", "vpc/fd-00-team-000", "-o", o)
		run("get KIND -o "+o, false, "get", "vpc", "-o", o)
	}
	run("events", false, "events")
	run("list", false, "list", "--all", "-o", "yaml")
	if out := run("get vpc", false, "get", "vpc/fd-00-team-000", "-o", "json"); !strings.Contains(out, `"account_id": "(secret)"`) {
		t.Errorf("get of a vpc does not hide the account id flowed into its spec:\n%s", out)
	}
	run("events vpc", false, "events", "vpc/sample-vpc-v2", "-o", "json")
	for i, h := range []string{c1, c2, c3} {
		run(fmt.Sprintf("status c%d", i+1), i > 0, "status", "-o", "json", h)
	}
	outputs["git notes"] = gittest.Run(t, repo, "log", "-p", "refs/notes/converge")
	if !strings.Contains(outputs["git notes"], "spec.password: invalid value (secret)") {
		t.Errorf("the git notes lack the redacted finding:\n%s", outputs["git notes"])
	}
	siteDir := filepath.Join(t.TempDir(), "site")
	run("site build", false, "site", "build", "--out", siteDir)
	for name, b := range siteFiles(t, siteDir) {
		outputs["site file "+name] = string(b)
	}
	var forged []string
	for _, p := range gh.Statuses() {
		forged = append(forged, fmt.Sprintf("%s %s %s: %s %s", p.SHA, p.Context, p.State, p.Description, p.TargetURL))
	}
	outputs["forge statuses"] = strings.Join(forged, "\n")
	if !strings.Contains(outputs["forge statuses"], c2+" converge/validate failure") {
		t.Errorf("the forge never got sync's validate failure:\n%s", outputs["forge statuses"])
	}

	planted := []string{plantedPassword, plantedBad, plantedBadServe, plantedBucket, plantedWebhook, plantedToken}
	// The account ids the workers made, from the store itself.
	st, err := state.Open(stateDir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	accounts, err := st.Resources(ctx, state.Filter{Kind: "account"})
	st.Close()
	if err != nil || len(accounts) < 2 {
		t.Fatalf("accounts: %v, %v", accounts, err)
	}
	for _, a := range accounts {
		var s struct {
			AccountID string `json:"account_id"`
		}
		if err := json.Unmarshal(a.Status, &s); err != nil || len(s.AccountID) != 12 {
			t.Fatalf("account %s status %s: %v", a.ID(), a.Status, err)
		}
		planted = append(planted, s.AccountID)
	}
	for name, text := range outputs {
		for _, s := range planted {
			if i := strings.Index(text, s); i >= 0 {
				t.Errorf("%s shows the secret %q: …%s…", name, s, text[max(0, i-200):min(len(text), i+len(s)+100)])
			}
		}
	}
	t.Logf("scanned %d outputs for %d planted secrets", len(outputs), len(planted))
}

// crawl fetches root and every page of the same site it links to,
// returning path → body.
func crawl(t *testing.T, root string) map[string]string {
	t.Helper()
	base, err := url.Parse(root)
	if err != nil {
		t.Fatal(err)
	}
	href := regexp.MustCompile(`(?:href|src)="([^"#]+)`)
	seen := map[string]string{}
	queue := []string{base.String(), base.ResolveReference(&url.URL{Path: "summary.json"}).String()}
	for len(queue) > 0 && len(seen) < 2000 {
		u := queue[0]
		queue = queue[1:]
		pu, _ := url.Parse(u)
		if _, ok := seen[pu.Path]; ok {
			continue
		}
		resp, err := http.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		seen[pu.Path] = resp.Status + "\n" + string(b)
		for _, m := range href.FindAllStringSubmatch(string(b), -1) {
			ref, err := url.Parse(m[1])
			if err != nil {
				continue
			}
			next := pu.ResolveReference(ref)
			if next.Host == base.Host {
				next.RawQuery, next.Fragment = "", ""
				queue = append(queue, next.String())
			}
		}
	}
	if len(seen) < 5 {
		t.Fatalf("the live site has %d pages: %v", len(seen), seen)
	}
	return seen
}

// workerEnvirons returns the environment of every worker process serve
// started (their pids are in STATE/workers/NAME.pid), one per line.
func workerEnvirons(t *testing.T, stateDir string) string {
	t.Helper()
	pids, err := filepath.Glob(filepath.Join(stateDir, "workers", "*.pid"))
	if err != nil || len(pids) == 0 {
		t.Fatalf("no worker pid files in %s: %v", stateDir, err)
	}
	var b strings.Builder
	for _, f := range pids {
		s, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(s)))
		if err != nil {
			t.Fatal(err)
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			t.Fatalf("worker %s: %v", f, err)
		}
		if !bytes.Contains(env, []byte("CONVERGE_WORKER_NAME=")) {
			t.Fatalf("pid %d (%s) is not a worker: %q", pid, f, env)
		}
		fmt.Fprintf(&b, "%s: %s\n", filepath.Base(f), bytes.ReplaceAll(env, []byte{0}, []byte(" ")))
	}
	return b.String()
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
