package sync

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"strings"
)

// maxWebhookBody bounds what a webhook request may send.
const maxWebhookBody = 1 << 20

// The forges a webhook delivery is told apart by (Webhook.Observe).
const (
	ForgeGitHub  = "github"
	ForgeGitea   = "gitea"
	ForgeForgejo = "forgejo"
	ForgeGitLab  = "gitlab"
	ForgeUnknown = "unknown"
)

// The outcomes of a webhook delivery (Webhook.Observe).
const (
	// WebhookAccepted: verified, a fetch was triggered.
	WebhookAccepted = "accepted"
	// WebhookUnsigned: no signature or token header at all.
	WebhookUnsigned = "unsigned"
	// WebhookBadSignature: a signature or token that does not verify.
	WebhookBadSignature = "bad_signature"
	// WebhookDisabled: no secret is configured, so nothing verifies.
	WebhookDisabled = "disabled"
	// WebhookBadRequest: not a POST, or a body too large or unreadable.
	WebhookBadRequest = "bad_request"
)

// WebhookOutcomes lists every outcome, for counters resolved ahead.
var WebhookOutcomes = []string{WebhookAccepted, WebhookUnsigned, WebhookBadSignature, WebhookDisabled, WebhookBadRequest}

// WebhookForges lists every forge label, for counters resolved ahead.
var WebhookForges = []string{ForgeGitHub, ForgeGitea, ForgeForgejo, ForgeGitLab, ForgeUnknown}

// Webhook is the receiver for POST /hooks/git. A delivery is accepted
// when it proves it knows Secret in its forge's way:
//
//   - GitHub: X-Hub-Signature-256 is "sha256=" and the hex HMAC-SHA256
//     of the body (Gitea and Forgejo send it too);
//   - Gitea and Forgejo: X-Gitea-Signature (Forgejo: X-Forgejo-Signature) is
//     the bare hex HMAC-SHA256 of the body;
//   - GitLab: X-Gitlab-Token is the secret itself, compared in constant
//     time (GitLab signs nothing).
//
// The first of those headers present decides; anything else gets 401
// and triggers nothing. An accepted delivery only calls Trigger, which
// must not block: the payload is never trusted for what to sync, the
// sync loop fetches the branch it follows. An empty Secret refuses every
// delivery. Every refusal is logged at warn with its reason.
type Webhook struct {
	Secret  []byte
	Trigger func()
	// Log receives a line for every delivery: refused at warn, accepted
	// at info (nil: none).
	Log *slog.Logger
	// Observe, when set, hears every delivery's forge and outcome (one
	// of WebhookForges and WebhookOutcomes).
	Observe func(forge, outcome string)
}

// WebhookHandler returns a Webhook with secret and trigger and no log.
func WebhookHandler(secret []byte, trigger func()) http.Handler {
	return &Webhook{Secret: secret, Trigger: trigger}
}

// ServeHTTP implements http.Handler.
func (h *Webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	forge := webhookForge(r.Header)
	refuse := func(code int, outcome, reason string) {
		if h.Log != nil {
			h.Log.Warn("webhook delivery refused", "reason", reason, "forge", forge,
				"event", webhookEvent(r.Header), "remote", r.RemoteAddr)
		}
		if h.Observe != nil {
			h.Observe(forge, outcome)
		}
		http.Error(w, reason, code)
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		refuse(http.StatusMethodNotAllowed, WebhookBadRequest, "method not allowed")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBody+1))
	if err != nil || len(body) > maxWebhookBody {
		refuse(http.StatusRequestEntityTooLarge, WebhookBadRequest, "body too large or unreadable")
		return
	}
	if len(h.Secret) == 0 {
		refuse(http.StatusUnauthorized, WebhookDisabled, "webhook disabled: no secret configured (CONVERGE_WEBHOOK_SECRET)")
		return
	}
	if outcome, reason := verify(h.Secret, body, r.Header); outcome != WebhookAccepted {
		refuse(http.StatusUnauthorized, outcome, reason)
		return
	}
	if h.Observe != nil {
		h.Observe(forge, WebhookAccepted)
	}
	if h.Log != nil {
		h.Log.Info("webhook delivery accepted: fetching", "forge", forge, "event", webhookEvent(r.Header), "remote", r.RemoteAddr)
	}
	h.Trigger()
	w.WriteHeader(http.StatusAccepted)
	io.WriteString(w, "sync triggered\n")
}

// verify checks the first signature or token header present.
func verify(secret, body []byte, hd http.Header) (outcome, reason string) {
	if v := hd.Get("X-Hub-Signature-256"); v != "" {
		got, ok := strings.CutPrefix(v, "sha256=")
		if !ok {
			return WebhookBadSignature, "X-Hub-Signature-256 does not start with sha256="
		}
		if !hmacMatches(secret, body, got) {
			return WebhookBadSignature, "X-Hub-Signature-256 does not match the body under the secret"
		}
		return WebhookAccepted, ""
	}
	for _, name := range []string{"X-Forgejo-Signature", "X-Gitea-Signature"} {
		if v := hd.Get(name); v != "" {
			if !hmacMatches(secret, body, v) {
				return WebhookBadSignature, name + " does not match the body under the secret"
			}
			return WebhookAccepted, ""
		}
	}
	if v, ok := hd["X-Gitlab-Token"]; ok {
		if len(v) != 1 || subtle.ConstantTimeCompare([]byte(v[0]), secret) != 1 {
			return WebhookBadSignature, "X-Gitlab-Token is not the secret"
		}
		return WebhookAccepted, ""
	}
	return WebhookUnsigned, "no signature: want X-Hub-Signature-256, X-Gitea-Signature or X-Gitlab-Token"
}

// hmacMatches reports whether hexSig is the hex HMAC-SHA256 of body
// under secret.
func hmacMatches(secret, body []byte, hexSig string) bool {
	sig, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hmac.Equal(sig, m.Sum(nil))
}

// webhookForge tells which forge sent a delivery, by its headers.
func webhookForge(hd http.Header) string {
	switch {
	case hd.Get("X-Gitlab-Event") != "" || hd.Get("X-Gitlab-Token") != "":
		return ForgeGitLab
	case hd.Get("X-Forgejo-Event") != "" || hd.Get("X-Forgejo-Signature") != "":
		return ForgeForgejo
	case hd.Get("X-Gitea-Event") != "" || hd.Get("X-Gitea-Signature") != "":
		return ForgeGitea
	case hd.Get("X-GitHub-Event") != "" || hd.Get("X-Hub-Signature-256") != "":
		return ForgeGitHub
	}
	return ForgeUnknown
}

// webhookEvent is the forge's name of the delivery's event, if it says.
func webhookEvent(hd http.Header) string {
	for _, name := range []string{"X-GitHub-Event", "X-Gitea-Event", "X-Forgejo-Event", "X-Gitlab-Event"} {
		if v := hd.Get(name); v != "" {
			return v
		}
	}
	return ""
}

// Sign returns the X-Hub-Signature-256 value for body under secret.
func Sign(secret, body []byte) string {
	return "sha256=" + SignHex(secret, body)
}

// SignHex returns the bare hex HMAC-SHA256 of body under secret: the
// X-Gitea-Signature value.
func SignHex(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}
