package forge_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/convergehq/converge/sync/forge"
	"github.com/convergehq/converge/sync/forge/forgetest"
)

// TestUpsertComment: one comment per pull request on every forge, found
// by its marker and updated in place; another pull request and other
// people's comments are left alone; the fakes check paths, auth and body.
func TestUpsertComment(t *testing.T) {
	for _, fc := range forgeCases() {
		t.Run(fc.name, func(t *testing.T) {
			r, f := fc.new(t)
			c := r.(forge.Commenter)
			ctx := testCtx(t)
			id1, created, err := c.Upsert(ctx, 7, forge.Marker+"\nfirst")
			if err != nil || !created {
				t.Fatalf("first Upsert = %d, %v, %v; want created", id1, created, err)
			}
			id2, created, err := c.Upsert(ctx, 7, forge.Marker+"\nsecond push")
			if err != nil || created || id2 != id1 {
				t.Fatalf("second Upsert = %d, %v, %v; want comment %d updated", id2, created, err, id1)
			}
			if _, created, err := c.Upsert(ctx, 8, forge.Marker+"\nanother pull request"); err != nil || !created {
				t.Fatalf("Upsert on #8 = %v, %v; want created", created, err)
			}
			if _, _, err := c.Upsert(ctx, 7, "no marker"); err == nil {
				t.Error("Upsert without the marker: no error")
			}
			var got []string
			for _, cm := range f.Comments() {
				got = append(got, fmt.Sprintf("#%d %s", cm.PR, strings.ReplaceAll(cm.Body, forge.Marker+"\n", "")))
			}
			if want := []string{"#7 second push", "#8 another pull request"}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("comments = %q, want %q", got, want)
			}
			if refused := f.Refusals(); len(refused) != 0 {
				t.Errorf("the fake refused %q", refused)
			}
		})
	}
}

// TestUpsertCommentPages: the marked comment is found past the first
// page of a long discussion (the fake lists at most 100 a page).
func TestUpsertCommentPages(t *testing.T) {
	f := forgetest.NewGitHub(t, false)
	c := forge.NewGitHub(f.URL(), forgetest.Owner, forgetest.Repo, forgetest.Token, fastRetry())
	ctx := testCtx(t)
	for i := range 150 {
		f.AddComment(3, fmt.Sprintf("review comment %d", i))
	}
	id, created, err := c.Upsert(ctx, 3, forge.Marker+"\nplan")
	if err != nil || !created {
		t.Fatalf("Upsert = %d, %v, %v; want created", id, created, err)
	}
	if got, created, err := c.Upsert(ctx, 3, forge.Marker+"\nplan 2"); err != nil || created || got != id {
		t.Errorf("Upsert = %d, %v, %v; want %d updated", got, created, err, id)
	}
	if n := len(f.Comments()); n != 151 {
		t.Errorf("%d comments, want 151", n)
	}
}

// TestGitHubCommentLimit: GitHub refuses a body over 65,536 characters;
// FitComment cuts the detail to fit, on a line, saying so.
func TestGitHubCommentLimit(t *testing.T) {
	f := forgetest.NewGitHub(t, false)
	c := forge.NewGitHub(f.URL(), forgetest.Owner, forgetest.Repo, forgetest.Token, fastRetry())
	ctx := testCtx(t)
	detail := strings.Repeat("~ vpc/fd-00-team-001: cidr \"10.0.0.0/24\" → \"10.1.0.0/24\"\n", 3000)
	if _, _, err := c.Upsert(ctx, 1, forge.Marker+"\n"+detail); err == nil {
		t.Fatal("a body of 170,000 characters was accepted")
	}
	body := forge.FitComment(forge.Marker+"\n## converge plan\n", detail, c.MaxBody())
	if n := utf8.RuneCountInString(body); n > forge.MaxCommentGitHub {
		t.Fatalf("FitComment = %d characters, want at most %d", n, forge.MaxCommentGitHub)
	}
	for _, want := range []string{"<details>", "</details>", "cut to fit", "team-001: cidr"} {
		if !strings.Contains(body, want) {
			t.Errorf("FitComment lacks %q", want)
		}
	}
	if _, _, err := c.Upsert(ctx, 1, body); err != nil {
		t.Fatalf("Upsert of the fitted body: %v", err)
	}
	if short := forge.FitComment("head\n", "one line", 1000); !strings.Contains(short, "one line") || strings.Contains(short, "cut to fit") {
		t.Errorf("FitComment of a short detail = %q", short)
	}
}
