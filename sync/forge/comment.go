package forge

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Marker is the hidden line a plan comment carries: Upsert finds the
// comment it posted before by it, so a new push updates that comment
// instead of adding one.
const Marker = "<!-- converge-plan -->"

// MaxCommentGitHub is the longest comment body GitHub accepts, in
// characters; GitLab takes 1,000,000.
const (
	MaxCommentGitHub = 65536
	MaxCommentGitLab = 1000000
)

// Commenter keeps one comment per pull request (GitLab: merge request):
// the one whose body holds Marker.
type Commenter interface {
	// Upsert replaces the body of pr's comment holding Marker, or posts a
	// new comment when there is none; body must hold Marker. It returns
	// the comment's id and whether it was created.
	Upsert(ctx context.Context, pr int, body string) (id int64, created bool, err error)
	// MaxBody is the longest body the forge accepts, in characters.
	MaxBody() int
}

type comment struct {
	ID   int64  `json:"id"`
	Body string `json:"body"`
}

// commentsAPI is where one forge lists, posts and edits a pull request's
// comments; upsert holds the rule once for all of them.
type commentsAPI struct {
	c    *client
	list func(page int) string
	post string
	edit func(id int64) string
	// editMethod is PATCH (GitHub, Gitea) or PUT (GitLab).
	editMethod string
}

func (a commentsAPI) upsert(ctx context.Context, pr int, body string) (int64, bool, error) {
	if !strings.Contains(body, Marker) {
		return 0, false, fmt.Errorf("upsert comment on #%d: body has no marker", pr)
	}
	const perPage = 100
	for page := 1; page <= 100; page++ {
		var cs []comment
		if err := a.c.do(ctx, http.MethodGet, a.list(page), nil, &cs); err != nil {
			return 0, false, fmt.Errorf("list comments of #%d: %w", pr, err)
		}
		for _, c := range cs {
			if strings.Contains(c.Body, Marker) {
				if c.Body == body {
					return c.ID, false, nil
				}
				if err := a.c.do(ctx, a.editMethod, a.edit(c.ID), map[string]string{"body": body}, nil); err != nil {
					return 0, false, fmt.Errorf("update comment %d on #%d: %w", c.ID, pr, err)
				}
				return c.ID, false, nil
			}
		}
		if len(cs) < perPage {
			break
		}
	}
	var made comment
	if err := a.c.do(ctx, http.MethodPost, a.post, map[string]string{"body": body}, &made); err != nil {
		return 0, false, fmt.Errorf("post comment on #%d: %w", pr, err)
	}
	return made.ID, true, nil
}

// Upsert implements Commenter: GitHub's issue comments (a pull request
// is an issue), or Gitea's and Forgejo's under /api/v1.
func (g *GitHub) Upsert(ctx context.Context, pr int, body string) (int64, bool, error) {
	repo := g.api + "/repos/" + url.PathEscape(g.owner) + "/" + url.PathEscape(g.repo)
	n := strconv.Itoa(pr)
	return commentsAPI{c: &g.c, editMethod: http.MethodPatch,
		list: func(page int) string {
			return repo + "/issues/" + n + "/comments?per_page=100&limit=100&page=" + strconv.Itoa(page)
		},
		post: repo + "/issues/" + n + "/comments",
		edit: func(id int64) string { return repo + "/issues/comments/" + strconv.FormatInt(id, 10) },
	}.upsert(ctx, pr, body)
}

// MaxBody implements Commenter.
func (g *GitHub) MaxBody() int { return MaxCommentGitHub }

// Upsert implements Commenter: GitLab's merge request notes.
func (g *GitLab) Upsert(ctx context.Context, mr int, body string) (int64, bool, error) {
	notes := g.api + "/projects/" + url.PathEscape(g.project) + "/merge_requests/" + strconv.Itoa(mr) + "/notes"
	return commentsAPI{c: &g.c, editMethod: http.MethodPut,
		list: func(page int) string { return notes + "?per_page=100&sort=asc&page=" + strconv.Itoa(page) },
		post: notes,
		edit: func(id int64) string { return notes + "/" + strconv.FormatInt(id, 10) },
	}.upsert(ctx, mr, body)
}

// MaxBody implements Commenter.
func (g *GitLab) MaxBody() int { return MaxCommentGitLab }

// FitComment returns head followed by detail folded in <details>, detail
// cut (on a line boundary, saying so) so the whole is at most max
// characters.
func FitComment(head, detail string, max int) string {
	const open, close = "\n<details><summary>Detail</summary>\n\n```\n", "\n```\n</details>\n"
	const cut = "\n… cut to fit the forge's comment limit: run converge plan --all for the rest"
	whole := head + open + detail + close
	if utf8.RuneCountInString(whole) <= max {
		return whole
	}
	room := max - utf8.RuneCountInString(head+open+close+cut)
	if room <= 0 {
		return head
	}
	var b strings.Builder
	n := 0
	for _, line := range strings.SplitAfter(detail, "\n") {
		l := utf8.RuneCountInString(line)
		if n+l > room {
			break
		}
		b.WriteString(line)
		n += l
	}
	return head + open + strings.TrimRight(b.String(), "\n") + cut + close
}
