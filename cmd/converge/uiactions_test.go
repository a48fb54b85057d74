package main

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/ops"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/site"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/sync/controlplane"
)

const testUIToken = "correct-horse-battery-staple"

// TestUIActions runs serve's HTTP side as serve does (startHTTP with
// --ui-actions, the live site of a real engine that converged the classic
// example with its worker processes, teardowns slowed to 2 s, longer than a page takes to notice a change) and, in
// headless Chromium, opens the pages of a route, the vpc it consumes and
// the account that vpc consumes; signs in on the account's page with the
// login token, deletes the account from its panel, confirms by typing its
// id, and watches each open page say its resource was deleted: route,
// then vpc, then account. Over plain HTTP it checks what is refused: a
// wrong token, no session, no or a wrong CSRF token, another origin, an
// unconfirmed action; and that without --ui-actions the site is
// read-only (no panel, no endpoints). A node of the root's graph opens
// the resource's page with its panel, and a verb run from a vpc's panel
// reaches its worker.
func TestUIActions(t *testing.T) {
	chromiumBin(t) // skip early without Chromium
	t.Setenv("FAKE_DELETE_DELAY", "2s")
	repo, loaded, workers := smallClassic(t)
	desired := &loaded.Desired
	stateDir := t.TempDir()
	var logs bytes.Buffer
	live := site.NewLive(filepath.Join(stateDir, "site"), site.LiveOptions{Site: site.Options{Title: "converge"}, Log: &logs})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := startEngine(ctx, controlplane.Options{StateDir: stateDir, RepoDir: repo, Workers: workers, Log: quiet, Changed: live.Changed})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Close(); err != nil {
			t.Errorf("close engine: %v", err)
		}
	}()
	live.Attach(e.Store())
	siteDone := make(chan struct{})
	go func() { live.Run(ctx); close(siteDone) }()
	defer func() { cancel(); <-siteDone }()
	waitFor(t, "the classic worker", func() bool { return len(e.Server().Workers()) >= controlplane.ExpectedWorkers(workers) })
	if _, err := e.Scheduler().Apply(ctx, desired, loaded.Schemas); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the example to converge", func() bool { return e.Scheduler().Progress().Settled == scheduler.Converged })
	if err := e.Scheduler().Flush(ctx); err != nil {
		t.Fatal(err)
	}
	live.Update(ctx)

	// A route, the vpc it consumes, the account that vpc consumes.
	producer := func(id converge.ID, kind string) converge.ID {
		t.Helper()
		consumes, _, err := e.Store().EdgesOf(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, ed := range consumes {
			if ed.Producer.Kind() == kind {
				return ed.Producer
			}
		}
		t.Fatalf("%s consumes no %s", id, kind)
		return ""
	}
	routes, err := e.Store().Resources(ctx, state.Filter{Kind: "route"})
	if err != nil || len(routes) == 0 {
		t.Fatalf("no routes: %v", err)
	}
	route := routes[0].ID()
	vpc := producer(route, "vpc")
	account := producer(vpc, "account")
	t.Logf("chain: %s → %s → %s", route, vpc, account)

	// serve's HTTP side, as serve wires it.
	serveWith := func(actions bool) string {
		s := &server{o: serveOptions{listen: "127.0.0.1:0", uiActions: actions, uiToken: testUIToken}, dir: t.TempDir(),
			live: live, log: quiet, out: io.Discard, errOut: io.Discard, ops: ops.NewMonitor("")}
		s.ops.SetEngine(e)
		t.Cleanup(func() { s.ops.SetEngine(nil) })
		addr, stop, err := s.startHTTP(func() {}, func() (int, string) { return http.StatusOK, "ok" })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		return "http://" + addr + "/"
	}
	base := serveWith(true)
	readOnly := serveWith(false)
	pageOf := func(base string, id converge.ID) string { return base + site.ResourcePath(id) }

	t.Run("refused", func(t *testing.T) {
		post := func(c *http.Client, path, body string, h map[string]string) (int, string) {
			t.Helper()
			req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			for k, v := range h {
				req.Header.Set(k, v)
			}
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return res.StatusCode, string(b)
		}
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar}
		del := `{"id":"` + string(account) + `","confirm":"` + string(account) + `"}`
		if code, body := post(c, "ui/session", "", map[string]string{"Authorization": "Bearer wrong-token-wrong-token"}); code != http.StatusUnauthorized {
			t.Errorf("sign-in with a wrong token: %d %s", code, body)
		}
		if code, body := post(c, "ui/delete", del, nil); code != http.StatusUnauthorized {
			t.Errorf("delete without a session: %d %s", code, body)
		}
		code, body := post(c, "ui/session", "", map[string]string{"Authorization": "Bearer " + testUIToken})
		if code != http.StatusOK {
			t.Fatalf("sign-in: %d %s", code, body)
		}
		var sess struct {
			CSRF string `json:"csrf"`
		}
		if err := json.Unmarshal([]byte(body), &sess); err != nil || sess.CSRF == "" {
			t.Fatalf("sign-in reply %s: %v", body, err)
		}
		if code, body := post(c, "ui/delete", del, nil); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Errorf("delete without the CSRF token: %d %s", code, body)
		}
		if code, body := post(c, "ui/delete", del, map[string]string{"X-CSRF-Token": "x" + sess.CSRF}); code != http.StatusForbidden {
			t.Errorf("delete with a wrong CSRF token: %d %s", code, body)
		}
		csrf := map[string]string{"X-CSRF-Token": sess.CSRF}
		if code, body := post(c, "ui/delete", del, map[string]string{"X-CSRF-Token": sess.CSRF, "Origin": "http://evil.example"}); code != http.StatusForbidden {
			t.Errorf("delete from another origin: %d %s", code, body)
		}
		if code, body := post(c, "ui/delete", `{"id":"`+string(account)+`","confirm":"yes"}`, csrf); code != http.StatusBadRequest || !strings.Contains(body, "confirm") {
			t.Errorf("unconfirmed delete: %d %s", code, body)
		}
		if code, body := post(c, "ui/do", `{"id":"`+string(account)+`","verb":"rotate","confirm":"`+string(account)+`"}`, csrf); code != http.StatusConflict || !strings.Contains(body, "rotate") {
			t.Errorf("an undeclared verb reaches the scheduler and is refused there: %d %s", code, body)
		}
		// Behind a proxy that terminates TLS the origin's scheme differs;
		// its host is what counts.
		proxied := map[string]string{"X-CSRF-Token": sess.CSRF, "Origin": "https://" + strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/")}
		if code, body := post(c, "ui/do", `{"id":"`+string(account)+`","verb":"rotate","confirm":"`+string(account)+`"}`, proxied); code != http.StatusConflict {
			t.Errorf("a same-host origin over https is refused: %d %s", code, body)
		}
		if _, err := e.Store().Resource(ctx, account); err != nil {
			t.Fatalf("a refused request deleted %s: %v", account, err)
		}
		for _, p := range []string{"ui/delete", "ui/session"} {
			res, err := http.Post(readOnly+p, "application/json", strings.NewReader(del))
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("read-only site: POST /%s = %s, want 405", p, res.Status)
			}
		}
		res, err := http.Get(readOnly + "ui/session")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("read-only site: GET /ui/session = %s, want 404", res.Status)
		}
	})

	b := startBrowser(t)
	t.Run("read-only page has no panel", func(t *testing.T) {
		tab := b.open(t, pageOf(readOnly, account))
		b.until(t, tab, "the read-only page to poll once", `document.readyState === "complete" && document.querySelector("[data-count=total]") !== null`)
		time.Sleep(300 * time.Millisecond) // the session probe answered
		var has bool
		if err := b.eval(tab, `document.getElementById("actions") !== null`, &has); err != nil {
			t.Fatal(err)
		}
		if has {
			t.Error("the read-only site shows an actions panel")
		}
	})

	t.Run("a graph node opens the resource's panel", func(t *testing.T) {
		graph := base + site.GraphPath("classicbom/classic")
		res, err := http.Get(graph)
		if err != nil {
			t.Fatal(err)
		}
		svg, _ := io.ReadAll(res.Body)
		res.Body.Close()
		m := regexp.MustCompile(`<a href="([^"]+)" target="_top"><g><title>` + regexp.QuoteMeta(string(account)) + `: `).FindSubmatch(svg)
		if m == nil {
			t.Fatalf("the root's graph has no node for %s", account)
		}
		gu, _ := url.Parse(graph)
		ref, _ := url.Parse(html.UnescapeString(string(m[1])))
		tab := b.open(t, gu.ResolveReference(ref).String())
		b.until(t, tab, "the panel of "+string(account), `(function () { var h = document.querySelector("#actions h2"); return h !== null && h.textContent === "Actions on `+string(account)+`"; })()`)
	})

	t.Run("delete an account from its panel", func(t *testing.T) {
		tabs := map[converge.ID]string{}
		watch := `window.__gone = 0; setInterval(function () { if (!window.__gone && document.getElementById("gone")) { window.__gone = Date.now(); } }, 10); true`
		for _, id := range []converge.ID{route, vpc, account} {
			tab := b.open(t, pageOf(base, id))
			// A new tab is about:blank, "complete", until its page
			// replaces it: a watch set there is lost with it.
			b.until(t, tab, "the page of "+string(id), `location.protocol === "http:" && document.readyState === "complete"`)
			if err := b.eval(tab, watch, nil); err != nil {
				t.Fatal(err)
			}
			tabs[id] = tab
		}
		tab := tabs[account]
		b.until(t, tab, "the sign-in form", `document.getElementById("ui-token") !== null`)
		if err := b.eval(tab, `document.getElementById("ui-token").value = "`+testUIToken+`"; document.getElementById("ui-signin").click(); true`, nil); err != nil {
			t.Fatal(err)
		}
		b.until(t, tab, "the signed-in panel", `document.getElementById("ui-delete") !== null`)
		if err := b.eval(tab, `document.getElementById("ui-delete").click(); true`, nil); err != nil {
			t.Fatal(err)
		}
		// The confirmation: the button stays disabled until the id is typed.
		var disabled bool
		if err := b.eval(tab, `var c = document.getElementById("ui-confirm"); c.value = "account/else"; c.dispatchEvent(new Event("input")); document.getElementById("ui-go").disabled`, &disabled); err != nil || !disabled {
			t.Fatalf("the confirm button is enabled for a wrong id (err %v)", err)
		}
		if err := b.eval(tab, `c.value = "`+string(account)+`"; c.dispatchEvent(new Event("input")); true`, nil); err != nil {
			t.Fatal(err)
		}
		b.screenshot(t, tab, filepath.Join(artifacts(t), "site-ui-confirm.png"))
		if _, err := e.Store().Resource(ctx, account); err != nil {
			t.Fatalf("%s deleted before the confirmation: %v", account, err)
		}
		if err := b.eval(tab, `c.value = "`+string(account)+`"; c.dispatchEvent(new Event("input")); document.getElementById("ui-go").click(); true`, nil); err != nil {
			t.Fatal(err)
		}
		b.until(t, tab, "the delete to be accepted", `document.getElementById("ui-status").textContent.indexOf("accepted") >= 0`)
		gone := map[converge.ID]int64{}
		for _, id := range []converge.ID{route, vpc, account} {
			b.until(t, tabs[id], "the page of "+string(id)+" to say it was deleted", `window.__gone > 0`)
			var at int64
			var text string
			if err := b.eval(tabs[id], `window.__gone`, &at); err != nil {
				t.Fatal(err)
			}
			if err := b.eval(tabs[id], `document.getElementById("gone").textContent`, &text); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(text, string(id)+" was deleted") {
				t.Errorf("the page of %s says %q", id, text)
			}
			gone[id] = at
		}
		b.screenshot(t, tabs[account], filepath.Join(artifacts(t), "site-ui-deleted.png"))
		t.Logf("deleted notices: route at 0, vpc at +%d ms, account at +%d ms", gone[vpc]-gone[route], gone[account]-gone[route])
		if !(gone[route] < gone[vpc] && gone[vpc] < gone[account]) {
			t.Errorf("the pages said deleted out of order: route %d, vpc %d, account %d", gone[route], gone[vpc], gone[account])
		}
	})
	t.Run("run a verb from its panel", func(t *testing.T) {
		// Signed in above: the session cookie holds for every page.
		vpcs, err := e.Store().Resources(ctx, state.Filter{Kind: "vpc"})
		if err != nil {
			t.Fatal(err)
		}
		var other converge.ID
		for _, r := range vpcs {
			if r.ID() != vpc && strings.HasPrefix(r.Name, "fd-") {
				other = r.ID()
				break
			}
		}
		if other == "" {
			t.Fatal("no other composed vpc")
		}
		tab := b.open(t, pageOf(base, other))
		b.until(t, tab, "the signed-in panel", `document.getElementById("ui-run") !== null`)
		if err := b.eval(tab, `document.getElementById("ui-verb").value = "enable_flow_logs"; document.getElementById("ui-run").click();
			var c = document.getElementById("ui-confirm"); c.value = "`+string(other)+`"; c.dispatchEvent(new Event("input"));
			document.getElementById("ui-go").click(); true`, nil); err != nil {
			t.Fatal(err)
		}
		b.until(t, tab, "the verb's answer", `document.getElementById("ui-status").textContent.indexOf("enable_flow_logs: ") === 0`)
		var text string
		if err := b.eval(tab, `document.getElementById("ui-status").textContent`, &text); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(text, "enable_flow_logs: ok") {
			t.Errorf("the panel says %q, want enable_flow_logs: ok", text)
		}
		r, err := e.Store().Resource(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(r.Status), `"flow_logs"`) {
			t.Errorf("%s's status after the verb: %s", other, r.Status)
		}
	})
	if logs.Len() > 0 {
		t.Errorf("live site logged:\n%s", logs.String())
	}
}

// TestUIToken checks where --ui-actions takes its login token from and
// that it refuses to serve actions with a missing, empty or short one.
func TestUIToken(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, empty, short := file("good", testUIToken+"\n"), file("empty", "\n"), file("short", "abc")
	tests := []struct {
		name, env, file, want, wantErr string
	}{
		{name: "environment", env: testUIToken, want: testUIToken},
		{name: "file wins", env: "from-the-environment-0", file: good, want: testUIToken},
		{name: "none", wantErr: "--ui-actions needs a login token: --ui-token-file FILE or $CONVERGE_UI_TOKEN"},
		{name: "empty file", file: empty, wantErr: empty + ": the login token is empty"},
		{name: "short", file: short, wantErr: short + ": the login token has 3 characters; it needs at least 16"},
		{name: "short env", env: "abc", wantErr: "$CONVERGE_UI_TOKEN: the login token has 3 characters"},
		{name: "missing file", file: filepath.Join(dir, "nope"), wantErr: "--ui-token-file: open " + filepath.Join(dir, "nope")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envUIToken, tc.env)
			got, err := uiToken(tc.file)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("uiToken = %q, %v; want error %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("uiToken = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// artifacts is where a test keeps its screenshots: $CONVERGE_ARTIFACTS,
// or a temporary directory.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CONVERGE_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
