package main

import (
	"context"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/builtin"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state/stateapi"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/controlplane"
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
		srv, st, err := controlplane.StartWorkersAlone(ctx, src.Root(), workers, builtin.Env)
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
