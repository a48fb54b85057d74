package forge

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/convergehq/converge"
)

// GitHub reports to GitHub's commit-status API, or to the same API served
// by Gitea and Forgejo under /api/v1 (see NewGitea).
type GitHub struct {
	api   string // API root, no trailing slash
	owner string
	repo  string
	gitea bool
	c     client
}

// NewGitHub returns a reporter for repository owner/repo. baseURL is the
// API root: "" for https://api.github.com, or a GitHub Enterprise server's
// https://HOST/api/v3. token is sent as a bearer token.
func NewGitHub(baseURL, owner, repo, token string, opts ...Option) *GitHub {
	if baseURL == "" {
		baseURL = "https://api.github.com"
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	h.Set("Accept", "application/vnd.github+json")
	h.Set("X-GitHub-Api-Version", "2022-11-28")
	return &GitHub{api: strings.TrimRight(baseURL, "/"), owner: owner, repo: repo, c: newClient(h, opts)}
}

// NewGitea returns a reporter for repository owner/repo on a Gitea or
// Forgejo instance at baseURL (its web root: the API is baseURL/api/v1).
// It accepts Gitea's extra "warning" state.
func NewGitea(baseURL, owner, repo, token string, opts ...Option) *GitHub {
	h := http.Header{}
	h.Set("Authorization", "token "+token)
	h.Set("Accept", "application/json")
	return &GitHub{api: strings.TrimRight(baseURL, "/") + "/api/v1", owner: owner, repo: repo, gitea: true, c: newClient(h, opts)}
}

// githubStatus is a status as the API takes and lists it.
type githubStatus struct {
	ID          int64  `json:"id,omitempty"`
	State       string `json:"state"`
	TargetURL   string `json:"target_url,omitempty"`
	Description string `json:"description"`
	Context     string `json:"context"`
	// Status is Gitea's name for State in some versions' listings.
	Status string `json:"status,omitempty"`
}

func (s githubStatus) state() string {
	if s.State != "" {
		return s.State
	}
	return s.Status
}

// Report posts st on sha unless the newest status of st.Context already
// has its state and description. States: pending, success, failure,
// error (and warning on Gitea); any other is ErrState.
func (g *GitHub) Report(ctx context.Context, sha string, st converge.CommitStatus) error {
	switch st.State {
	case converge.StatePending, converge.StateSuccess, converge.StateFailure, converge.StateError:
	case "warning":
		if !g.gitea {
			return fmt.Errorf("report %s on %s: %q: %w", st.Context, sha, st.State, ErrState)
		}
	default:
		return fmt.Errorf("report %s on %s: %q: %w", st.Context, sha, st.State, ErrState)
	}
	want := githubStatus{State: st.State, TargetURL: st.TargetURL,
		Description: truncate(st.Description, MaxDescription), Context: st.Context}
	repo := g.api + "/repos/" + url.PathEscape(g.owner) + "/" + url.PathEscape(g.repo)
	var have []githubStatus
	// Newest first on GitHub; the largest id wins in case a forge orders
	// differently.
	list := repo + "/commits/" + url.PathEscape(sha) + "/statuses?per_page=100&limit=50"
	if err := g.c.do(ctx, http.MethodGet, list, nil, &have); err != nil {
		return fmt.Errorf("list statuses of %s: %w", sha, err)
	}
	if cur, ok := newest(have, st.Context); ok && cur.state() == want.State && cur.Description == want.Description {
		return nil
	}
	if err := g.c.do(ctx, http.MethodPost, repo+"/statuses/"+url.PathEscape(sha), want, nil); err != nil {
		return fmt.Errorf("post status %s of %s: %w", st.Context, sha, err)
	}
	return nil
}

// newest returns the status of context with the largest id, or the first
// listed when ids are absent.
func newest(list []githubStatus, context string) (githubStatus, bool) {
	var best githubStatus
	found := false
	for _, s := range list {
		if s.Context == context && (!found || s.ID > best.ID) {
			best, found = s, true
		}
	}
	return best, found
}
