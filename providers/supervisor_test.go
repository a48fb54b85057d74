package providers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers"
)

// syncBuffer collects worker output for failure messages.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func self(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// askAll dispatches helper reconciles until every named worker has
// answered, and returns each one's report.
func askAll(t *testing.T, s *providers.Server, names ...string) map[string]helperStatus {
	t.Helper()
	got := map[string]helperStatus{}
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < len(names) {
		if time.Now().After(deadline) {
			t.Fatalf("heard from %v, want %v", got, names)
		}
		if err := s.Dispatch(context.Background(), task("helper", 1, "reconcile")); err != nil {
			t.Fatal(err)
		}
		r := result(t, s, 5*time.Second)
		var st helperStatus
		if err := json.Unmarshal(r.Status, &st); err != nil {
			t.Fatalf("result %+v: %v", r, err)
		}
		got[r.Worker] = st
	}
	return got
}

func TestSupervisor(t *testing.T) {
	s, addr := startServer(t, "unix", providers.ServerOptions{HeartbeatInterval: 100 * time.Millisecond})
	out := &syncBuffer{}
	dir := t.TempDir()
	// A Command worker with a relative path is resolved against Dir.
	if err := os.Symlink(self(t), filepath.Join(dir, "helper")); err != nil {
		t.Fatal(err)
	}
	sup, err := providers.StartWorkers(context.Background(), []converge.WorkerSpec{
		{Name: "b", Builtin: "classic", Replicas: 2, Env: map[string]string{"SPEC_ENV": "x"}},
		{Name: "c", Command: []string{"./helper", "-test.run=^$"}},
	}, providers.SupervisorOptions{
		Addr: addr, Token: testToken, Dir: dir, Self: self(t),
		ExtraEnv: []string{"CONVERGE_TEST_HELPER_WORKER=1", "EXTRA=y"},
		Stdout:   out, Stderr: out,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Stop()
	defer func() {
		if t.Failed() {
			t.Logf("worker output:\n%s", out)
		}
	}()
	waitFor(t, 20*time.Second, "three workers", func() bool {
		return hasWorker(s, "b-0") && hasWorker(s, "b-1") && hasWorker(s, "c-0")
	})
	got := askAll(t, s, "b-0", "b-1", "c-0")
	for _, name := range []string{"b-0", "b-1"} {
		if st := got[name]; !slices.Equal(st.Argv, []string{"converge", "worker", "classic"}) ||
			st.Name != name || st.Extra != "y" || st.SpecEnv != "x" {
			t.Errorf("%s started as %+v, want argv [converge worker classic], its name and both env vars", name, st)
		}
	}
	if st := got["c-0"]; !slices.Equal(st.Argv, []string{"./helper", "-test.run=^$"}) || st.Extra != "y" || st.SpecEnv != "" {
		t.Errorf("c-0 started as %+v, want argv [./helper -test.run=^$], EXTRA only", st)
	}
	pids := sup.Pids()
	if len(pids) != 3 {
		t.Fatalf("pids = %v, want 3", pids)
	}

	// kill -9 one worker: it is restarted and registers again.
	victim := got["b-0"].Pid
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "b-0 restarted with a new pid", func() bool {
		p := sup.Pids()
		return len(p) == 3 && !slices.Contains(p, victim)
	})
	waitFor(t, 20*time.Second, "b-0 registered again", func() bool {
		for _, w := range s.Workers() {
			if w.Name == "b-0" && w.ConnectedSince.After(time.Now().Add(-10*time.Second)) && len(s.Workers()) == 3 {
				return true
			}
		}
		return false
	})
	if again := askAll(t, s, "b-0", "b-1", "c-0"); again["b-0"].Pid == victim {
		t.Errorf("b-0 still answers from the killed pid %d", victim)
	}

	pids = sup.Pids()
	start := time.Now()
	sup.Stop()
	if el := time.Since(start); el > 4*time.Second {
		t.Errorf("Stop took %v: workers ignored SIGTERM", el)
	}
	if p := sup.Pids(); len(p) != 0 {
		t.Errorf("pids after Stop = %v, want none", p)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d still exists after Stop (kill 0: %v)", pid, err)
		}
	}
	waitFor(t, 5*time.Second, "workers gone from the server", func() bool { return len(s.Workers()) == 0 })
}

func TestSupervisorKillsAfterTimeout(t *testing.T) {
	s, addr := startServer(t, "unix", providers.ServerOptions{})
	sup, err := providers.StartWorkers(context.Background(), []converge.WorkerSpec{{Name: "stubborn", Command: []string{self(t)}}},
		providers.SupervisorOptions{Addr: addr, Token: testToken, StopTimeout: 300 * time.Millisecond,
			ExtraEnv: []string{"CONVERGE_TEST_HELPER_WORKER=1", "HELPER_IGNORE_TERM=1"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "stubborn worker", func() bool { return hasWorker(s, "stubborn-0") })
	pids := sup.Pids()
	start := time.Now()
	sup.Stop()
	if el := time.Since(start); el < 250*time.Millisecond || el > 3*time.Second {
		t.Errorf("Stop took %v, want about the 300ms stop timeout", el)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d survived Stop", pid)
		}
	}
}

func TestSupervisorContextStops(t *testing.T) {
	s, addr := startServer(t, "unix", providers.ServerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	sup, err := providers.StartWorkers(ctx, []converge.WorkerSpec{{Name: "w", Command: []string{self(t)}}},
		providers.SupervisorOptions{Addr: addr, Token: testToken, ExtraEnv: []string{"CONVERGE_TEST_HELPER_WORKER=1"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "worker", func() bool { return hasWorker(s, "w-0") })
	cancel()
	waitFor(t, 10*time.Second, "worker gone after ctx done", func() bool { return len(sup.Pids()) == 0 && len(s.Workers()) == 0 })
	sup.Stop()
}

func TestSupervisorInvalidSpecs(t *testing.T) {
	tests := []struct {
		name  string
		specs []converge.WorkerSpec
		self  string
	}{
		{name: "no name", specs: []converge.WorkerSpec{{Command: []string{"true"}}}, self: "/bin/converge"},
		{name: "duplicate", specs: []converge.WorkerSpec{{Name: "a", Command: []string{"true"}}, {Name: "a", Command: []string{"true"}}}, self: "/bin/converge"},
		{name: "builtin and command", specs: []converge.WorkerSpec{{Name: "a", Builtin: "classic", Command: []string{"true"}}}, self: "/bin/converge"},
		{name: "neither", specs: []converge.WorkerSpec{{Name: "a"}}, self: "/bin/converge"},
		{name: "builtin without self", specs: []converge.WorkerSpec{{Name: "a", Builtin: "classic"}}},
		{name: "command not on PATH", specs: []converge.WorkerSpec{{Name: "a", Command: []string{"no-such-converge-worker"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sup, err := providers.StartWorkers(context.Background(), tt.specs, providers.SupervisorOptions{Self: tt.self, Addr: "unix:///nonexistent"})
			if err == nil {
				sup.Stop()
				t.Fatal("StartWorkers accepted an invalid spec")
			}
		})
	}
}

// A worker that cannot start or keeps exiting is reported by Failed, with
// why, so a sync can say so instead of waiting for it; one that starts
// and connects is not.
func TestSupervisorFailed(t *testing.T) {
	s, addr := startServer(t, "unix", providers.ServerOptions{})
	dir := t.TempDir()
	sup, err := providers.StartWorkers(context.Background(), []converge.WorkerSpec{
		{Name: "missing", Command: []string{"./bin/no-such-worker"}},
		{Name: "quits", Command: []string{self(t), "-test.run=^$"}},
		{Name: "fine", Command: []string{self(t)}, Env: map[string]string{"CONVERGE_TEST_HELPER_WORKER": "1"}},
	}, providers.SupervisorOptions{Addr: addr, Token: testToken, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Stop()
	var got []providers.WorkerFailure
	waitFor(t, 20*time.Second, "two failures and one worker", func() bool {
		got = sup.Failed()
		return len(got) == 2 && hasWorker(s, "fine-0")
	})
	if got[0].Name != "missing-0" || got[0].Started || !errors.Is(got[0].Err, os.ErrNotExist) {
		t.Errorf("Failed()[0] = %+v, want missing-0 not started: no such file", got[0])
	}
	if want := "worker missing-0 failed to start: "; !strings.HasPrefix(got[0].String(), want) {
		t.Errorf("String() = %q, want prefix %q", got[0].String(), want)
	}
	if got[1].Name != "quits-0" || !got[1].Started || got[1].Err == nil {
		t.Errorf("Failed()[1] = %+v, want quits-0 started, with its exit", got[1])
	}
}

// A worker started through a launcher that does not pass SIGTERM on
// (`go run ./worker` leaves its child running) is stopped with its whole
// process group: Stop returns, the child is gone, and its output pipes
// hold nothing open (converge init's scaffold runs its worker so; sync
// used to hang at exit).
func TestSupervisorStopsLauncherChildren(t *testing.T) {
	s, addr := startServer(t, "unix", providers.ServerOptions{})
	launcher := filepath.Join(t.TempDir(), "launch.sh")
	script := "#!/bin/sh\ntrap 'exit 0' TERM\n\"$0\" >/dev/stderr &\nwait\n"
	if err := os.WriteFile(launcher, []byte(strings.Replace(script, "$0", self(t), 1)), 0o755); err != nil {
		t.Fatal(err)
	}
	sup, err := providers.StartWorkers(context.Background(), []converge.WorkerSpec{{Name: "launched", Command: []string{launcher}}},
		providers.SupervisorOptions{Addr: addr, Token: testToken, StopTimeout: 2 * time.Second, RelogOutput: true,
			ExtraEnv: []string{"CONVERGE_TEST_HELPER_WORKER=1"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the launched worker", func() bool { return hasWorker(s, "launched-0") })
	child := askAll(t, s, "launched-0")["launched-0"].Pid
	stopped := make(chan struct{})
	go func() { sup.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop hung on a worker whose launcher left its child running")
	}
	waitFor(t, 10*time.Second, "the launcher's child gone", func() bool { return errors.Is(syscall.Kill(child, 0), syscall.ESRCH) })
}
