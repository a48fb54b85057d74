package providers_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers"
)

// TestSupervisorWorkerEnv starts real worker processes with converge's
// own credentials in the environment: none of them reaches a worker, nor
// does any variable the allow-list does not name, while what the
// operator passes with CONVERGE_WORKER_ENV and the base list do.
func TestSupervisorWorkerEnv(t *testing.T) {
	t.Setenv("CONVERGE_WEBHOOK_SECRET", "webhook-secret-4e1f")
	t.Setenv("CONVERGE_WORKER_TOKEN", "worker-token-9a2c")
	t.Setenv("CONVERGE_FORGE_TOKEN", "forge-token-77b0")
	t.Setenv("CONVERGE_UI_TOKEN", "ui-token-5c1d")
	t.Setenv("CLOUD_ADMIN_KEY", "cloud-key-0d3e")
	t.Setenv("PASSME_A", "a")
	t.Setenv("BUILTIN_KNOB", "k")
	// The operator's pattern CONVERGE_* passes none of converge's
	// credentials.
	t.Setenv(providers.EnvWorkerPass, "PASSME_*, CONVERGE_*")
	s, addr := startServer(t, "unix", providers.ServerOptions{HeartbeatInterval: 100 * time.Millisecond})
	sup, err := providers.StartWorkers(context.Background(), []converge.WorkerSpec{
		{Name: "b", Builtin: "classic", Env: map[string]string{"SPEC_ENV": "x"}},
		{Name: "c", Command: []string{self(t), "-test.run=^$"}},
	}, providers.SupervisorOptions{
		Addr: addr, Token: testToken, Self: self(t),
		ExtraEnv:   []string{"CONVERGE_TEST_HELPER_WORKER=1"},
		BuiltinEnv: []string{"BUILTIN_KNOB"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Stop()
	waitFor(t, 20*time.Second, "two workers", func() bool { return hasWorker(s, "b-0") && hasWorker(s, "c-0") })
	got := askAll(t, s, "b-0", "c-0")
	for _, name := range []string{"b-0", "c-0"} {
		env := map[string]string{}
		for _, kv := range got[name].Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		for _, k := range []string{"CONVERGE_WEBHOOK_SECRET", "CONVERGE_WORKER_TOKEN", "CONVERGE_FORGE_TOKEN", "CONVERGE_UI_TOKEN", "CLOUD_ADMIN_KEY", providers.EnvWorkerPass} {
			if v, ok := env[k]; ok {
				t.Errorf("%s got %s=%s", name, k, v)
			}
		}
		for _, v := range got[name].Env {
			for _, secret := range []string{"webhook-secret-4e1f", "worker-token-9a2c", "forge-token-77b0", "ui-token-5c1d", "cloud-key-0d3e"} {
				if strings.Contains(v, secret) {
					t.Errorf("%s's environment holds %q: %s", name, secret, v)
				}
			}
		}
		want := map[string]string{"PASSME_A": "a", "CONVERGE_TOKEN": testToken, "CONVERGE_ADDR": addr,
			"CONVERGE_WORKER_NAME": name, "CONVERGE_TEST_HELPER_WORKER": "1"}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("%s: %s=%q, want %q", name, k, env[k], v)
			}
		}
		if _, ok := env["PATH"]; !ok {
			t.Errorf("%s has no PATH", name)
		}
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range env {
				if !yield(k) {
					return
				}
			}
		})
		t.Logf("%s's environment: %v", name, keys)
	}
	if got["b-0"].Env == nil || !slices.Contains(got["b-0"].Env, "BUILTIN_KNOB=k") {
		t.Errorf("the builtin worker lacks BUILTIN_KNOB=k")
	}
	if slices.Contains(got["c-0"].Env, "BUILTIN_KNOB=k") {
		t.Errorf("the command worker got BUILTIN_KNOB, passed to builtin workers only")
	}
}

func TestWorkerEnv(t *testing.T) {
	environ := []string{"PATH=/bin", "LC_ALL=C", "AWS_REGION=eu", "AWS_SECRET=s", "CONVERGE_WORKER_TOKEN=t", "X", "=y", "LCX=1"}
	got := providers.WorkerEnv(environ, []string{"PATH", "LC_*", "AWS_REGION", "CONVERGE_*"})
	want := []string{"PATH=/bin", "LC_ALL=C", "AWS_REGION=eu"}
	if !slices.Equal(got, want) {
		t.Errorf("WorkerEnv = %q, want %q", got, want)
	}
	if got := providers.ParseWorkerPass(" A, B_* ,,"); !slices.Equal(got, []string{"A", "B_*"}) {
		t.Errorf("ParseWorkerPass = %q", got)
	}
}
