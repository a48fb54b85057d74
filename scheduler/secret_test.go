package scheduler_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// TestWorkerMessageSecretsScrubbed: a worker whose error repeats a secret
// spec field and its provider config's secret bucket has neither kept in
// the resource's reason or last error nor in its events: transient,
// then permanent.
func TestWorkerMessageSecretsScrubbed(t *testing.T) {
	const pw, bucket = "pw-PLANTED-77", "cfg-BUCKET-PLANTED"
	kind := &converge.Kind{Name: "db", Version: 1, Reactions: []string{"reconcile"},
		Secret: []string{"spec.password", "config.bucket"}}
	var tries atomic.Int32
	h := func(tk *converge.Task) *converge.Result {
		if tk.Name == "echo" {
			// A status that echoes the config's secret bucket, refused.
			return &converge.Result{Outcome: converge.OutcomeOK, Status: json.RawMessage(`{"conn_id":"NOT-` + bucket + `"}`)}
		}
		msg := fmt.Sprintf("cannot log in with %q to %s", pw, bucket)
		if tries.Add(1) == 1 {
			return &converge.Result{Outcome: converge.OutcomeTransient, Message: msg}
		}
		return &converge.Result{Outcome: converge.OutcomePermanent, Message: msg}
	}
	store := newMemStore()
	hs := start(t, store, newFakeDisp(h, &fakeWorker{name: "w", cap: 4}), testConfig())
	hs.apply(&converge.Desired{
		Revision: converge.Revision{Ref: "main", Hash: "r1"},
		Kinds:    []*converge.Kind{kind},
		Configs: []*converge.ProviderConfig{{Name: "db-default", Kind: "db", KindVersion: 1, IsDefault: true,
			Config: json.RawMessage(`{"bucket":"` + bucket + `"}`)}},
		Resources: []*converge.Resource{{Kind: "db", KindVersion: 1, Name: "main", Origin: converge.OriginGit,
			Declared: json.RawMessage(`{"user":"u","password":"` + pw + `"}`)},
			{Kind: "db", KindVersion: 1, Name: "echo", Origin: converge.OriginGit, Declared: json.RawMessage(`{"user":"e"}`)}},
	}, validatorFunc(func(converge.KindRef, json.RawMessage) error { return nil }))
	hs.waitSettled(scheduler.Stuck, 10*time.Second)
	hs.flush()
	r := store.get("db/main")
	if r == nil || r.Phase != converge.PhaseFailed {
		t.Fatalf("db/main = %+v, want Failed", r)
	}
	echo := store.get("db/echo")
	if echo == nil || !strings.HasPrefix(echo.Reason, "permanent: worker result refused: status.conn_id: invalid value") {
		t.Fatalf("db/echo = %+v, want its status refused", echo)
	}
	var texts []string
	texts = append(texts, r.Reason, r.LastError, echo.Reason, echo.LastError)
	for _, e := range store.eventsOf("") {
		texts = append(texts, e.Type+": "+e.Message)
	}
	all := strings.Join(texts, "\n")
	for _, s := range []string{pw, bucket} {
		if strings.Contains(all, s) {
			t.Errorf("the secret %q was kept:\n%s", s, all)
		}
	}
	if want := "permanent: cannot log in with (secret) to (secret)"; r.Reason != want {
		t.Errorf("reason %q, want %q", r.Reason, want)
	}
	if n := tries.Load(); n < 2 {
		t.Errorf("%d tries, want a transient failure and then a permanent one", n)
	}
}
