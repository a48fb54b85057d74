package gittest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
)

// Forges are the forges ForgeDelivery can imitate.
var Forges = []string{"github", "gitea", "forgejo", "gitlab"}

// PushPayload returns the push event body that forge documents (a
// fixture in testdata/fixtures/webhooks; Forgejo's is Gitea's).
func PushPayload(forge string) ([]byte, error) {
	name := forge
	if forge == "forgejo" {
		name = "gitea"
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return nil, fmt.Errorf("locate the fixtures")
	}
	return os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "testdata", "fixtures", "webhooks", name+"-push.json"))
}

// ForgeDelivery returns the headers forge sends with a push event's body
// under secret, as its documentation shows them: GitHub signs with
// X-Hub-Signature-256 ("sha256=" and the hex HMAC-SHA256), Gitea with
// X-Gitea-Signature (the bare hex HMAC), Forgejo with
// X-Forgejo-Signature and X-Gitea-Signature, GitLab sends the secret
// itself as X-Gitlab-Token. A nil secret leaves the signature out.
func ForgeDelivery(forge string, secret, body []byte) (http.Header, error) {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	sig := ""
	if secret != nil {
		m := hmac.New(sha256.New, secret)
		m.Write(body)
		sig = hex.EncodeToString(m.Sum(nil))
	}
	set := func(k, v string) {
		if v != "" {
			h.Set(k, v)
		}
	}
	const delivery = "f6266f16-1bf3-46a5-9ea4-602e06ead473"
	switch forge {
	case "github":
		h.Set("User-Agent", "GitHub-Hookshot/044aadd")
		h.Set("X-GitHub-Event", "push")
		h.Set("X-GitHub-Delivery", delivery)
		h.Set("X-GitHub-Hook-ID", "292430182")
		if sig != "" {
			set("X-Hub-Signature-256", "sha256="+sig)
		}
	case "gitea":
		h.Set("X-GitHub-Event", "push")
		h.Set("X-GitHub-Delivery", delivery)
		h.Set("X-Gogs-Event", "push")
		h.Set("X-Gitea-Event", "push")
		h.Set("X-Gitea-Delivery", delivery)
		set("X-Gitea-Signature", sig)
	case "forgejo":
		h.Set("X-Forgejo-Event", "push")
		h.Set("X-Forgejo-Delivery", delivery)
		h.Set("X-Gitea-Event", "push")
		h.Set("X-Gitea-Delivery", delivery)
		set("X-Forgejo-Signature", sig)
		set("X-Gitea-Signature", sig)
	case "gitlab":
		h.Set("User-Agent", "GitLab/17.0.0")
		h.Set("X-Gitlab-Event", "Push Hook")
		h.Set("X-Gitlab-Event-UUID", delivery)
		h.Set("X-Gitlab-Instance", "https://gitlab.acme.invalid")
		if secret != nil {
			h.Set("X-Gitlab-Token", string(secret))
		}
	default:
		return nil, fmt.Errorf("no such forge %q (have github, gitea, forgejo, gitlab)", forge)
	}
	return h, nil
}
