package sdktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/providers/sdk"
)

// Harness is a real control plane (a providers.Server on a unix socket in a
// temporary directory) with workers connected through sdk.Connect. Tests
// dispatch tasks with Do and inspect the results.
type Harness struct {
	Server *providers.Server
	// Addr is the socket workers dial ("unix:///…").
	Addr string
	// Token is the server's bearer token.
	Token string

	ids     atomic.Uint64
	mu      sync.Mutex // guards waiting and early
	waiting map[string]chan *converge.Result
	early   map[string][]*converge.Result // results nobody waits for yet
}

// Start starts a Harness whose server is closed, and whose workers are
// stopped, when t ends.
func Start(t testing.TB) *Harness {
	t.Helper()
	dir, err := shortTempDir(t)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "w.sock")
	l, err := providers.ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := &Harness{
		Addr:    "unix://" + path,
		Token:   hex.EncodeToString(b),
		waiting: map[string]chan *converge.Result{},
		early:   map[string][]*converge.Result{},
	}
	h.Server = providers.NewServer(providers.ServerOptions{Token: h.Token, HeartbeatInterval: 200 * time.Millisecond})
	served := make(chan struct{})
	go func() { defer close(served); _ = h.Server.Serve(l) }()
	stopped := make(chan struct{})
	go h.demux(stopped)
	t.Cleanup(func() {
		h.Server.Close()
		<-served
		close(stopped)
	})
	return h
}

// shortTempDir returns a temporary directory with a short path: unix
// socket paths are limited to about 100 bytes and t.TempDir embeds the
// test's name.
func shortTempDir(t testing.TB) (string, error) {
	dir, err := os.MkdirTemp("", "sdktest")
	if err != nil {
		return "", err
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir, nil
}

func (h *Harness) demux(stopped <-chan struct{}) {
	for {
		select {
		case r := <-h.Server.Results():
			h.mu.Lock()
			if ch, ok := h.waiting[r.TaskID]; ok {
				ch <- r
			} else {
				h.early[r.TaskID] = append(h.early[r.TaskID], r)
			}
			h.mu.Unlock()
		case <-stopped:
			return
		}
	}
}

// Connect connects a worker named name serving providers and waits until
// it is registered. The worker stops when t ends.
func (h *Harness) Connect(t testing.TB, name string, concurrency int, ps ...sdk.Provider) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sdk.Connect(ctx, sdk.Options{Addr: h.Addr, Token: h.Token, Name: name,
			Concurrency: concurrency, Logger: slog.New(slog.DiscardHandler)}, ps...)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker %s: %v", name, err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, w := range h.Server.Workers() {
			if w.Name == name {
				return
			}
		}
		select {
		case err := <-done:
			t.Fatalf("worker %s: connect returned early: %v", name, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatalf("worker %s did not register within 10s", name)
}

// Fill completes task: an empty ID, Key, UID or Name gets a unique value,
// and a zero Deadline becomes 10 seconds from now.
func (h *Harness) Fill(task *converge.Task) {
	n := strconv.FormatUint(h.ids.Add(1), 10)
	if task.ID == "" {
		task.ID = "task-" + n
	}
	if task.UID == "" {
		task.UID = "uid-" + n
	}
	if task.Name == "" {
		task.Name = "sdktest-" + n
	}
	if task.Generation == 0 {
		task.Generation = 1
	}
	if task.Key == "" {
		task.Key = fmt.Sprintf("%s/%d/%s", task.UID, task.Generation, task.Reaction)
	}
	if task.Deadline.IsZero() {
		task.Deadline = time.Now().Add(10 * time.Second)
	}
}

// Dispatch fills and dispatches task, waiting (up to 10s) while every
// serving worker is at capacity, and returns a channel that receives its
// result.
func (h *Harness) Dispatch(t testing.TB, task *converge.Task) <-chan *converge.Result {
	t.Helper()
	h.Fill(task)
	ch := make(chan *converge.Result, 4)
	h.mu.Lock()
	h.waiting[task.ID] = ch
	for _, r := range h.early[task.ID] {
		ch <- r
	}
	delete(h.early, task.ID)
	h.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := h.Server.Dispatch(context.Background(), task)
		if err == nil {
			return ch
		}
		if !errors.Is(err, converge.ErrNoWorker) || time.Now().After(deadline) {
			t.Fatalf("dispatch %s %s: %v", task.Ref(), task.Reaction, err)
		}
		select {
		case <-h.Server.Changed():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Do dispatches task and waits for its result, failing t if none arrives
// before the task's deadline plus two seconds.
func (h *Harness) Do(t testing.TB, task converge.Task) *converge.Result {
	t.Helper()
	ch := h.Dispatch(t, &task)
	select {
	case r := <-ch:
		return r
	case <-time.After(time.Until(task.Deadline) + 2*time.Second):
		t.Fatalf("%s %s %s: no result by its deadline", task.Reaction, task.Ref(), task.Name)
		return nil
	}
}

// Extra returns a result for taskID that arrived after the one Do or
// Dispatch's channel delivered, or nil: a worker answers every task exactly
// once, so any is a failure. It does not wait; sleep first.
func (h *Harness) Extra(taskID string) *converge.Result {
	h.mu.Lock()
	ch := h.waiting[taskID]
	h.mu.Unlock()
	select {
	case r := <-ch:
		return r
	default:
		return nil
	}
}
