package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/sdk/sdktest"
)

// TestMain lets the test binary act as the worker itself: with
// CLASSIC_WORKER_RUN_MAIN=1 it runs main, so the tests below start a real
// worker process without a separate build.
func TestMain(m *testing.M) {
	if os.Getenv("CLASSIC_WORKER_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func worker(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), append([]string{"CLASSIC_WORKER_RUN_MAIN=1"}, env...)...)
	return cmd
}

// TestWorkerProcess starts the standalone worker as a process against a
// real control plane, has it reconcile an account, and stops it with
// SIGTERM (exit 0).
func TestWorkerProcess(t *testing.T) {
	h := sdktest.Start(t)
	cmd := worker(t, "CONVERGE_ADDR="+h.Addr, "CONVERGE_TOKEN="+h.Token, "CONVERGE_WORKER_NAME=example-classic")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for !registered(h, "example-classic") {
		if time.Now().After(deadline) {
			t.Fatalf("worker process did not register within 10s; stderr:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := h.Do(t, converge.Task{Kind: "account", KindVersion: 1, Reaction: converge.ReactionReconcile,
		Spec: json.RawMessage(`{"team_name":"fd-00-team-000"}`)})
	if got, want := r.Outcome, converge.OutcomeOK; got != want {
		t.Fatalf("account reconcile: outcome %s (%s), want %s", got, r.Message, want)
	}
	if !strings.Contains(string(r.Status), `"account_id"`) {
		t.Errorf("account status = %s, want an account_id", r.Status)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("worker after SIGTERM: %v, want exit 0; stderr:\n%s", err, stderr.String())
	}
}

// TestWorkerProcessBadEnv: a bad chaos knob stops the worker at once with
// exit 2 and a message naming the variable.
func TestWorkerProcessBadEnv(t *testing.T) {
	out, err := worker(t, "FAKE_WORK_DELAY=forever").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("err = %v, want exit status 2; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), `FAKE_WORK_DELAY="forever"`) {
		t.Errorf("output = %q, want it to name FAKE_WORK_DELAY", out)
	}
}

func registered(h *sdktest.Harness, name string) bool {
	for _, w := range h.Server.Workers() {
		if w.Name == name {
			return true
		}
	}
	return false
}
