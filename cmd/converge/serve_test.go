package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergehq/converge"
)

// serve stops the live site before it closes the store: stop must not
// return while the site's goroutine still runs.
func TestGoUntilStoppedWaits(t *testing.T) {
	var finished atomic.Bool
	stop := goUntilStopped(context.Background(), func(ctx context.Context) {
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // a last update of the site
		finished.Store(true)
	})
	stop()
	if !finished.Load() {
		t.Fatal("stop returned before the goroutine finished")
	}
}

// lockedBuffer is a bytes.Buffer safe for a command writing while a test
// reads.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeCommitFailing runs serve on the classic example (real workers,
// a real store) while every commit after the applied revision's fails.
// The failure must show everywhere at once: GET /healthz answers 503
// naming it, the revision's verdict (printed and recorded) names it, and
// `get`, answered from the daemon's store, warns on stderr that the store
// is behind, and /metrics says commits fail.
func TestServeCommitFailing(t *testing.T) {
	repo, hash := classicRepo(t)
	stateDir := t.TempDir()
	want := "commit state: " + errDiskFull.Error()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out lockedBuffer
	done := make(chan error, 1)
	go func() {
		c := newRoot(withFailingCommits())
		c.SetArgs([]string{"--repo", repo, "--state", stateDir, "serve", "--listen", "127.0.0.1:0", "--poll", "1h"})
		c.SetOut(&out)
		c.SetErr(&out)
		done <- c.ExecuteContext(ctx)
	}()
	var health string
	waitFor(t, "GET /healthz to answer 503 naming the failing commit", func() bool {
		addr, err := os.ReadFile(filepath.Join(stateDir, "http.addr"))
		if err != nil {
			return false
		}
		resp, err := http.Get("http://" + strings.TrimSpace(string(addr)) + "/healthz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		health = fmt.Sprintf("%d %s", resp.StatusCode, b)
		return err == nil && resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), want)
	})
	metrics := func() string {
		addr, err := os.ReadFile(filepath.Join(stateDir, "http.addr"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get("http://" + strings.TrimSpace(string(addr)) + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if m := metrics(); !strings.Contains(m, "\nconverge_commit_failing 1\n") {
		t.Errorf("/metrics while commits fail does not say converge_commit_failing 1:\n%.4000s", m)
	}
	got, err := runCLI("--state", stateDir, "get", "classicbom/classic")
	if err != nil {
		t.Fatalf("get: %v\n%s", err, got)
	}
	if w := "converge: warning: the daemon cannot commit its state (" + want + ")"; !strings.Contains(got, w) {
		t.Errorf("get while commits fail says:\n%s\nwant a warning %q", got, w)
	}
	waitFor(t, "serve's verdict", func() bool { return strings.Contains(out.String(), " state not durable: ") })
	if !strings.Contains(out.String(), "; "+want) {
		t.Errorf("serve's verdict does not name the failing commit:\n%s", out.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, out.String())
	}
	if v := syncVerdict(t, stateDir, hash); v.State != converge.StateFailure || !strings.Contains(v.Description, "; "+want) {
		t.Errorf("recorded converge/sync = %s %q, want failure naming %q", v.State, v.Description, want)
	}
	if t.Failed() {
		t.Logf("healthz: %s\nserve:\n%s", health, out.String())
	}
}
