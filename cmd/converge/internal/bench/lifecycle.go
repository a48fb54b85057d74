package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/sync/controlplane"
)

// Lifecycle is one measurement of bench --lifecycle: from a converged
// repository, the recompose of an updated BOM, then the cascade delete of
// the whole composed tree.
type Lifecycle struct {
	// RecomposeDispatched and RecomposeSeconds: from Apply of the updated
	// BOM to everything Ready (and the owed reactor delivery done),
	// durably committed.
	RecomposeDispatched uint64  `json:"recompose_dispatched"`
	RecomposeSeconds    float64 `json:"recompose_seconds"`
	// TeardownResources, TeardownDispatched and TeardownSeconds: from
	// Delete of the root to its row gone from the store.
	TeardownResources  int     `json:"teardown_resources"`
	TeardownDispatched uint64  `json:"teardown_dispatched"`
	TeardownSeconds    float64 `json:"teardown_seconds"`
}

// lifecycle converges repoDir from an empty store in dir (untimed),
// then times the recompose of repoDir with its resources/bom.cue replaced
// by updatedBOM and the teardown of the BOM's root.
func lifecycle(ctx context.Context, dir, repoDir, updatedBOM string, res *cue.Result, o Options) (lr Lifecycle, err error) {
	updated, err := loadWithBOM(filepath.Join(filepath.Dir(dir), filepath.Base(dir)+"-updated"), repoDir, updatedBOM)
	if err != nil {
		return lr, err
	}
	root := converge.ID("")
	for _, r := range updated.Desired.Resources {
		if r.Kind == "classicbom" {
			root = r.ID()
		}
	}
	if root == "" {
		return lr, fmt.Errorf("bench --lifecycle: %s declares no classicbom", updatedBOM)
	}
	workers := res.Desired.Settings.Workers
	e, err := o.start(ctx, controlplane.Options{StateDir: dir, RepoDir: repoDir, Workers: workers,
		Log: o.Log, WrapStore: o.WrapStore})
	if err != nil {
		return lr, err
	}
	defer closeEngine(e, &err)
	for want := controlplane.ExpectedWorkers(workers); len(e.Server().Workers()) < want; {
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return lr, err
		}
	}
	apply := func(r *cue.Result, hash string) (time.Duration, uint64, error) {
		before := e.Scheduler().Progress().Dispatched
		d := r.Desired
		d.Revision = converge.Revision{Ref: "bench", Hash: hash, Dirty: true}
		t0 := time.Now()
		if _, err := e.Scheduler().Apply(ctx, &d, r.Schemas); err != nil {
			return 0, 0, err
		}
		if err := waitConverged(ctx, e); err != nil {
			return 0, 0, err
		}
		return time.Since(t0), e.Scheduler().Progress().Dispatched - before, nil
	}
	if _, _, err := apply(res, "dir:"+repoDir); err != nil {
		return lr, err
	}
	wall, n, err := apply(updated, "dir:"+repoDir+"+"+updatedBOM)
	if err != nil {
		return lr, err
	}
	lr.RecomposeSeconds, lr.RecomposeDispatched = wall.Seconds(), n

	total := e.Scheduler().Progress().Counts.Total
	before := e.Scheduler().Progress().Dispatched
	t0 := time.Now()
	if err := e.Scheduler().Delete(ctx, root); err != nil {
		return lr, err
	}
	for {
		_, err := e.Store().Resource(ctx, root)
		if errors.Is(err, converge.ErrNotFound) {
			break
		}
		if err != nil {
			return lr, err
		}
		if p := e.Scheduler().Progress(); p.Settled == scheduler.Stuck {
			return lr, stuck(e, p)
		}
		if err := sleepCtx(ctx, time.Millisecond); err != nil {
			return lr, err
		}
	}
	lr.TeardownSeconds = time.Since(t0).Seconds()
	lr.TeardownDispatched = e.Scheduler().Progress().Dispatched - before
	lr.TeardownResources = total - e.Scheduler().Progress().Counts.Total
	return lr, nil
}

// waitConverged waits until the scheduler has converged and commits.
func waitConverged(ctx context.Context, e *controlplane.Engine) error {
	for {
		switch p := e.Scheduler().Progress(); p.Settled {
		case scheduler.Converged:
			return e.Scheduler().Flush(ctx)
		case scheduler.Stuck:
			return stuck(e, p)
		}
		if err := sleepCtx(ctx, time.Millisecond); err != nil {
			return err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// loadWithBOM copies repoDir to dst with resources/bom.cue replaced by
// bom and loads it; it must be valid.
func loadWithBOM(dst, repoDir, bom string) (*cue.Result, error) {
	b, err := os.ReadFile(bom)
	if err != nil {
		return nil, fmt.Errorf("bench --lifecycle: %w", err)
	}
	if err := os.CopyFS(dst, os.DirFS(repoDir)); err != nil {
		return nil, fmt.Errorf("bench --lifecycle: copy %s: %w", repoDir, err)
	}
	if err := os.WriteFile(filepath.Join(dst, "resources", "bom.cue"), b, 0o644); err != nil {
		return nil, fmt.Errorf("bench --lifecycle: %w", err)
	}
	res, err := cue.Load(os.DirFS(dst), ".", cue.Options{})
	if err != nil {
		return nil, err
	}
	if len(res.Findings) > 0 {
		return nil, failure("bench --lifecycle: %s with %s is invalid: %s", repoDir, bom, res.Findings[0])
	}
	return res, nil
}
