package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/stateapi"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/gittest"
)

// BenchmarkPushToDispatch measures what a user waits for after a push:
// from `git push` returning to the first dispatch of the pushed resource
// (its phase leaving Pending), with converge serve following a bare
// repository over file:// and a signed webhook as the trigger (the poll
// interval is an hour, so only the webhook can explain the sync).
//
//	go test -run '^$' -bench PushToDispatch -benchtime 20x ./cmd/converge/
func BenchmarkPushToDispatch(b *testing.B) {
	root := b.TempDir()
	work := filepath.Join(root, "work")
	write := func(name, body string) {
		b.Helper()
		gittest.Write(b, work, map[string]string{name: body})
	}
	kinds, _ := filepath.Glob(filepath.Join(repoRootB(b), "examples", "classic", "kinds", "*.cue"))
	for _, k := range kinds {
		body, _ := os.ReadFile(k)
		write(filepath.Join("kinds", filepath.Base(k)), string(body))
	}
	write("resources/t0.cue", tgwDoc(0))
	os.MkdirAll(work, 0o755)
	gittest.Run(b, work, "init", "-q", "-b", "main")
	gittest.Run(b, work, "add", "-A")
	gittest.Run(b, work, "commit", "-q", "-m", "first")
	gittest.Run(b, root, "init", "-q", "--bare", "-b", "main", "origin.git")
	gittest.Run(b, work, "push", "-q", filepath.Join(root, "origin.git"), "main")

	state := filepath.Join(root, "state")
	os.Setenv("CONVERGE_WEBHOOK_SECRET", "s")
	defer os.Unsetenv("CONVERGE_WEBHOOK_SECRET")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		cmd := newRootCommand()
		cmd.SetArgs([]string{"serve", "--repo", "file://" + filepath.Join(root, "origin.git"), "--state", state,
			"--listen", "127.0.0.1:0", "--poll", "1h", "--start-worker", "classic:1"})
		cmd.SetOut(io.Discard)
		done <- cmd.ExecuteContext(ctx)
	}()
	defer func() { cancel(); <-done }()
	client := waitAdmin(b, state, 30*time.Second)
	waitPhase(b, client, "tgw/t0", func(p converge.Phase) bool { return p == converge.PhaseReady }, 30*time.Second)
	addr, err := os.ReadFile(filepath.Join(state, "http.addr"))
	if err != nil {
		b.Fatal(err)
	}
	hook := "http://" + strings.TrimSpace(string(addr)) + "/hooks/git"
	var total time.Duration
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		b.StopTimer()
		write(fmt.Sprintf("resources/t%d.cue", i), tgwDoc(i))
		gittest.Run(b, work, "add", "-A")
		gittest.Run(b, work, "commit", "-q", "-m", fmt.Sprint("add ", i))
		b.StartTimer()
		start := time.Now()
		gittest.Run(b, work, "push", "-q", filepath.Join(root, "origin.git"), "main")
		body := []byte(`{"ref":"refs/heads/main"}`)
		req, _ := http.NewRequest("POST", hook, strings.NewReader(string(body)))
		req.Header.Set("X-Hub-Signature-256", gitsync.Sign([]byte("s"), body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusAccepted {
			b.Fatalf("webhook: %v %v", resp, err)
		}
		resp.Body.Close()
		waitPhase(b, client, converge.ID(fmt.Sprintf("tgw/t%d", i)), func(p converge.Phase) bool {
			return p != "" && p != converge.PhasePending
		}, 30*time.Second)
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/push-to-dispatch")
}

func tgwDoc(i int) string {
	return fmt.Sprintf("type: \"resource\", kind: \"tgw\", kind_version: 1, name: \"t%d\"\nspec: name: \"t%d\"\n", i, i)
}

func repoRootB(b *testing.B) string {
	wd, err := os.Getwd()
	if err != nil {
		b.Fatal(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

func waitAdmin(b *testing.B, state string, d time.Duration) *stateapi.Client {
	deadline := time.Now().Add(d)
	for {
		if c, err := stateapi.Dial(filepath.Join(state, stateapi.SocketName)); err == nil {
			return c
		}
		if time.Now().After(deadline) {
			b.Fatal("serve's admin API never came up")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitPhase polls the admin API every millisecond until id's phase
// satisfies ok.
func waitPhase(b *testing.B, c *stateapi.Client, id converge.ID, ok func(converge.Phase) bool, d time.Duration) {
	deadline := time.Now().Add(d)
	for {
		if r, err := c.Resource(context.Background(), id); err == nil && ok(r.Phase) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s never reached the wanted phase", id)
		}
		time.Sleep(time.Millisecond)
	}
}
