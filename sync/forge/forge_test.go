package forge_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/sync/forge"
	"github.com/convergehq/converge/sync/forge/forgetest"
)

const (
	sha1 = "4f1d2c3b4a5968778695a4b3c2d1e0f9a8b7c6d5"
	sha2 = "0123456789abcdef0123456789abcdef01234567"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func fastRetry() forge.Option { return forge.WithRetry(4, time.Millisecond, 4*time.Millisecond) }

func status(ctx, state, desc string) converge.CommitStatus {
	return converge.CommitStatus{Context: ctx, State: state, Description: desc,
		TargetURL: "http://site.invalid/revisions/x", Time: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
}

// forgeCase is one forge flavour with its fake.
type forgeCase struct {
	name        string
	new         func(t *testing.T) (forge.Reporter, *forgetest.Server)
	wantFailure string // what converge's failure becomes
}

func forgeCases() []forgeCase {
	return []forgeCase{
		{name: "github", wantFailure: "failure", new: func(t *testing.T) (forge.Reporter, *forgetest.Server) {
			f := forgetest.NewGitHub(t, false)
			return forge.NewGitHub(f.URL(), forgetest.Owner, forgetest.Repo, forgetest.Token, fastRetry()), &f.Server
		}},
		{name: "gitea", wantFailure: "failure", new: func(t *testing.T) (forge.Reporter, *forgetest.Server) {
			f := forgetest.NewGitHub(t, true)
			return forge.NewGitea(f.URL(), forgetest.Owner, forgetest.Repo, forgetest.Token, fastRetry()), &f.Server
		}},
		{name: "gitlab", wantFailure: "failed", new: func(t *testing.T) (forge.Reporter, *forgetest.Server) {
			f := forgetest.NewGitLab(t)
			return forge.NewGitLab(f.URL(), forgetest.Project, forgetest.Token, fastRetry()), &f.Server
		}},
	}
}

// TestPendingThenSuccess: a sync's pending then success arrive once each
// on the right sha, and a repeated state is not re-posted.
func TestPendingThenSuccess(t *testing.T) {
	for _, tc := range forgeCases() {
		t.Run(tc.name, func(t *testing.T) {
			r, f := tc.new(t)
			ctx := testCtx(t)
			steps := []converge.CommitStatus{
				status(converge.ContextSync, converge.StatePending, "applied, converging"),
				status(converge.ContextSync, converge.StatePending, "applied, converging"),
				status(converge.ContextSync, converge.StateSuccess, "3652/3652 Ready"),
				status(converge.ContextSync, converge.StateSuccess, "3652/3652 Ready"),
				status(converge.ContextValidate, converge.StateFailure, "1 error: x.cue:1:1: a: field not allowed"),
			}
			for _, st := range steps {
				if err := r.Report(ctx, sha1, st); err != nil {
					t.Fatal(err)
				}
			}
			want := []forgetest.Posted{
				{SHA: sha1, State: "pending", Context: converge.ContextSync, Description: "applied, converging", TargetURL: steps[0].TargetURL},
				{SHA: sha1, State: "success", Context: converge.ContextSync, Description: "3652/3652 Ready", TargetURL: steps[0].TargetURL},
				{SHA: sha1, State: tc.wantFailure, Context: converge.ContextValidate, Description: steps[4].Description, TargetURL: steps[0].TargetURL},
			}
			if got := f.Statuses(); !reflect.DeepEqual(got, want) {
				t.Errorf("accepted:\n got %+v\nwant %+v", got, want)
			}
			if got := f.Refusals(); len(got) != 0 {
				t.Errorf("refused: %v", got)
			}
			if got, want := f.Posts(), 3; got != want {
				t.Errorf("POSTs: got %d, want %d", got, want)
			}
		})
	}
}

// TestGitLabNeverRepostsPending: after success, a new pending is allowed;
// two pendings in a row never reach GitLab (it would answer 400).
func TestGitLabNeverRepostsPending(t *testing.T) {
	f := forgetest.NewGitLab(t)
	r := forge.NewGitLab(f.URL(), forgetest.Project, forgetest.Token, fastRetry())
	ctx := testCtx(t)
	// The fake refuses a repeated pending, as GitLab does.
	post := func(state string) int {
		req, _ := http.NewRequest(http.MethodPost, f.URL()+"/api/v4/projects/group%2Fsite/statuses/"+sha2,
			strings.NewReader(`{"state":"`+state+`","name":"direct"}`))
		req.Header.Set("PRIVATE-TOKEN", forgetest.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got, want := post("pending"), http.StatusCreated; got != want {
		t.Fatalf("first pending: got %d, want %d", got, want)
	}
	if got, want := post("pending"), http.StatusBadRequest; got != want {
		t.Fatalf("repeated pending: got %d, want %d", got, want)
	}

	for _, st := range []converge.CommitStatus{
		status(converge.ContextSync, converge.StatePending, "applied, converging"),
		status(converge.ContextSync, converge.StatePending, "applied, converging (retry)"),
		status(converge.ContextSync, converge.StateError, "apply: boom"),
		status(converge.ContextSync, converge.StatePending, "applied, converging"),
	} {
		if err := r.Report(ctx, sha1, st); err != nil {
			t.Fatalf("report %s %q: %v", st.State, st.Description, err)
		}
	}
	var got []string
	for _, p := range f.Statuses() {
		if p.SHA == sha1 {
			got = append(got, p.State)
		}
	}
	if want := []string{"pending", "failed", "pending"}; !reflect.DeepEqual(got, want) {
		t.Errorf("states: got %v, want %v", got, want)
	}
}

// TestLongDescriptionTruncated: the API refuses over 140 characters; the
// reporter cuts to 140 with "…" so the status is accepted.
func TestLongDescriptionTruncated(t *testing.T) {
	long := "not applied: " + strings.Repeat("vpc/v1 spec.région: field added as required; ", 10)
	for _, tc := range forgeCases() {
		t.Run(tc.name, func(t *testing.T) {
			r, f := tc.new(t)
			ctx := testCtx(t)
			if err := r.Report(ctx, sha1, status(converge.ContextLint, converge.StateFailure, long)); err != nil {
				t.Fatal(err)
			}
			got := f.Statuses()
			if len(got) != 1 {
				t.Fatalf("accepted %d statuses, want 1 (refused: %v)", len(got), f.Refusals())
			}
			d := got[0].Description
			if got, want := utf8.RuneCountInString(d), forge.MaxDescription; got != want {
				t.Errorf("description length: got %d, want %d", got, want)
			}
			if !strings.HasSuffix(d, "…") || !strings.HasPrefix(long, strings.TrimSuffix(d, "…")) {
				t.Errorf("description %q is not a prefix of the original ending in …", d)
			}
			// Reporting the same long description again posts nothing: the
			// comparison is with the truncated text.
			if err := r.Report(ctx, sha1, status(converge.ContextLint, converge.StateFailure, long)); err != nil {
				t.Fatal(err)
			}
			if got, want := f.Posts(), 1; got != want {
				t.Errorf("POSTs: got %d, want %d", got, want)
			}
		})
	}
}

// TestRetries: 5xx is retried with backoff within one Report; 4xx is not.
func TestRetries(t *testing.T) {
	f := forgetest.NewGitHub(t, false)
	ctx := testCtx(t)
	r := forge.NewGitHub(f.URL(), forgetest.Owner, forgetest.Repo, forgetest.Token, forge.WithRetry(5, time.Millisecond, 2*time.Millisecond))
	f.SetDown(3) // the list fails twice, then succeeds; the post fails once
	if err := r.Report(ctx, sha1, status(converge.ContextSync, converge.StatePending, "applied")); err != nil {
		t.Fatalf("report through 3 failures with 5 attempts: %v", err)
	}
	if got, want := len(f.Statuses()), 1; got != want {
		t.Errorf("accepted: got %d, want %d", got, want)
	}

	bad := forge.NewGitHub(f.URL(), forgetest.Owner, forgetest.Repo, "wrong", forge.WithRetry(5, time.Millisecond, 2*time.Millisecond))
	before := f.Requests()
	err := bad.Report(ctx, sha1, status(converge.ContextSync, converge.StateSuccess, "done"))
	var se *forge.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusUnauthorized {
		t.Fatalf("bad token: got %v, want a 401 forge.StatusError", err)
	}
	if !forge.Permanent(err) {
		t.Errorf("401 is not forge.Permanent")
	}
	if got, want := f.Requests()-before, 1; got != want {
		t.Errorf("requests for a 401: got %d, want %d (no retry)", got, want)
	}

	f.SetDown(10)
	err = r.Report(ctx, sha1, status(converge.ContextSync, converge.StateSuccess, "done"))
	if err == nil || forge.Permanent(err) {
		t.Fatalf("forge down past the attempts: got %v, want a temporary error", err)
	}
	if err := r.Report(ctx, sha1, status(converge.ContextSync, "running", "x")); !errors.Is(err, forge.ErrState) {
		t.Errorf("unknown state: got %v, want forge.ErrState", err)
	}
}

// TestPublisherForgeDown: statuses published while the forge is down are
// kept and posted, in order and once each, when it is back.
func TestPublisherForgeDown(t *testing.T) {
	for _, tc := range forgeCases() {
		t.Run(tc.name, func(t *testing.T) {
			r, f := tc.new(t)
			ctx := testCtx(t)
			p := forge.NewPublisher(r, nil)
			f.SetDown(1 << 30)
			p.Publish(sha1, status(converge.ContextSync, converge.StatePending, "applied, converging"))
			p.Publish(sha1, status(converge.ContextSync, converge.StateSuccess, "10/10 Ready"))
			p.Publish(sha2, status(converge.ContextValidate, converge.StateSuccess, "3 documents valid"))
			if err := p.Flush(ctx); err == nil || forge.Permanent(err) {
				t.Fatalf("flush with the forge down: got %v, want a temporary error", err)
			}
			if got, want := p.Pending(), 3; got != want {
				t.Fatalf("pending after a failed flush: got %d, want %d", got, want)
			}
			f.SetDown(0)
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range f.Statuses() {
				got = append(got, s.SHA[:4]+" "+s.Context+" "+s.State)
			}
			want := []string{"4f1d converge/sync pending", "4f1d converge/sync success", "0123 converge/validate success"}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("posted:\n got %v\nwant %v", got, want)
			}
			if got, want := p.Pending(), 0; got != want {
				t.Errorf("pending: got %d, want %d", got, want)
			}
		})
	}
}

// TestPublisherRun: Run posts as statuses come, retries while the forge is
// down, and Publish returns at once even while a post hangs.
func TestPublisherRun(t *testing.T) {
	f := forgetest.NewGitHub(t, false)
	hang := make(chan struct{})
	f.Gate = hang
	r := forge.NewGitHub(f.URL(), forgetest.Owner, forgetest.Repo, forgetest.Token, fastRetry())
	p := forge.NewPublisher(r, nil)
	p.RetryEvery = 5 * time.Millisecond
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// The first post hangs; 200 publishes must not wait for it.
	start := time.Now()
	for i := range 200 {
		st := status(converge.ContextSync, converge.StatePending, "applied")
		if i%2 == 1 {
			st.State, st.Description = converge.StateSuccess, "done"
		}
		p.Publish(sha1, st)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("200 publishes took %s while the forge hung", took)
	}
	f.SetDown(6) // then 500s for a while
	close(hang)
	deadline := time.Now().Add(20 * time.Second)
	for p.Pending() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got, want := p.Pending(), 0; got != want {
		t.Fatalf("pending after the forge came back: got %d, want %d", got, want)
	}
	// Alternating pending/success: every one is a change, none is lost.
	if got, want := len(f.Statuses()), 200; got != want {
		t.Errorf("accepted: got %d, want %d", got, want)
	}
}

// TestBackfill posts only what the forge is missing.
func TestBackfill(t *testing.T) {
	for _, tc := range forgeCases() {
		t.Run(tc.name, func(t *testing.T) {
			r, f := tc.new(t)
			ctx := testCtx(t)
			recs := []*converge.RevisionRecord{
				{Revision: converge.Revision{Ref: "main", Hash: sha2}, Statuses: []converge.CommitStatus{
					status(converge.ContextValidate, converge.StateSuccess, "3 documents valid"),
					status(converge.ContextSync, converge.StateSuccess, "3/3 Ready"),
				}},
				{Revision: converge.Revision{Ref: "main", Hash: sha1}, Statuses: []converge.CommitStatus{
					status(converge.ContextValidate, converge.StateSuccess, "3 documents valid"),
					status(converge.ContextSync, converge.StateFailure, "stuck: 2/3 Ready"),
				}},
				{Revision: converge.Revision{Ref: "main", Dirty: true}},
			}
			// The forge already has sha2's statuses.
			for _, st := range recs[0].Statuses {
				if err := r.Report(ctx, sha2, st); err != nil {
					t.Fatal(err)
				}
			}
			before := f.Posts()
			p := forge.NewPublisher(r, nil)
			if err := p.Backfill(ctx, recs); err != nil {
				t.Fatal(err)
			}
			if got, want := f.Posts()-before, 2; got != want {
				t.Errorf("backfill POSTs: got %d, want %d", got, want)
			}
			if err := p.Backfill(ctx, recs); err != nil {
				t.Fatal(err)
			}
			if got, want := f.Posts()-before, 2; got != want {
				t.Errorf("POSTs after a second backfill: got %d, want %d", got, want)
			}
		})
	}
}

// TestPublisherDropsRefused: a status the forge refuses for good is
// logged and dropped, and does not hold back the ones after it.
func TestPublisherDropsRefused(t *testing.T) {
	f := forgetest.NewGitHub(t, false)
	var logs bytes.Buffer
	p := forge.NewPublisher(forge.NewGitHub(f.URL(), forgetest.Owner, forgetest.Repo, forgetest.Token, fastRetry()), slogTo(&logs))
	p.Publish("not-a-sha", status(converge.ContextSync, converge.StateSuccess, "done"))
	p.Publish(sha1, status(converge.ContextSync, converge.StateSuccess, "done"))
	err := p.Flush(testCtx(t))
	if !forge.Permanent(err) {
		t.Fatalf("flush: got %v, want the permanent refusal", err)
	}
	if got, want := len(f.Statuses()), 1; got != want {
		t.Errorf("accepted: got %d, want %d", got, want)
	}
	if !strings.Contains(logs.String(), "forge refused status") {
		t.Errorf("log lacks the refusal:\n%s", logs.String())
	}
}

func slogTo(w *bytes.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// TestStdlibOnly: the forge package imports nothing beyond the standard
// library and converge's domain types.
func TestStdlibOnly(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list dependencies with")
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}",
		"github.com/convergehq/converge/sync/forge").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/convergehq/converge" && p != "github.com/convergehq/converge/sync/forge" {
			t.Errorf("sync/forge depends on %s", p)
		}
	}
}

// TestForgeThatNeverAnswers: a forge that accepts the connection and
// never answers (a real TCP server on loopback) costs a status at most
// its HTTP client's timeout per attempt, then an error naming the URL.
func TestForgeThatNeverAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never answered
		}
	}()
	defer func() {
		l.Close()
		<-accepted
		for _, c := range conns {
			c.Close()
		}
	}()
	url := "http://" + l.Addr().String()
	r := forge.NewGitHub(url, forgetest.Owner, forgetest.Repo, forgetest.Token,
		forge.WithHTTPClient(&http.Client{Timeout: 200 * time.Millisecond}), forge.WithRetry(2, time.Millisecond, time.Millisecond))
	t0 := time.Now()
	err = r.Report(testCtx(t), sha1, status(converge.ContextSync, converge.StatePending, "applied"))
	if err == nil || !strings.Contains(err.Error(), url) || !strings.Contains(err.Error(), "Timeout") {
		t.Errorf("Report to a forge that never answers: %v; want a timeout naming %s", err, url)
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("Report took %v, want about two 200ms attempts", took)
	}
}
