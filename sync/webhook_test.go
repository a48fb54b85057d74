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
