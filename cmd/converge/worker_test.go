package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/sdk/sdktest"
)

// TestWorkerCommandRefuses covers the paths that end before sdk.Serve: an
// unknown builtin and a bad chaos knob, each a usage error naming the
// culprit.
func TestWorkerCommandRefuses(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
	}{
		{name: "unknown builtin", args: []string{"nope"}, wantErr: `worker "nope": no such builtin worker (have classic, classic-leaves, onprem)`},
		{name: "no name", args: nil, wantErr: "accepts 1 arg(s), received 0"},
		{name: "bad fault rate", args: []string{"classic"}, env: map[string]string{"FAKE_FAULT_RATE": "2"}, wantErr: "worker classic: FAKE_FAULT_RATE=\"2\""},
		{name: "bad delete delay", args: []string{"classic"}, env: map[string]string{"FAKE_DELETE_DELAY": "soon"}, wantErr: "FAKE_DELETE_DELAY=\"soon\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c := newWorkerCommand(&globals{})
			c.SetArgs(tt.args)
			c.SetOut(io.Discard)
			c.SetErr(io.Discard)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := c.ExecuteContext(ctx)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
			var f errFailed
			if errors.As(err, &f) {
				t.Errorf("err = %v is an exit-1 error, want a usage error (exit 2)", err)
			}
		})
	}
}

// TestWorkerCommandServes runs `converge worker classic` against a real
// control plane (sdktest's providers.Server on a unix socket) and has it
// answer a composition and a reconcile over gRPC.
func TestWorkerCommandServes(t *testing.T) {
	h := sdktest.Start(t)
	t.Setenv("CONVERGE_ADDR", h.Addr)
	t.Setenv("CONVERGE_TOKEN", h.Token)
	t.Setenv("CONVERGE_WORKER_NAME", "builtin-classic")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		c := newWorkerCommand(&globals{})
		c.SetArgs([]string{"classic"})
		done <- c.ExecuteContext(ctx)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !registered(h, "builtin-classic") {
		if time.Now().After(deadline) {
			t.Fatal("worker classic did not register within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	bom := `{"functional_domains":[{"name":"fd-00","networking":true,"service_teams":[{"name":"team-000"}]}]}`
	r := h.Do(t, converge.Task{Kind: "classicbom", KindVersion: 1, Reaction: converge.ReactionCompose, Spec: json.RawMessage(bom)})
	if got, want := r.Outcome, converge.OutcomeOK; got != want {
		t.Fatalf("compose: outcome %s (%s), want %s", got, r.Message, want)
	}
	if got, want := len(r.Children), 5; got != want {
		t.Errorf("compose: %d children, want %d", got, want)
	}
	r = h.Do(t, converge.Task{Kind: "vpc", KindVersion: 2, Reaction: converge.ReactionReconcile,
		Spec: json.RawMessage(`{"account_id":"123456789012","cidr":"10.0.0.0/16","region":"us-west-2"}`)})
	if got, want := r.Outcome, converge.OutcomeOK; got != want {
		t.Fatalf("vpc/v2 reconcile: outcome %s (%s), want %s", got, r.Message, want)
	}
	if !strings.Contains(string(r.Status), `"region":"us-west-2"`) {
		t.Errorf("vpc/v2 status = %s, want the region echoed", r.Status)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("worker classic after cancel: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("worker classic did not stop within 10s of cancel")
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
