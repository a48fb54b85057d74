package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/stateapi"
)

// engine is one running control plane: the store, the worker service, the
// scheduler, the worker processes and the admin API. Commands that change
// state (sync, serve, delete, do) start one; read commands never do.
type engine struct {
	dir   string
	store *state.Store
	srv   *providers.Server
	sched *scheduler.Scheduler
	sup   *providers.Supervisor
	admin *http.Server
	token string

	cancel context.CancelFunc
	runErr chan error // the scheduler's Run result
}

type engineOptions struct {
	stateDir string
	// repoDir is where relative worker commands resolve ("" for remote).
	repoDir string
	// workers are started only for a trusted (local) repository.
	workers []converge.WorkerSpec
	// listen is an extra address for external workers ("" for none).
	listen string
	token  string
	log    *slog.Logger
	// workerOut receives the worker processes' output.
	workerOut io.Writer
	sched     scheduler.Config
	// changed, when set, hears which resources every committed batch
	// touched (the live site).
	changed func(ids []converge.ID)
}

// startEngine opens the store and starts everything; close undoes it.
func startEngine(ctx context.Context, o engineOptions) (*engine, error) {
	if err := os.MkdirAll(o.stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	// The sockets in it (workers, admin API) are reachable only through
	// an owner-only directory: one converge created is; one that already
	// holds a store is made so. Any other directory an operator named is
	// left alone, and the sockets' own 0600 protects them.
	if ok, _ := exists(filepath.Join(o.stateDir, state.FileName)); ok {
		if err := os.Chmod(o.stateDir, 0o700); err != nil {
			return nil, fmt.Errorf("restrict state directory: %w", err)
		}
	}
	st, err := state.Open(o.stateDir, state.Options{})
	if errors.Is(err, state.ErrLocked) {
		return nil, fmt.Errorf("open state: %w: another converge (sync or serve) is running on %s", err, o.stateDir)
	}
	if err != nil {
		return nil, fmt.Errorf("open state: %w", err)
	}
	e := &engine{dir: o.stateDir, store: st, runErr: make(chan error, 1)}
	ok := false
	defer func() {
		if !ok {
			e.close()
		}
	}()
	e.token = o.token
	if e.token == "" {
		var b [16]byte
		rand.Read(b[:])
		e.token = hex.EncodeToString(b[:])
	}
	e.srv = providers.NewServer(providers.ServerOptions{Token: e.token, Logger: o.log})
	sock := filepath.Join(o.stateDir, "worker.sock")
	l, err := providers.ListenUnix(sock)
	if err != nil {
		return nil, fmt.Errorf("listen for workers: %w", err)
	}
	go e.srv.Serve(l)
	if o.listen != "" {
		tl, err := net.Listen("tcp", o.listen)
		if err != nil {
			return nil, fmt.Errorf("listen for workers on %s: %w", o.listen, err)
		}
		go e.srv.Serve(tl)
	}
	cfg := o.sched
	cfg.Logger = o.log
	var store scheduler.Store = st
	if o.changed != nil {
		store = observedStore{Store: st, changed: o.changed}
	}
	e.sched, err = scheduler.New(store, e.srv, cfg)
	if err != nil {
		return nil, fmt.Errorf("start scheduler: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancel = cancel
	go func() { e.runErr <- e.sched.Run(runCtx) }()

	adminSock := filepath.Join(o.stateDir, stateapi.SocketName)
	os.Remove(adminSock)
	al, err := net.Listen("unix", adminSock)
	if err != nil {
		return nil, fmt.Errorf("listen for admin api: %w", err)
	}
	if err := os.Chmod(adminSock, 0o600); err != nil {
		al.Close()
		return nil, fmt.Errorf("restrict admin socket: %w", err)
	}
	e.admin = &http.Server{Handler: stateapi.Handler(st, e.sched), ReadHeaderTimeout: 5 * time.Second}
	go e.admin.Serve(al)

	if len(o.workers) > 0 {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("locate converge binary: %w", err)
		}
		e.sup, err = providers.StartWorkers(ctx, o.workers, providers.SupervisorOptions{
			Addr: "unix://" + sock, Token: e.token, Dir: o.repoDir, Self: self,
			Stdout: o.workerOut, Stderr: o.workerOut,
			ExtraEnv: []string{"CONVERGE_STATE_DIR=" + o.stateDir},
		})
		if err != nil {
			return nil, fmt.Errorf("start workers: %w", err)
		}
	}
	ok = true
	return e, nil
}

// expectedWorkers is how many worker processes the engine started.
func expectedWorkers(specs []converge.WorkerSpec) int {
	n := 0
	for _, s := range specs {
		r := s.Replicas
		if r <= 0 {
			r = 1
		}
		n += r
	}
	return n
}

// close stops everything in reverse order, flushing the scheduler so
// nothing it accepted is lost.
func (e *engine) close() error {
	var errs []error
	if e.admin != nil {
		e.admin.Close()
		os.Remove(filepath.Join(e.dir, stateapi.SocketName))
	}
	if e.cancel != nil {
		e.cancel()
		if err := <-e.runErr; err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	}
	if e.sup != nil {
		e.sup.Stop()
	}
	if e.srv != nil {
		e.srv.Close()
	}
	if e.store != nil {
		errs = append(errs, e.store.Close())
	}
	return errors.Join(errs...)
}
