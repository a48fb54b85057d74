package stateapi_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/stateapi"
	"github.com/convergehq/converge/state/statetest"
)

// TestNotFound checks that a missing resource is HTTP 404 and
// converge.ErrNotFound on the client for every call, whether the store
// (reads) or the running scheduler (delete, do) finds it missing.
func TestNotFound(t *testing.T) {
	st := statetest.Open(t)
	srv := providers.NewServer(providers.ServerOptions{Token: "t"})
	t.Cleanup(func() { srv.Close() })
	sched, err := scheduler.New(context.Background(), st, srv, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- sched.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("scheduler run: %v", err)
		}
	})
	h := stateapi.Handler(st, sched)
	c := serve(t, h)

	const missing = converge.ID("vpc/missing")
	tests := []struct {
		name, method, target, body string
		call                       func() error
	}{
		{name: "resource", method: "GET", target: "/v1/resource?id=vpc/missing",
			call: func() error { _, err := c.Resource(ctx, missing); return err }},
		{name: "delete", method: "POST", target: "/v1/delete?id=vpc/missing", body: `{}`,
			call: func() error { return c.Delete(context.Background(), missing) }},
		{name: "do", method: "POST", target: "/v1/do?id=vpc/missing", body: `{"verb":"enable_flow_logs"}`,
			call: func() error { _, err := c.Do(context.Background(), missing, "enable_flow_logs", nil); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.target, strings.NewReader(tt.body)))
			if got, want := rec.Code, http.StatusNotFound; got != want {
				t.Errorf("%s %s: status %d, want %d (%s)", tt.method, tt.target, got, want, rec.Body)
			}
			err := tt.call()
			if got, want := errors.Is(err, converge.ErrNotFound), true; got != want {
				t.Errorf("client %s: error %v wraps converge.ErrNotFound = %v, want %v", tt.name, err, got, want)
			}
			if err != nil && !strings.Contains(err.Error(), string(missing)) {
				t.Errorf("client %s: error %q does not name %s", tt.name, err, missing)
			}
		})
	}
}

// serve serves h on a unix socket and returns a client for it.
func serve(t *testing.T, h http.Handler) *stateapi.Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "stateapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, stateapi.SocketName) // short: unix socket paths are limited
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	c, err := stateapi.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// warner is a controller whose answers may be behind (stateapi.Warner).
type warner struct {
	stateapi.Controller
	msg atomic.Pointer[string]
}

func (w *warner) Warning() string { return *w.msg.Load() }

// TestWarning checks that a Warner's warning reaches the client on every
// reply, errors included, and is gone once the Warner has none.
func TestWarning(t *testing.T) {
	st := statetest.Open(t)
	if err := st.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{{Kind: "vpc", KindVersion: 1, Name: "a", UID: "u1", Phase: converge.PhaseReady}}}); err != nil {
		t.Fatal(err)
	}
	w := &warner{}
	const msg = "the daemon cannot commit its state (commit state: boom): what it shows may be behind"
	w.msg.Store(new(string))
	c := serve(t, stateapi.Handler(st, w))
	tests := []struct {
		name string
		warn string
		call func() error
	}{
		{name: "none", call: func() error { _, err := c.Resource(context.Background(), "vpc/a"); return err }},
		{name: "a resource", warn: msg, call: func() error { _, err := c.Resource(context.Background(), "vpc/a"); return err }},
		{name: "not found", warn: msg, call: func() error {
			if _, err := c.Resource(context.Background(), "vpc/missing"); !errors.Is(err, converge.ErrNotFound) {
				return fmt.Errorf("got %v, want converge.ErrNotFound", err)
			}
			return nil
		}},
		{name: "a list", warn: msg, call: func() error { _, err := c.Resources(context.Background(), state.Filter{}); return err }},
		{name: "recovered", call: func() error { _, err := c.Resource(context.Background(), "vpc/a"); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w.msg.Store(&tt.warn)
			if err := tt.call(); err != nil {
				t.Fatal(err)
			}
			if got := c.Warning(); got != tt.warn {
				t.Errorf("Warning() = %q, want %q", got, tt.warn)
			}
		})
	}
}

// TestResourcesHead checks that the client asks the daemon's store to
// leave specs out when the filter says Head, and only then.
func TestResourcesHead(t *testing.T) {
	st := statetest.Open(t)
	root := &converge.Resource{UID: "u", Kind: "bom", KindVersion: 1, Name: "classic", Phase: converge.PhaseReady,
		Declared: []byte(`{"teams":[1,2]}`), Spec: []byte(`{"teams":[1,2]}`), Status: []byte(`{"n":2}`)}
	if err := st.Commit(context.Background(), &converge.Batch{Resources: []*converge.Resource{root}}); err != nil {
		t.Fatal(err)
	}
	c := serve(t, stateapi.Handler(st, nil))
	for _, head := range []bool{false, true} {
		rs, err := c.Resources(context.Background(), state.Filter{RootsOnly: true, Head: head})
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 1 || rs[0].Name != "classic" || rs[0].Phase != converge.PhaseReady {
			t.Fatalf("Resources(Head: %v) = %+v, want bom/classic, Ready", head, rs)
		}
		if got, want := rs[0].Spec == nil && rs[0].Declared == nil && rs[0].Status == nil, head; got != want {
			t.Errorf("Resources(Head: %v): spec, declared and status left out = %v, want %v", head, got, want)
		}
	}
}

// TestKindsAndConfigs: the read commands learn a daemon's kinds and
// provider configs (their secret fields) through the admin API.
func TestKindsAndConfigs(t *testing.T) {
	st := statetest.Open(t)
	k := &converge.Kind{Name: "db", Version: 1, Reactions: []string{"reconcile"}, Secret: []string{"spec.password", "config.bucket"}}
	cfg := &converge.ProviderConfig{Name: "db-default", Kind: "db", KindVersion: 1, IsDefault: true, Config: []byte(`{"bucket":"b"}`)}
	if err := st.Commit(context.Background(), &converge.Batch{Kinds: []*converge.Kind{k}, Configs: []*converge.ProviderConfig{cfg}}); err != nil {
		t.Fatal(err)
	}
	c := serve(t, stateapi.Handler(st, nil))
	ks, err := c.Kinds(context.Background())
	if err != nil || len(ks) != 1 || !reflect.DeepEqual(ks[0].Secret, k.Secret) {
		t.Fatalf("Kinds() = %+v, %v; want db/v1 with its secret list", ks, err)
	}
	cs, err := c.Configs(context.Background())
	if err != nil || len(cs) != 1 || cs[0].Name != "db-default" || string(cs[0].Config) != `{"bucket":"b"}` {
		t.Fatalf("Configs() = %+v, %v", cs, err)
	}
}
