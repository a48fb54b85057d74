package forge

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/convergehq/converge"
)

// GitLab reports to GitLab's commit-status API.
type GitLab struct {
	api     string // .../api/v4
	project string // id or "group/name", unescaped
	c       client
}

// NewGitLab returns a reporter for project projectID (a number or a path
// such as "group/name") on the GitLab instance at baseURL (its web root:
// "" for https://gitlab.com; the API is baseURL/api/v4). token is sent as
// PRIVATE-TOKEN.
func NewGitLab(baseURL, projectID, token string, opts ...Option) *GitLab {
	if baseURL == "" {
		baseURL = "https://gitlab.com"
	}
	h := http.Header{}
	h.Set("PRIVATE-TOKEN", token)
	h.Set("Accept", "application/json")
	return &GitLab{api: strings.TrimRight(baseURL, "/") + "/api/v4", project: projectID, c: newClient(h, opts)}
}

// gitlabState maps converge's states to GitLab's: failure and error are
// both "failed".
func gitlabState(s string) (string, bool) {
	switch s {
	case converge.StatePending:
		return "pending", true
	case converge.StateSuccess:
		return "success", true
	case converge.StateFailure, converge.StateError:
		return "failed", true
	}
	return "", false
}

type gitlabStatus struct {
	ID          int64  `json:"id,omitempty"`
	State       string `json:"state"`
	Status      string `json:"status,omitempty"` // the listing's name for state
	Name        string `json:"name"`
	TargetURL   string `json:"target_url,omitempty"`
	Description string `json:"description"`
}

// Report posts st on sha as a status named st.Context, unless the newest
// status of that name already has its state and description, or st is
// pending and the newest is pending or running (GitLab refuses that with
// 400).
func (g *GitLab) Report(ctx context.Context, sha string, st converge.CommitStatus) error {
	state, ok := gitlabState(st.State)
	if !ok {
		return fmt.Errorf("report %s on %s: %q: %w", st.Context, sha, st.State, ErrState)
	}
	want := gitlabStatus{State: state, Name: st.Context, TargetURL: st.TargetURL,
		Description: truncate(st.Description, MaxDescription)}
	project := g.api + "/projects/" + url.PathEscape(g.project)
	var have []gitlabStatus
	list := project + "/repository/commits/" + url.PathEscape(sha) + "/statuses?per_page=100&name=" + url.QueryEscape(st.Context)
	if err := g.c.do(ctx, http.MethodGet, list, nil, &have); err != nil {
		return fmt.Errorf("list statuses of %s: %w", sha, err)
	}
	var cur gitlabStatus
	found := false
	for _, s := range have {
		if s.Name == st.Context && (!found || s.ID > cur.ID) {
			cur, found = s, true
		}
	}
	if found {
		curState := cur.Status
		if curState == "" {
			curState = cur.State
		}
		if curState == want.State && cur.Description == want.Description {
			return nil
		}
		if want.State == "pending" && (curState == "pending" || curState == "running") {
			return nil
		}
	}
	if err := g.c.do(ctx, http.MethodPost, project+"/statuses/"+url.PathEscape(sha), want, nil); err != nil {
		return fmt.Errorf("post status %s of %s: %w", st.Context, sha, err)
	}
	return nil
}
