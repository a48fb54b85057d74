package controlplane

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/stateapi"
)

// quiet is a logger for engines whose log a test does not read.
func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startTestEngine starts an engine on a fresh state directory and closes
// it when the test ends, failing the test if its close fails.
func startTestEngine(t *testing.T, dir string) *Engine {
	t.Helper()
	e, err := Start(context.Background(), Options{StateDir: dir, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close engine: %v", err)
		}
	})
	return e
}

// TestEngineAdminAPI: an engine serves its admin API on the state
// directory's socket (owner-only), answers a reconcile of the repository
// only while something follows one, keeps the pin and suspensions it is
// given, and takes its socket away when it closes.
func TestEngineAdminAPI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	e, err := Start(context.Background(), Options{StateDir: dir, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, stateapi.SocketName)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin socket: %v, %v; want mode 0600", fi, err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("state directory: %v, %v; want mode 0700", fi, err)
	}
	cl, err := stateapi.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cl.Reconcile(ctx, ""); err == nil || !strings.Contains(err.Error(), "follows no repository") {
		t.Errorf("reconcile without a follow loop: %v, want it refused", err)
	}
	rev := converge.Revision{Ref: "main", Hash: strings.Repeat("a", 40)}
	e.setFetchNow(func(context.Context) (converge.Revision, error) { return rev, nil })
	if r, err := cl.Reconcile(ctx, ""); err != nil || r.Hash != rev.Hash {
		t.Errorf("reconcile while following: %+v, %v; want %s", r, err, rev.Hash)
	}
	e.setFetchNow(nil)

	ctl := &converge.Control{Pin: &converge.Pin{Revision: rev, By: "test"}, Suspended: []converge.Suspension{{Root: "vpc/a"}}}
	if err := cl.SetControl(ctx, &converge.Control{}, ctl); err != nil {
		t.Fatal(err)
	}
	if got, err := e.Control(ctx); err != nil || got.Pin == nil || got.Pin.Revision.Hash != rev.Hash {
		t.Errorf("engine's control = %+v, %v; want the pin", got, err)
	}
	if stored, err := e.Store().Control(ctx); err != nil || len(stored.Suspended) != 1 {
		t.Errorf("stored control = %+v, %v; want the suspension", stored, err)
	}
	if due, failed := e.Workers(); due != 0 || len(failed) != 0 {
		t.Errorf("workers: %d due, failed %v; want none (none started)", due, failed)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("admin socket after close: %v, want it gone", err)
	}

	// The next engine reads the pin from the store.
	e2 := startTestEngine(t, dir)
	if got, err := e2.Control(ctx); err != nil || got.Pin == nil || got.Pin.By != "test" {
		t.Errorf("control after a restart = %+v, %v; want the stored pin", got, err)
	}
}

// TestEngineLocked: a second engine on the same state is refused, naming
// why.
func TestEngineLocked(t *testing.T) {
	dir := t.TempDir()
	startTestEngine(t, dir)
	_, err := Start(context.Background(), Options{StateDir: dir, Log: quiet()})
	if err == nil || !strings.Contains(err.Error(), "another converge (sync or serve) is running on "+dir) {
		t.Fatalf("second engine: %v, want it refused", err)
	}
}

func TestExpectedWorkers(t *testing.T) {
	specs := []converge.WorkerSpec{{Name: "a"}, {Name: "b", Replicas: 3}}
	if got, want := ExpectedWorkers(specs), 4; got != want {
		t.Errorf("ExpectedWorkers = %d, want %d", got, want)
	}
}
