package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state/stateapi"
	gitsync "github.com/convergehq/converge/sync"
)

// refreshConcurrency is how many observes plan --refresh runs at a time.
const refreshConcurrency = 16

// refreshTimeout bounds plan --refresh's observes.
const refreshTimeout = 5 * time.Minute

// planRefresh observes every stored resource whose kind declares observe
// through real workers: the daemon's when one holds the state (admin),
// else those the local repository declares, started for the plan. It
// changes nothing.
func planRefresh(ctx context.Context, admin *stateapi.Client, src *gitsync.Source, workers []converge.WorkerSpec, snap *converge.Snapshot) (*view.Refresh, error) {
	var observe scheduler.ComposeFunc
	stop := func() {}
	switch {
	case admin != nil:
		observe = admin.Observe
	case src.Remote():
		return nil, failed("plan --refresh: no worker to observe with (plan starts no worker for a remote repository, and no converge serve holds the state)")
	case len(workers) == 0:
		return nil, failed("plan --refresh: no worker to observe with: the repository declares no workers")
	default:
		srv, st, err := startPlanWorkers(ctx, src, workers)
		if err != nil {
			return nil, err
		}
		observe, stop = scheduler.TaskRunner(srv), st
	}
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	r := scheduler.Refresh(ctx, snap, observe, refreshConcurrency)
	v := &view.Refresh{Observed: r.Observed, Drift: r.Drift, Failed: r.Failed}
	if v.Drift == nil {
		v.Drift = []scheduler.DriftItem{}
	}
	if v.Failed == nil {
		v.Failed = []scheduler.DriftItem{}
	}
	return v, nil
}

// startPlanWorkers starts the workers a local repository declares on a
// server of their own, until stop.
func startPlanWorkers(ctx context.Context, src *gitsync.Source, workers []converge.WorkerSpec) (*providers.Server, func(), error) {
	tmp, err := os.MkdirTemp("", "converge-plan-")
	if err != nil {
		return nil, nil, fmt.Errorf("create plan directory: %w", err)
	}
	var b [16]byte
	rand.Read(b[:]) // crypto/rand never fails (it crashes the program instead)
	token := hex.EncodeToString(b[:])
	srv := providers.NewServer(providers.ServerOptions{Token: token})
	sock := filepath.Join(tmp, "worker.sock")
	l, err := providers.ListenUnix(sock)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, nil, fmt.Errorf("listen for workers: %w", err)
	}
	go srv.Serve(l)
	self, err := os.Executable()
	if err != nil {
		srv.Close()
		os.RemoveAll(tmp)
		return nil, nil, fmt.Errorf("locate converge binary: %w", err)
	}
	sup, err := providers.StartWorkers(ctx, workers, providers.SupervisorOptions{
		Addr: "unix://" + sock, Token: token, Dir: src.Root(), Self: self, Stdout: io.Discard, Stderr: io.Discard,
		BuiltinEnv: builtinWorkerEnv,
	})
	if err != nil {
		srv.Close()
		os.RemoveAll(tmp)
		return nil, nil, fmt.Errorf("start workers: %w", err)
	}
	return srv, func() {
		sup.Stop()
		srv.Close()
		os.RemoveAll(tmp)
	}, nil
}
