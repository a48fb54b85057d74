package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExternalWorkerKilledTasksMoveAtOnce runs a real serve with an
// external worker over TCP that takes an hour per task, SIGKILLs the
// worker once it holds every leaf's task, and starts a fast one: the
// killed worker's tasks go back to the queue as soon as its stream drops
// (not when their 2-minute leases would expire) and the example converges
// on the new worker within a few seconds of the kill (issue 11, which
// measured 35 s).
func TestExternalWorkerKilledTasksMoveAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a serve and three worker processes; skipped with -short")
	}
	repo := replicaRepo(t, []byte(smallBOM), true)
	stateDir := t.TempDir()
	const token = "lost-token"
	srv := startProc(t, "serve", []string{"CONVERGE_WORKER_TOKEN=" + token}, "--repo", repo, "--state", stateDir,
		"serve", "--listen", "", "--workers-listen", "127.0.0.1:0", "--insecure", "--poll", "1h")
	addr := readAddr(t, filepath.Join(stateDir, "workers.addr"))
	worker := func(name, delay string) *proc {
		return startProc(t, name, []string{"CONVERGE_ADDR=" + addr, "CONVERGE_TOKEN=" + token,
			"CONVERGE_WORKER_NAME=" + name, "CONVERGE_STATE_DIR=" + t.TempDir(), "CONVERGE_CONCURRENCY=64", "FAKE_WORK_DELAY=" + delay}, "worker", "classic")
	}
	slow := worker("slow", "1h")
	// Every leaf the composition made is Running on the slow worker.
	running := func() (n, total int) {
		out, err := runCLI("list", "--all", "-o", "json", "--state", stateDir)
		if err != nil {
			return 0, 0
		}
		var l struct {
			Resources []struct {
				Phase string `json:"phase"`
			} `json:"resources"`
		}
		if json.Unmarshal([]byte(out), &l) != nil {
			return 0, 0
		}
		for _, r := range l.Resources {
			if r.Phase == "Running" {
				n++
			}
		}
		return n, len(l.Resources)
	}
	waitUntil(t, 60*time.Second, "the slow worker to hold tasks", func() bool { n, _ := running(); return n >= 4 })
	killed := time.Now()
	if err := slow.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	worker("fast", "0s")
	waitUntil(t, 60*time.Second, "the example to converge on the fast worker", func() bool {
		return strings.Contains(srv.output(), " converged: ")
	})
	took := time.Since(killed)
	t.Logf("converged %v after the worker was killed", took.Round(time.Millisecond))
	// The tasks' leases are 2 minutes: 10 s leaves a loaded machine room
	// and still tells "at once" from "at lease expiry".
	if took > 10*time.Second {
		t.Errorf("converged %v after the kill, want within seconds (the lost tasks waited for something)", took)
	}
	out, err := runCLI("events", "--state", stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "worker slow disconnected") {
		t.Errorf("no event names the disconnected worker:\n%s", out)
	}
	if strings.Contains(out, "lease expired") {
		t.Errorf("a lost task waited for its lease:\n%s", out)
	}
}
