// Package forgetest serves fake forge commit-status APIs on loopback for
// tests: GitHub (and Gitea/Forgejo under /api/v1) and GitLab. Each fake
// checks every request the way the real API does — auth header, exact
// path, JSON fields (unknown ones refused), allowed states, the
// 140-character description limit (422), GitHub's 1,000 statuses per sha
// and context, GitLab's refusal of a repeated pending (400) — and records
// what it accepted. They serve a pull request's comments too (GitHub's and
// Gitea's issue comments, GitLab's merge request notes), with body the
// only field and GitHub's 65,536-character limit.
//
// Read first: Server (what both fakes record), NewGitHub, NewGitLab.
package forgetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	gosync "sync"
	"testing"
	"unicode/utf8"
)

// The repository, project and token every fake serves.
const (
	Owner   = "octo"
	Repo    = "site"
	Project = "group/site" // GitLab, sent URL-escaped as group%2Fsite
	Token   = "secret"
)

var shaRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Posted is one status a fake accepted; State is in the forge's own
// vocabulary (GitLab's "failed"), Context is GitLab's name.
type Posted struct {
	SHA, State, Context, Description, TargetURL string
}

// Server is the part the GitHub and GitLab fakes share.
type Server struct {
	srv *httptest.Server
	// Gate, when set before the first request, holds every request until
	// it is closed.
	Gate chan struct{}

	mu       gosync.Mutex // guards the fields below
	down     int          // answer the next down requests with a 5xx
	requests []string     // "METHOD path", every request seen
	accepted []Posted     // in order
	refused  []string     // why requests were refused with 4xx
	nextID   int64
	comments []Comment // pull request comments (GitLab: merge request notes), in order
}

// Comment is one pull request comment a fake keeps.
type Comment struct {
	ID   int64
	PR   int
	Body string
}

// Comments returns the comments the fake keeps, oldest first.
func (f *Server) Comments() []Comment {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Comment(nil), f.comments...)
}

// AddComment adds a comment to pr as someone else would (a reviewer).
func (f *Server) AddComment(pr int, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	f.comments = append(f.comments, Comment{ID: f.nextID, PR: pr, Body: body})
}

// serveComments answers the comment API of a pull request: list (page
// and per_page), post and edit, with body the only field, at most max
// characters (0: no limit). pr is the pull request of a list or post,
// id the comment of an edit (0 when not). It reports whether it answered.
// f.mu held.
func (f *Server) serveComments(w http.ResponseWriter, r *http.Request, pr int, id int64, editMethod string, max int) {
	switch {
	case pr > 0 && r.Method == http.MethodGet:
		per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
		if per <= 0 || per > 100 {
			per = 30
		}
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		if page <= 0 {
			page = 1
		}
		list := []map[string]any{}
		n := 0
		for _, c := range f.comments {
			if c.PR != pr {
				continue
			}
			if n >= (page-1)*per && n < page*per {
				list = append(list, map[string]any{"id": c.ID, "body": c.Body})
			}
			n++
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(list)
		return
	case pr > 0 && r.Method == http.MethodPost, id > 0 && r.Method == editMethod:
	default:
		f.refuse(w, http.StatusNotFound, "Not Found: %s %s", r.Method, r.URL.Path)
		return
	}
	var in struct {
		Body string `json:"body"`
	}
	if err := decodeStrict(r, &in); err != nil {
		f.refuse(w, http.StatusBadRequest, "Problems parsing JSON: %v", err)
		return
	}
	if in.Body == "" {
		f.refuse(w, http.StatusUnprocessableEntity, "body is missing")
		return
	}
	if max > 0 && utf8.RuneCountInString(in.Body) > max {
		f.refuse(w, http.StatusUnprocessableEntity, "body is too long (maximum is %d characters)", max)
		return
	}
	if pr > 0 {
		f.nextID++
		f.comments = append(f.comments, Comment{ID: f.nextID, PR: pr, Body: in.Body})
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"id": f.nextID, "body": in.Body})
		return
	}
	for i := range f.comments {
		if f.comments[i].ID == id {
			f.comments[i].Body = in.Body
			json.NewEncoder(w).Encode(map[string]any{"id": id, "body": in.Body})
			return
		}
	}
	f.refuse(w, http.StatusNotFound, "Not Found: comment %d", id)
}

// number parses a path's decimal id, 0 if it is none.
func number(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// URL is the fake's root: GitHub's API root, Gitea's and GitLab's web
// root.
func (f *Server) URL() string { return f.srv.URL }

// SetDown makes the next n requests fail with a 5xx, as a forge that is
// down does.
func (f *Server) SetDown(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = n
}

// Requests returns how many requests the fake has seen.
func (f *Server) Requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

// wait holds a request while the gate is set and open.
func (f *Server) wait() {
	if f.Gate != nil {
		<-f.Gate
	}
}

// Statuses returns the statuses accepted, in order.
func (f *Server) Statuses() []Posted {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Posted(nil), f.accepted...)
}

// Posts returns how many POSTs the fake has seen, accepted or not.
func (f *Server) Posts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.requests {
		if r[:4] == "POST" {
			n++
		}
	}
	return n
}

// Refusals returns why requests were refused, "CODE message" each.
func (f *Server) Refusals() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.refused...)
}

// refuse answers code with a JSON message and records why; f.mu held.
func (f *Server) refuse(w http.ResponseWriter, code int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.refused = append(f.refused, fmt.Sprintf("%d %s", code, msg))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

// decodeStrict decodes a JSON object with only the allowed string fields.
func decodeStrict(r *http.Request, into any) error {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		return fmt.Errorf("content type %q", ct)
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// GitHubServer serves GitHub's status API for Owner/Repo (bearer Token,
// Accept application/vnd.github+json), or Gitea's under /api/v1 (header
// "token Token", with the extra state "warning").
type GitHubServer struct {
	Server
	gitea bool
}

// NewGitHub starts a GitHub fake (a Gitea one when gitea is set), closed
// when the test ends.
func NewGitHub(t testing.TB, gitea bool) *GitHubServer {
	f := StartGitHub(gitea)
	t.Cleanup(f.Close)
	return f
}

// StartGitHub is NewGitHub outside a test (a testscript command): Close
// ends it.
func StartGitHub(gitea bool) *GitHubServer {
	f := &GitHubServer{gitea: gitea}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// Close stops the fake.
func (f *Server) Close() { f.srv.Close() }

var (
	ghPost = regexp.MustCompile(`^/repos/` + Owner + `/` + Repo + `/statuses/([^/]+)$`)
	ghList = regexp.MustCompile(`^/repos/` + Owner + `/` + Repo + `/commits/([^/]+)/statuses$`)
	// issue comments: a pull request is an issue
	ghComments = regexp.MustCompile(`^/repos/` + Owner + `/` + Repo + `/issues/([0-9]+)/comments$`)
	ghComment  = regexp.MustCompile(`^/repos/` + Owner + `/` + Repo + `/issues/comments/([0-9]+)$`)
)

func (f *GitHubServer) serve(w http.ResponseWriter, r *http.Request) {
	f.wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	if f.down > 0 {
		f.down--
		http.Error(w, "unavailable", http.StatusInternalServerError)
		return
	}
	prefix, auth := "", "Bearer "+Token
	if f.gitea {
		prefix, auth = "/api/v1", "token "+Token
	}
	if got := r.Header.Get("Authorization"); got != auth {
		f.refuse(w, http.StatusUnauthorized, "Bad credentials: %q", got)
		return
	}
	if !f.gitea && r.Header.Get("Accept") != "application/vnd.github+json" {
		f.refuse(w, http.StatusUnsupportedMediaType, "accept %q", r.Header.Get("Accept"))
		return
	}
	path, ok := cutPrefix(r.URL.Path, prefix)
	if !ok {
		f.refuse(w, http.StatusNotFound, "Not Found")
		return
	}
	max := MaxCommentGitHub
	if f.gitea {
		max = 0
	}
	if m := ghComments.FindStringSubmatch(path); m != nil {
		f.serveComments(w, r, int(number(m[1])), 0, http.MethodPatch, max)
		return
	}
	if m := ghComment.FindStringSubmatch(path); m != nil {
		f.serveComments(w, r, 0, number(m[1]), http.MethodPatch, max)
		return
	}
	states := map[string]bool{"error": true, "failure": true, "pending": true, "success": true}
	if f.gitea {
		states["warning"] = true
	}
	switch m := ghPost.FindStringSubmatch(path); {
	case r.Method == http.MethodPost && m != nil:
		sha := m[1]
		if !shaRE.MatchString(sha) {
			f.refuse(w, http.StatusUnprocessableEntity, "No commit found for SHA: %s", sha)
			return
		}
		var in struct {
			State       string `json:"state"`
			TargetURL   string `json:"target_url"`
			Description string `json:"description"`
			Context     string `json:"context"`
		}
		if err := decodeStrict(r, &in); err != nil {
			f.refuse(w, http.StatusBadRequest, "Problems parsing JSON: %v", err)
			return
		}
		if !states[in.State] {
			f.refuse(w, http.StatusUnprocessableEntity, "state %q is not included in the list", in.State)
			return
		}
		if utf8.RuneCountInString(in.Description) > 140 {
			f.refuse(w, http.StatusUnprocessableEntity, "description is too long (maximum is 140 characters)")
			return
		}
		if in.Context == "" {
			f.refuse(w, http.StatusUnprocessableEntity, "context missing")
			return
		}
		n := 0
		for _, p := range f.accepted {
			if p.SHA == sha && p.Context == in.Context {
				n++
			}
		}
		if n >= 1000 {
			f.refuse(w, http.StatusUnprocessableEntity, "This SHA and context has reached the maximum number of statuses.")
			return
		}
		f.accepted = append(f.accepted, Posted{SHA: sha, State: in.State, Context: in.Context, Description: in.Description, TargetURL: in.TargetURL})
		f.nextID++
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"id": f.nextID, "state": in.State, "context": in.Context, "description": in.Description})
	case r.Method == http.MethodGet && ghList.MatchString(path):
		sha := ghList.FindStringSubmatch(path)[1]
		// GitHub lists newest first with the state as "state"; Gitea and
		// Forgejo list oldest first and name it "status".
		list := []map[string]any{}
		for i := range f.accepted {
			p := f.accepted[i]
			if p.SHA != sha {
				continue
			}
			item := map[string]any{"id": i + 1, "description": p.Description, "context": p.Context, "target_url": p.TargetURL}
			if f.gitea {
				item["status"] = p.State
				list = append(list, item)
			} else {
				item["state"] = p.State
				list = append([]map[string]any{item}, list...)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(list)
	default:
		f.refuse(w, http.StatusNotFound, "Not Found: %s %s", r.Method, r.URL.Path)
	}
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || s[:len(prefix)] != prefix {
		return "", false
	}
	return s[len(prefix):], true
}

// GitLabServer serves GitLab's commit-status API under /api/v4 for
// Project (PRIVATE-TOKEN Token).
type GitLabServer struct{ Server }

// NewGitLab starts a GitLab fake, closed when the test ends.
func NewGitLab(t testing.TB) *GitLabServer {
	f := StartGitLab()
	t.Cleanup(f.Close)
	return f
}

// StartGitLab is NewGitLab outside a test: Close ends it.
func StartGitLab() *GitLabServer {
	f := &GitLabServer{}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

var (
	glPost  = regexp.MustCompile(`^/api/v4/projects/` + regexp.QuoteMeta(url.PathEscape(Project)) + `/statuses/([^/]+)$`)
	glList  = regexp.MustCompile(`^/api/v4/projects/` + regexp.QuoteMeta(url.PathEscape(Project)) + `/repository/commits/([^/]+)/statuses$`)
	glNotes = regexp.MustCompile(`^/api/v4/projects/` + regexp.QuoteMeta(url.PathEscape(Project)) + `/merge_requests/([0-9]+)/notes$`)
	glNote  = regexp.MustCompile(`^/api/v4/projects/` + regexp.QuoteMeta(url.PathEscape(Project)) + `/merge_requests/([0-9]+)/notes/([0-9]+)$`)
)

// MaxCommentGitHub is the longest comment body GitHub accepts (422
// beyond); GitLab's limit is 1,000,000.
const (
	MaxCommentGitHub = 65536
	MaxCommentGitLab = 1000000
)

func (f *GitLabServer) serve(w http.ResponseWriter, r *http.Request) {
	f.wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	path := r.URL.EscapedPath()
	f.requests = append(f.requests, r.Method+" "+path)
	if f.down > 0 {
		f.down--
		http.Error(w, "unavailable", http.StatusBadGateway)
		return
	}
	if got := r.Header.Get("PRIVATE-TOKEN"); got != Token {
		f.refuse(w, http.StatusUnauthorized, "401 Unauthorized")
		return
	}
	if m := glNotes.FindStringSubmatch(path); m != nil {
		f.serveComments(w, r, int(number(m[1])), 0, http.MethodPut, MaxCommentGitLab)
		return
	}
	if m := glNote.FindStringSubmatch(path); m != nil {
		id := number(m[2])
		for _, c := range f.comments {
			if c.ID == id && c.PR != int(number(m[1])) {
				id = 0 // another merge request's note
			}
		}
		f.serveComments(w, r, 0, id, http.MethodPut, MaxCommentGitLab)
		return
	}
	switch {
	case r.Method == http.MethodPost && glPost.MatchString(path):
		sha := glPost.FindStringSubmatch(path)[1]
		if !shaRE.MatchString(sha) {
			f.refuse(w, http.StatusNotFound, "404 Commit Not Found")
			return
		}
		var in struct {
			State       string `json:"state"`
			Name        string `json:"name"`
			TargetURL   string `json:"target_url"`
			Description string `json:"description"`
		}
		if err := decodeStrict(r, &in); err != nil {
			f.refuse(w, http.StatusBadRequest, "%v", err)
			return
		}
		switch in.State {
		case "pending", "running", "success", "failed", "canceled":
		default:
			f.refuse(w, http.StatusBadRequest, "state does not have a valid value")
			return
		}
		if in.Name == "" {
			f.refuse(w, http.StatusBadRequest, "name is missing")
			return
		}
		for i := len(f.accepted) - 1; i >= 0; i-- {
			p := f.accepted[i]
			if p.SHA == sha && p.Context == in.Name {
				if in.State == "pending" && (p.State == "pending" || p.State == "running") {
					f.refuse(w, http.StatusBadRequest, "Cannot transition status via :enqueue from :%s", p.State)
					return
				}
				break
			}
		}
		f.accepted = append(f.accepted, Posted{SHA: sha, State: in.State, Context: in.Name, Description: in.Description, TargetURL: in.TargetURL})
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"id": len(f.accepted), "status": in.State, "name": in.Name})
	case r.Method == http.MethodGet && glList.MatchString(path):
		sha := glList.FindStringSubmatch(path)[1]
		name := r.URL.Query().Get("name")
		type item struct {
			ID          int64  `json:"id"`
			Status      string `json:"status"`
			Name        string `json:"name"`
			Description string `json:"description"`
		}
		// all=false: only the latest status of each name.
		latest := map[string]item{}
		var order []string
		for i, p := range f.accepted {
			if p.SHA != sha || (name != "" && p.Context != name) {
				continue
			}
			if _, ok := latest[p.Context]; !ok {
				order = append(order, p.Context)
			}
			latest[p.Context] = item{ID: int64(i + 1), Status: p.State, Name: p.Context, Description: p.Description}
		}
		list := []item{}
		for _, n := range order {
			list = append(list, latest[n])
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(list)
	default:
		f.refuse(w, http.StatusNotFound, "404 Not Found: %s %s", r.Method, path)
	}
}
