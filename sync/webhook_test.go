package sync

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
