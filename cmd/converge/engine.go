package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/stateapi"
	gitsync "github.com/convergehq/converge/sync"
)

// engine is one running control plane: the store, the worker service, the
// scheduler, the worker processes and the admin API. Commands that change
// state (sync, serve, delete, do) start one; read commands never do.
type engine struct {
	dir   string
	store state.Backend
	srv   *providers.Server
	sched *scheduler.Scheduler
	sup   *providers.Supervisor
	admin *http.Server
	token string
	log   *slog.Logger
	// want is how many worker processes the engine started.
	want int

	cancel context.CancelFunc
	runErr chan error // the scheduler's Run result

	// fetchNow, set by serve while it follows a repository, fetches and
	// applies what is new at once and returns the head it followed
	// (the admin API's reconcile); nil for sync, delete and do.
	fetchNow atomic.Pointer[func(context.Context) (converge.Revision, error)]
	// control is the store's converge.Control, read at start and
	// replaced by SetControl (the only writer while the engine runs).
	control atomic.Pointer[converge.Control]
}

type engineOptions struct {
	// stateDir holds the sockets and, unless etcd is set, the store.
	stateDir string
	// etcd, when set, is the etcd store the engine writes to.
	etcd *etcdstate.Options
	// repoDir is where relative worker commands resolve ("" for remote).
	repoDir string
	// workers are started only for a trusted (local) repository.
	workers []converge.WorkerSpec
	// listen is an extra address for external workers ("" for none).
	listen string
	// workersListener, when set, is that extra listener, already open (a
	// replica's, which outlives its terms); listen is then ignored.
	workersListener net.Listener
	// store, when set, is the store to write, already open (a replica's
	// term store); the engine closes it.
	store state.Backend
	token string
	// tls, when set, secures the TCP listener for external workers
	// (providers.ServerOptions.TLS); the unix socket stays plain.
	tls *tls.Config
	// log is the engine's logger; it also re-logs every line the worker
	// processes write, with the worker's name.
	log   *slog.Logger
	sched scheduler.Config
	// changed, when set, hears which resources every committed batch
	// touched (the live site).
	changed func(ids []converge.ID)
	// wrapStore, when set, wraps the store the scheduler commits to
	// (globals.wrapStore: tests only).
	wrapStore func(scheduler.Store) scheduler.Store
	// reinit is --reinit-state: an empty or damaged state.db is moved
	// aside and a fresh store starts (state.Options.Reinit).
	reinit bool
}

// defaultMemoryLimit is the control plane's soft memory limit when
// GOMEMLIMIT is not set: the garbage collector works harder as the heap
// nears it instead of letting it grow to twice the live heap. A
// million-resource converge holds ~1 GB live; at 1300 MiB it peaks at
// ~2 GiB RSS and takes ~155 s on two cores, at 1.6 GiB ~2.2 GiB and
// ~105 s, at 3 GiB ~4 GiB (docs/BENCHMARKS.md). It is not a cap: a
// bigger graph only makes the collector run more (Go bounds its share of
// the CPU). GOMEMLIMIT (Go's own variable, e.g. "3GiB" or "off")
// overrides it: raise it on a machine with memory to spare.
const defaultMemoryLimit = 1300 << 20

// startEngine opens the store and starts everything; close undoes it.
func startEngine(ctx context.Context, o engineOptions) (*engine, error) {
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	if err := os.MkdirAll(o.stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	// The sockets in it (workers, admin API) are reachable only through
	// an owner-only directory: one converge created is; one that already
	// holds a store is made so. Any other directory an operator named is
	// left alone, and the sockets' own 0600 protects them.
	if ok, _ := stateFileExists(o.stateDir); ok {
		if err := os.Chmod(o.stateDir, 0o700); err != nil {
			return nil, fmt.Errorf("restrict state directory: %w", err)
		}
	}
	st := o.store
	var err error
	switch {
	case st != nil: // opened by the caller
	case o.etcd != nil:
		st, err = openEtcd(o.etcd, false, time.Second)
	default:
		var bs *state.Store
		if bs, err = state.Open(o.stateDir, state.Options{Reinit: o.reinit}); err == nil {
			st = bs
			if aside := bs.MovedAside(); aside != "" {
				o.log.Warn("the state file was empty or damaged: moved aside, starting a fresh store (every resource is created again)",
					"file", filepath.Join(o.stateDir, state.FileName), "moved_to", aside)
			}
		}
	}
	if errors.Is(err, state.ErrLocked) {
		return nil, fmt.Errorf("open state: %w: another converge (sync or serve) is running on %s", err, o.stateDir)
	}
	if err != nil {
		return nil, openStateErr(err)
	}
	e := &engine{dir: o.stateDir, store: st, runErr: make(chan error, 1), log: o.log, want: expectedWorkers(o.workers)}
	ok := false
	defer func() {
		if !ok {
			e.close()
		}
	}()
	// The workers this engine starts get a token of their own: the
	// external workers' (o.token, $CONVERGE_WORKER_TOKEN) never reaches
	// them.
	var b [16]byte
	rand.Read(b[:]) // crypto/rand never fails (it crashes the program instead)
	e.token = hex.EncodeToString(b[:])
	ext := o.token
	if ext == "" {
		ext = e.token
	}
	e.srv = providers.NewServer(providers.ServerOptions{Token: ext, LocalToken: e.token, Logger: o.log, TLS: o.tls})
	sock := filepath.Join(o.stateDir, "worker.sock")
	l, err := providers.ListenUnix(sock)
	if err != nil {
		return nil, fmt.Errorf("listen for workers: %w", err)
	}
	go e.serveWorkers(l)
	if o.workersListener != nil {
		go e.serveWorkers(o.workersListener)
	} else if o.listen != "" {
		tl, err := net.Listen("tcp", o.listen)
		if err != nil {
			return nil, fmt.Errorf("listen for workers on %s: %w", o.listen, err)
		}
		go e.serveWorkers(tl)
	}
	cfg := o.sched
	cfg.Logger = o.log
	if src, err := e.store.Source(ctx); err == nil && src != nil && cfg.ResyncInterval == 0 {
		// Resyncs are armed with the applied revision's default at
		// once, not re-armed a million at a time by the first Apply.
		cfg.ResyncInterval = src.ResyncInterval
	}
	cfg.LocalFor = localComposer
	ctl, err := e.store.Control(ctx)
	if err != nil {
		return nil, err
	}
	e.control.Store(ctl)
	cfg.Suspended = suspendedIDs(ctl)
	schedStore := func() scheduler.Store {
		var store scheduler.Store = e.store
		if o.changed != nil {
			store = observedStore{Backend: e.store, changed: o.changed}
		}
		if o.wrapStore != nil {
			store = o.wrapStore(store)
		}
		return store
	}
	e.sched, err = scheduler.New(ctx, schedStore(), e.srv, cfg)
	if errors.Is(err, state.ErrDamaged) && o.reinit && o.store == nil && o.etcd == nil {
		// Damage Open's checks did not reach (the load read a bad page
		// deeper in the file): --reinit-state starts afresh all the same.
		aside, merr := e.store.(*state.Store).CloseAndMoveAside()
		e.store = nil
		if merr != nil {
			return nil, fmt.Errorf("%w (%v)", err, merr)
		}
		o.log.Warn("the state file was damaged: moved aside, starting a fresh store (every resource is created again)",
			"file", filepath.Join(o.stateDir, state.FileName), "moved_to", aside, "damage", err)
		bs, oerr := state.Open(o.stateDir, state.Options{})
		if oerr != nil {
			return nil, openStateErr(oerr)
		}
		e.store = bs
		e.sched, err = scheduler.New(ctx, schedStore(), e.srv, cfg)
	}
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
	e.admin = &http.Server{Handler: stateapi.Handler(e.store, adminController{e.sched, e}), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := e.admin.Serve(al); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error("serve admin api", "err", err)
		}
	}()

	if len(o.workers) > 0 {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("locate converge binary: %w", err)
		}
		e.sup, err = providers.StartWorkers(ctx, o.workers, providers.SupervisorOptions{
			Addr: "unix://" + sock, Token: e.token, Dir: o.repoDir, Self: self,
			RelogOutput: true, Logger: o.log, BuiltinEnv: builtinWorkerEnv,
			ExtraEnv: append([]string{"CONVERGE_STATE_DIR=" + o.stateDir}, workerLogEnv(o.log)...),
		})
		if err != nil {
			return nil, fmt.Errorf("start workers: %w", err)
		}
	}
	ok = true
	return e, nil
}

// adminController is the scheduler as the admin API serves it: its
// answers come from the store, so while the engine's commits fail they
// carry a warning (stateapi.Warner) that the store is behind.
type adminController struct {
	*scheduler.Scheduler
	e *engine
}

// Reconcile implements stateapi.Reconciler: the repository (serve
// fetches and applies now) or, with an id, that resource's resync.
func (a adminController) Reconcile(ctx context.Context, id converge.ID) (*stateapi.ReconcileReply, error) {
	if id != "" {
		msg, err := a.Resync(ctx, id)
		if err != nil {
			return nil, err
		}
		return &stateapi.ReconcileReply{Message: msg}, nil
	}
	f := a.e.fetchNow.Load()
	if f == nil {
		return nil, errors.New("reconcile: this converge follows no repository (serve does)")
	}
	rev, err := (*f)(ctx)
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	return &stateapi.ReconcileReply{Revision: rev.String(), Hash: rev.Hash, Message: "fetched; following " + rev.String()}, nil
}

// SetControl implements stateapi.ControlSetter: the pin and the
// suspensions are recorded in the store, where serve's next step reads
// the pin.
func (a adminController) SetControl(ctx context.Context, c *converge.Control) error {
	if err := a.e.store.PutControl(ctx, c); err != nil {
		return err
	}
	a.e.control.Store(c)
	return a.Suspend(ctx, suspendedIDs(c))
}

// Control returns the pin and the suspensions as the engine last read or
// took them (the store's, kept in memory: serve's loop and /metrics read
// it without a store read, which etcd without quorum would hold up).
func (e *engine) Control(context.Context) (*converge.Control, error) {
	if c := e.control.Load(); c != nil {
		return c, nil
	}
	return &converge.Control{}, nil
}

// suspendedIDs are c's suspended roots as the scheduler takes them ("" for
// everything).
func suspendedIDs(c *converge.Control) []converge.ID {
	var ids []converge.ID
	for _, s := range c.Suspended {
		ids = append(ids, s.Root)
	}
	return ids
}

// Warning implements stateapi.Warner.
func (a adminController) Warning() string {
	if c := gitsync.CommitProblem(a.Progress()); c != "" {
		return "the daemon cannot commit its state (" + c + "): what it shows may be behind"
	}
	return ""
}

// serveWorkers accepts workers on l until the engine closes; a listener
// that fails is logged (the workers on it can no longer connect).
func (e *engine) serveWorkers(l net.Listener) {
	if err := e.srv.Serve(l); err != nil {
		e.log.Error("serve workers", "addr", l.Addr().String(), "err", err)
	}
}

// workers reports on the worker processes the engine started: how many
// are due (neither connected nor failed) and why the failed ones are not
// running (e.g. "worker db-0 failed to start: …").
func (e *engine) workers() (due int, failed []string) {
	if e.sup == nil {
		return 0, nil
	}
	fs := e.sup.Failed()
	for _, f := range fs {
		failed = append(failed, f.String())
	}
	return max(0, e.want-len(fs)-len(e.srv.Workers())), failed
}

// howToStartWorker is the hint for a kind no worker serves; only serve
// takes external workers (--workers-listen).
func howToStartWorker(remote, serve bool) string {
	var how string
	switch {
	case remote:
		how = "a remote repository's workers are never started: start one from local configuration with --start-worker (a builtin NAME, or NAME=COMMAND)"
	default:
		how = "declare a worker for it in converge.cue"
	}
	if serve {
		how += ", or connect one with --workers-listen"
	}
	return how
}

// closeEngine closes e, reporting what went wrong on errOut: for a
// daemon, whose outcome is in its log. A command that reports an outcome
// adds e.close's error to its lastWrites instead.
func closeEngine(e *engine, errOut io.Writer) {
	if err := e.close(); err != nil {
		fmt.Fprintln(errOut, "converge: close engine:", err)
	}
}

// lastWrites collects the failures of the writes a command makes once
// its work is done: the verdict in the store, the git note, the engine's
// last flush and the store's close. Any one of them makes the command
// fail (exit 2, naming the write): a command must not exit 0 when what
// it reports was not written.
type lastWrites struct{ errs []error }

// add records err, if any, prefixed with what was written ("" when err
// says it already).
func (w *lastWrites) add(what string, err error) {
	if err == nil {
		return
	}
	if what != "" {
		err = fmt.Errorf("%s: %w", what, err)
	}
	w.errs = append(w.errs, err)
}

// join returns the command's result err with the failed writes: err
// itself when none failed, else a usage-or-environment error (exit 2)
// that says err and then each failed write.
func (w *lastWrites) join(err error) error {
	if len(w.errs) == 0 {
		return err
	}
	werr := errors.Join(w.errs...)
	if err == nil {
		return werr
	}
	return fmt.Errorf("%v\n%w", err, werr)
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
// nothing it accepted is lost. It runs once the command's context may be
// done, so the store's last check is not cut short by it (the store
// bounds it itself).
func (e *engine) close() error {
	ctx := context.Background()
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
		if err := e.srv.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close worker service: %w", err))
		}
	}
	if e.store != nil {
		// What the scheduler flushed is where readers will look (the
		// path names the file it went to; the etcd lock still held).
		if err := e.store.Verify(ctx); err != nil {
			errs = append(errs, err)
		}
		errs = append(errs, e.store.Close())
	}
	return errors.Join(errs...)
}

// localComposer compiles the stored kinds that compose in CUE, so their
// compose and teardown run before any Apply (delete, a restart).
func localComposer(kinds []*converge.Kind) scheduler.LocalComposer {
	var cs []*converge.Kind
	for _, k := range kinds {
		if k.Compose != "" {
			cs = append(cs, k)
		}
	}
	if len(cs) == 0 {
		return nil
	}
	s, _ := cue.Compile(cs)
	if s == nil {
		return nil
	}
	return s
}
