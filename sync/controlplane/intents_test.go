package controlplane

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/etcdtest"
	"github.com/convergehq/converge/state/stateapi"
	gitsync "github.com/convergehq/converge/sync"
)

// TestLeaderClientThroughTerms: a replica's term carries out an
// operator's admin API calls sent through etcd on its engine, with the
// admin socket's answers: the control's compare-and-set (a stale base
// is ErrControlChanged), a resource that does not exist
// (converge.ErrNotFound), a refusal's message; each answer names the
// leader.
func TestLeaderClientThroughTerms(t *testing.T) {
	cluster := etcdtest.Start(t, etcdtest.Options{ElectionMs: 1500})
	o := etcdstate.Options{Endpoints: cluster.Endpoints, Prefix: "/intents"}
	rep, err := etcdstate.NewReplica(o, "a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rep.Close() })
	events := make(termLog, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		NewTerms(rep, time.Minute).Run(ctx, TermOptions{Log: quiet(), Events: events,
			Engine: Options{StateDir: filepath.Join(t.TempDir(), "a"), Log: quiet()},
			Work:   func(ctx context.Context, _ *Engine, _ <-chan struct{}, _ *gitsync.Health) { <-ctx.Done() }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	events.expect(t, "a", "leading")

	lc, err := DialLeader(&o, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	base, err := lc.Control(rctx)
	if err != nil || base.Pin != nil || len(base.Suspended) != 0 {
		t.Fatalf("Control = %+v, %v; want an empty one", base, err)
	}
	if lc.Answered() != "a" {
		t.Errorf("Answered = %q, want a", lc.Answered())
	}
	next := &converge.Control{}
	next.Suspend(converge.Suspension{By: "test", At: time.Now().UTC()})
	if err := lc.SetControl(rctx, base, next); err != nil {
		t.Fatalf("SetControl: %v", err)
	}
	if got, err := lc.Control(rctx); err != nil || len(got.Suspended) != 1 {
		t.Errorf("Control after SetControl = %+v, %v; want everything suspended", got, err)
	}
	if err := lc.SetControl(rctx, base, &converge.Control{}); !errors.Is(err, stateapi.ErrControlChanged) {
		t.Errorf("SetControl on a stale base: %v, want ErrControlChanged", err)
	}
	if err := lc.Delete(rctx, "vpc/missing"); !errors.Is(err, converge.ErrNotFound) {
		t.Errorf("Delete of a resource that does not exist: %v, want ErrNotFound", err)
	}
	if _, err := lc.Reconcile(rctx, ""); err == nil || !strings.Contains(err.Error(), "this converge follows no repository") {
		t.Errorf("Reconcile on an engine that follows nothing: %v, want the admin API's refusal", err)
	}
}

// TestCallIntentRefusesOtherPaths: an intent names an admin API call
// (/v1/…) or is refused; a reply that is not JSON becomes a JSON error.
func TestCallIntentRefusesOtherPaths(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte("404 page not found\n"))
	})
	rep := callIntent(context.Background(), h, etcdstate.Intent{ID: "x", Method: "GET", Path: "/debug/pprof"})
	if rep.Status != http.StatusBadRequest || !strings.Contains(string(rep.Body), "is not an admin API call") {
		t.Errorf("intent for /debug/pprof: %d %s", rep.Status, rep.Body)
	}
	rep = callIntent(context.Background(), h, etcdstate.Intent{ID: "y", Method: "GET", Path: "/v1/nothing"})
	if rep.Status != http.StatusNotFound || string(rep.Body) != `{"error":"404 page not found"}` {
		t.Errorf("intent for /v1/nothing: %d %s", rep.Status, rep.Body)
	}
}
