package site

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convergehq/converge"
)

const testToken = "correct-horse-battery-staple"

// fakeActor records what it was asked to do.
type fakeActor struct {
	mu      sync.Mutex // guards deleted and done
	deleted []converge.ID
	done    []string
}

func (f *fakeActor) Delete(_ context.Context, id converge.ID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id == "vpc/missing" {
		return converge.ErrNotFound
	}
	f.deleted = append(f.deleted, id)
	return nil
}

func (f *fakeActor) Do(_ context.Context, id converge.ID, verb string, _ map[string]string) (*converge.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = append(f.done, string(id)+" "+verb)
	return &converge.Result{Outcome: converge.OutcomeOK, Message: "done"}, nil
}

// actionsServer serves Actions over a fake actor; ctl nil makes it a
// follower's (no engine).
func actionsServer(t *testing.T, actor Actor) (*Actions, *httptest.Server) {
	t.Helper()
	a := NewActions(testToken, func() Actor { return actor }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	mux := http.NewServeMux()
	a.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return a, srv
}

// client is a browser's view of the site: its cookie and CSRF token.
type client struct {
	t      *testing.T
	base   string
	cookie *http.Cookie
	csrf   string
}

func (c *client) send(method, path, body string, h map[string]string) (int, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, ck := range res.Cookies() {
		if ck.Name == uiCookie {
			c.cookie = ck
		}
	}
	return res.StatusCode, string(b)
}

func (c *client) signIn() {
	c.t.Helper()
	code, body := c.send(http.MethodPost, "/ui/session", "", map[string]string{"Authorization": "Bearer " + testToken})
	if code != http.StatusOK {
		c.t.Fatalf("sign-in: %d %s", code, body)
	}
	var r uiSessionReply
	if err := json.Unmarshal([]byte(body), &r); err != nil || !r.SignedIn || r.CSRF == "" {
		c.t.Fatalf("sign-in reply %s: %v", body, err)
	}
	c.csrf = r.CSRF
}

// TestActionsRefused: what a write needs (a JSON request from the same
// origin, a session, its CSRF token, the id typed again) and what it gets
// without it.
func TestActionsRefused(t *testing.T) {
	actor := &fakeActor{}
	_, srv := actionsServer(t, actor)
	c := &client{t: t, base: srv.URL}
	del := `{"id":"vpc/a","confirm":"vpc/a"}`
	if code, _ := c.send(http.MethodPost, "/ui/session", "", map[string]string{"Authorization": "Bearer wrong-token-wrong-token"}); code != http.StatusUnauthorized {
		t.Errorf("sign-in with a wrong token: %d, want 401", code)
	}
	if code, _ := c.send(http.MethodPost, "/ui/delete", del, nil); code != http.StatusUnauthorized {
		t.Errorf("delete without a session: %d, want 401", code)
	}
	c.signIn()
	csrf := func(more ...string) map[string]string {
		h := map[string]string{"X-CSRF-Token": c.csrf}
		for i := 0; i+1 < len(more); i += 2 {
			h[more[i]] = more[i+1]
		}
		return h
	}
	tests := []struct {
		name     string
		path     string
		body     string
		header   map[string]string
		wantCode int
		wantBody string
	}{
		{name: "no CSRF token", path: "/ui/delete", body: del, wantCode: http.StatusForbidden, wantBody: "CSRF"},
		{name: "wrong CSRF token", path: "/ui/delete", body: del, header: map[string]string{"X-CSRF-Token": "x" + c.csrf}, wantCode: http.StatusForbidden, wantBody: "CSRF"},
		{name: "another origin", path: "/ui/delete", body: del, header: csrf("Origin", "http://evil.example"), wantCode: http.StatusForbidden, wantBody: "cross-origin"},
		{name: "cross-site fetch", path: "/ui/delete", body: del, header: csrf("Sec-Fetch-Site", "cross-site"), wantCode: http.StatusForbidden, wantBody: "cross-site"},
		{name: "a form, not JSON", path: "/ui/delete", body: del, header: csrf("Content-Type", "application/x-www-form-urlencoded"), wantCode: http.StatusUnsupportedMediaType},
		{name: "unconfirmed", path: "/ui/delete", body: `{"id":"vpc/a","confirm":"yes"}`, header: csrf(), wantCode: http.StatusBadRequest, wantBody: "confirm"},
		{name: "no id", path: "/ui/delete", body: `{"confirm":""}`, header: csrf(), wantCode: http.StatusBadRequest, wantBody: "id: missing"},
		{name: "no verb", path: "/ui/do", body: del, header: csrf(), wantCode: http.StatusBadRequest, wantBody: "verb: missing"},
		{name: "not found", path: "/ui/delete", body: `{"id":"vpc/missing","confirm":"vpc/missing"}`, header: csrf(), wantCode: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := c.send(http.MethodPost, tt.path, tt.body, tt.header)
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Errorf("%s: %d %s; want %d containing %q", tt.path, code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
	if len(actor.deleted) != 0 || len(actor.done) != 0 {
		t.Errorf("a refused request reached the actor: deleted %v, done %v", actor.deleted, actor.done)
	}
	// Behind a proxy that terminates TLS the origin's scheme differs; its
	// host is what counts.
	host := strings.TrimPrefix(srv.URL, "http://")
	if code, body := c.send(http.MethodPost, "/ui/delete", del, csrf("Origin", "https://"+host)); code != http.StatusOK {
		t.Errorf("a same-host origin over https: %d %s", code, body)
	}
	if got := len(actor.deleted); got != 1 {
		t.Errorf("deleted %v, want vpc/a once", actor.deleted)
	}
}

// TestActionsSession: a session carries actions until sign-out or
// expiry, and a follower (no actor) refuses them, naming why.
func TestActionsSession(t *testing.T) {
	actor := &fakeActor{}
	a, srv := actionsServer(t, actor)
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return now }
	c := &client{t: t, base: srv.URL}
	code, body := c.send(http.MethodGet, "/ui/session", "", nil)
	if code != http.StatusOK || !strings.Contains(body, `"actions":true`) || !strings.Contains(body, `"signedIn":false`) {
		t.Errorf("GET /ui/session signed out: %d %s", code, body)
	}
	c.signIn()
	if c.cookie == nil || !c.cookie.HttpOnly || c.cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie %+v, want HttpOnly and SameSite=Strict", c.cookie)
	}
	code, body = c.send(http.MethodPost, "/ui/do", `{"id":"vpc/a","verb":"rotate","confirm":"vpc/a"}`, map[string]string{"X-CSRF-Token": c.csrf})
	if code != http.StatusOK || !strings.Contains(body, `"outcome":"ok"`) || !strings.Contains(body, `"message":"done"`) {
		t.Errorf("do: %d %s", code, body)
	}
	if got, want := strings.Join(actor.done, ";"), "vpc/a rotate"; got != want {
		t.Errorf("done %q, want %q", got, want)
	}

	now = now.Add(uiSessionTTL)
	if code, _ := c.send(http.MethodPost, "/ui/delete", `{"id":"vpc/a","confirm":"vpc/a"}`, map[string]string{"X-CSRF-Token": c.csrf}); code != http.StatusUnauthorized {
		t.Errorf("delete after the session expired: %d, want 401", code)
	}
	c.signIn()
	if code, _ := c.send(http.MethodDelete, "/ui/session", "", map[string]string{"X-CSRF-Token": c.csrf}); code != http.StatusOK {
		t.Errorf("sign-out: %d", code)
	}
	if code, _ := c.send(http.MethodPost, "/ui/delete", `{"id":"vpc/a","confirm":"vpc/a"}`, map[string]string{"X-CSRF-Token": c.csrf}); code != http.StatusUnauthorized {
		t.Errorf("delete after sign-out: %d, want 401", code)
	}

	var none Actor
	_, follower := actionsServer(t, none)
	fc := &client{t: t, base: follower.URL}
	fc.signIn()
	code, body = fc.send(http.MethodPost, "/ui/delete", `{"id":"vpc/a","confirm":"vpc/a"}`, map[string]string{"X-CSRF-Token": fc.csrf})
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "follower replica") {
		t.Errorf("delete on a follower: %d %s", code, body)
	}
}

// TestActionsSessionsBounded: at uiMaxSessions the session nearest its
// expiry makes room for a new one.
func TestActionsSessionsBounded(t *testing.T) {
	a, srv := actionsServer(t, &fakeActor{})
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return now }
	first := &client{t: t, base: srv.URL}
	first.signIn()
	for range uiMaxSessions {
		now = now.Add(time.Millisecond)
		(&client{t: t, base: srv.URL}).signIn()
	}
	a.mu.Lock()
	n := len(a.sessions)
	a.mu.Unlock()
	if n != uiMaxSessions {
		t.Errorf("%d sessions held, want %d", n, uiMaxSessions)
	}
	if code, body := first.send(http.MethodGet, "/ui/session", "", nil); !strings.Contains(body, `"signedIn":false`) {
		t.Errorf("the oldest session after %d sign-ins: %d %s; want it dropped", uiMaxSessions, code, body)
	}
}
