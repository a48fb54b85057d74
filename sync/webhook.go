package sync

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
)

// maxWebhookBody bounds what a webhook request may send.
const maxWebhookBody = 1 << 20

// WebhookHandler returns the receiver for POST /hooks/git. A request is
// accepted only if its X-Hub-Signature-256 header is "sha256=" followed by
// the hex HMAC-SHA256 of the body under secret (GitHub's scheme, also
// Gitea's and Forgejo's); anything else gets 401 and triggers nothing. An
// accepted request only calls trigger, which must not block: the payload
// is never trusted for what to sync, the sync loop fetches the branch it
// follows. An empty secret refuses every request.
func WebhookHandler(secret []byte, trigger func()) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBody+1))
		if err != nil || len(body) > maxWebhookBody {
			http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
			return
		}
		if !validSignature(secret, body, r.Header.Get("X-Hub-Signature-256")) {
			http.Error(w, "bad or missing signature", http.StatusUnauthorized)
			return
		}
		trigger()
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "sync triggered\n")
	})
}

// Sign returns the X-Hub-Signature-256 value for body under secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func validSignature(secret, body []byte, header string) bool {
	if len(secret) == 0 {
		return false
	}
	got, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return false
	}
	sig, err := hex.DecodeString(got)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hmac.Equal(sig, m.Sum(nil))
}
