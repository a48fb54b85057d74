package sync

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/convergehq/converge/sync/gittest"
)

func TestWebhookHandler(t *testing.T) {
	secret := []byte("s3cret")
	body := `{"ref":"refs/heads/main"}`
	tests := []struct {
		name        string
		method      string
		secret      []byte
		sig         string
		wantCode    int
		wantTrigger bool
	}{
		{"good signature", "POST", secret, Sign(secret, []byte(body)), http.StatusAccepted, true},
		{"missing signature", "POST", secret, "", http.StatusUnauthorized, false},
		{"wrong secret", "POST", secret, Sign([]byte("other"), []byte(body)), http.StatusUnauthorized, false},
		{"sha1 scheme", "POST", secret, "sha1=" + strings.Repeat("0", 40), http.StatusUnauthorized, false},
		{"not hex", "POST", secret, "sha256=zz", http.StatusUnauthorized, false},
		{"signature of another body", "POST", secret, Sign(secret, []byte(body+" ")), http.StatusUnauthorized, false},
		{"no secret configured", "POST", nil, Sign(nil, []byte(body)), http.StatusUnauthorized, false},
		{"GET", "GET", secret, Sign(secret, []byte(body)), http.StatusMethodNotAllowed, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			triggered := false
			h := WebhookHandler(tt.secret, func() { triggered = true })
			req := httptest.NewRequest(tt.method, "/hooks/git", strings.NewReader(body))
			if tt.sig != "" {
				req.Header.Set("X-Hub-Signature-256", tt.sig)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if got, want := rec.Code, tt.wantCode; got != want {
				t.Errorf("status %d, want %d", got, want)
			}
			if got, want := triggered, tt.wantTrigger; got != want {
				t.Errorf("triggered %v, want %v", got, want)
			}
		})
	}
}

// FuzzWebhookHandler posts any body with any signature: the handler never
// panics, triggers exactly when the signature is the body's HMAC under
// the secret (202), refuses a body over the limit (413) and anything else
// unsigned (401).
func FuzzWebhookHandler(f *testing.F) {
	secret := []byte("s3cret")
	f.Add([]byte(`{"ref":"refs/heads/main"}`), "", true)
	f.Add([]byte(`{"ref":"refs/heads/main"}`), "sha256=00", false)
	f.Add([]byte{}, "sha256=", false)
	f.Add([]byte("\x00\xff"), "sha256="+strings.Repeat("zz", 32), false)
	f.Fuzz(func(t *testing.T, body []byte, sig string, sign bool) {
		if sign {
			sig = Sign(secret, body)
		}
		triggered := 0
		h := WebhookHandler(secret, func() { triggered++ })
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/hooks/git", strings.NewReader(string(body)))
		req.Header.Set("X-Hub-Signature-256", sig)
		h.ServeHTTP(rec, req)
		valid := strings.HasPrefix(sig, "sha256=") && strings.EqualFold(sig, Sign(secret, body)) // hex in either case
		switch {
		case len(body) > maxWebhookBody:
			if rec.Code != http.StatusRequestEntityTooLarge || triggered != 0 {
				t.Fatalf("body of %d bytes: %d, %d triggers", len(body), rec.Code, triggered)
			}
		case valid:
			if rec.Code != http.StatusAccepted || triggered != 1 {
				t.Fatalf("signed body: %d, %d triggers", rec.Code, triggered)
			}
		default:
			if rec.Code != http.StatusUnauthorized || triggered != 0 {
				t.Fatalf("signature %q: %d, %d triggers", sig, rec.Code, triggered)
			}
		}
	})
}

// Every forge's documented push delivery is accepted with the right
// secret, refused with a wrong one or none, and each refusal is logged
// with its reason and counted by forge and outcome.
func TestWebhookForges(t *testing.T) {
	secret := []byte("hook-secret")
	for _, forge := range gittest.Forges {
		body, err := gittest.PushPayload(forge)
		if err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name     string
			secret   []byte // what the forge signs with (nil: unsigned)
			server   []byte // what converge is configured with
			tamper   bool   // the body changes after signing
			code     int
			outcome  string
			logWants string
		}{
			{"signed", secret, secret, false, http.StatusAccepted, WebhookAccepted, ""},
			{"wrong secret", []byte("guess"), secret, false, http.StatusUnauthorized, WebhookBadSignature, "reason="},
			{"unsigned", nil, secret, false, http.StatusUnauthorized, WebhookUnsigned, "no signature"},
			{"no secret configured", secret, nil, false, http.StatusUnauthorized, WebhookDisabled, "webhook disabled"},
		}
		if forge != "gitlab" { // GitLab signs nothing: its token does not cover the body
			cases = append(cases, struct {
				name     string
				secret   []byte
				server   []byte
				tamper   bool
				code     int
				outcome  string
				logWants string
			}{"body changed", secret, secret, true, http.StatusUnauthorized, WebhookBadSignature, "does not match the body"})
		}
		for _, c := range cases {
			t.Run(forge+"/"+c.name, func(t *testing.T) {
				hd, err := gittest.ForgeDelivery(forge, c.secret, body)
				if err != nil {
					t.Fatal(err)
				}
				sent := body
				if c.tamper {
					sent = bytes.Replace(body, []byte("refs/heads/main"), []byte("refs/heads/evil"), 1)
				}
				var logs bytes.Buffer
				triggered := 0
				var seen [][2]string
				h := &Webhook{Secret: c.server, Trigger: func() { triggered++ },
					Log:     slog.New(slog.NewTextHandler(&logs, nil)),
					Observe: func(f, o string) { seen = append(seen, [2]string{f, o}) }}
				req := httptest.NewRequest("POST", "/hooks/git", bytes.NewReader(sent))
				req.Header = hd
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != c.code {
					t.Errorf("status %d, want %d (%s)", rec.Code, c.code, rec.Body)
				}
				if want := map[bool]int{true: 1}[c.code == http.StatusAccepted]; triggered != want {
					t.Errorf("triggered %d times, want %d", triggered, want)
				}
				if len(seen) != 1 || seen[0] != [2]string{forge, c.outcome} {
					t.Errorf("observed %v, want [[%s %s]]", seen, forge, c.outcome)
				}
				if c.logWants == "" && (!strings.Contains(logs.String(), "level=INFO msg=\"webhook delivery accepted: fetching\" forge="+forge) ||
					strings.Contains(logs.String(), "level=WARN")) {
					t.Errorf("logged %q for an accepted delivery, want one info line naming the forge", logs.String())
				}
				if c.logWants != "" && (!strings.Contains(logs.String(), "webhook delivery refused") || !strings.Contains(logs.String(), c.logWants) ||
					!strings.Contains(logs.String(), "forge="+forge)) {
					t.Errorf("log %q does not say the delivery was refused, from %s, with %q", logs.String(), forge, c.logWants)
				}
			})
		}
	}
}

// A GitLab token is compared whole: a prefix or a longer string is not
// the secret.
func TestWebhookGitLabTokenExact(t *testing.T) {
	for _, tok := range []string{"hook-secre", "hook-secret ", "HOOK-SECRET", ""} {
		h := &Webhook{Secret: []byte("hook-secret"), Trigger: func() { t.Errorf("token %q triggered", tok) }}
		req := httptest.NewRequest("POST", "/hooks/git", strings.NewReader(`{}`))
		req.Header.Set("X-Gitlab-Event", "Push Hook")
		req.Header["X-Gitlab-Token"] = []string{tok}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("token %q: status %d, want 401", tok, rec.Code)
		}
	}
}
