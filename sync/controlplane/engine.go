package controlplane

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	gosync "sync"
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

// Engine is one running control plane: the store, the worker service, the
// scheduler, the worker processes and the admin API. Commands that change
// state (sync, serve, delete, do) start one (Start); read commands never
// do.
type Engine struct {
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

	// fetchNow, set by Follow while it follows a repository, fetches and
	// applies what is new at once and returns the head it followed
	// (the admin API's reconcile); nil for sync, delete and do.
	fetchNow atomic.Pointer[func(context.Context) (converge.Revision, error)]
	// control is the store's converge.Control, read at start and
	// replaced by SetControl (the only writer while the engine runs).
	control atomic.Pointer[converge.Control]
	// controlMu makes SetControl's compare-and-set one step.
	controlMu gosync.Mutex
}

// Options are what Start needs. Only StateDir and Log are required.
type Options struct {
	// StateDir holds the sockets and, unless Etcd or Store is set, the
	// store.
	StateDir string
	// Etcd, when set, is the etcd store the engine writes to.
	Etcd *etcdstate.Options
	// RepoDir is where relative worker commands resolve ("" for remote).
	RepoDir string
	// Workers are the worker processes to start: only a trusted (local)
	// repository's, and those of local configuration.
	Workers []converge.WorkerSpec
	// Listen is an extra address for external workers ("" for none).
	Listen string
	// WorkersListener, when set, is that extra listener, already open (a
	// replica's, which outlives its terms); Listen is then ignored.
	WorkersListener net.Listener
	// Store, when set, is the store to write, already open (a replica's
	// term store); the engine closes it.
	Store state.Backend
	// Token is what external workers present; the workers the engine
	// starts get a token of their own.
	Token string
	// Tokens, if set, are the external workers' tokens accepted now
	// (providers.ServerOptions.Tokens), asked instead of Token.
	Tokens func() []string
	// TLS, when set, secures the TCP listener for external workers
	// (providers.ServerOptions.TLS); the unix socket stays plain.
	TLS *tls.Config
	// Log is the engine's logger; it also re-logs every line the worker
	// processes write, with the worker's name.
	Log *slog.Logger
	// Scheduler configures the scheduler; its Logger, LocalFor and
	// Suspended are the engine's.
	Scheduler scheduler.Config
	// Changed, when set, hears which resources every committed batch
	// touched (the live site).
	Changed func(ids []converge.ID)
	// WrapStore, when set, wraps the store the scheduler commits to
	// (tests only).
	WrapStore func(scheduler.Store) scheduler.Store
	// Reinit (--reinit-state): an empty or damaged state.db is moved
	// aside and a fresh store starts (state.Options.Reinit).
	Reinit bool
	// BuiltinEnv names the variables of this process's environment that
	// reach builtin workers (providers.SupervisorOptions.BuiltinEnv).
	BuiltinEnv []string
	// WorkerEnv is added to every started worker's environment, after
	// CONVERGE_STATE_DIR (e.g. the log format and level a builtin worker
	// logs at, for the engine to re-log).
	WorkerEnv []string
}

// defaultMemoryLimit is the floor of the control plane's soft memory
// limit when GOMEMLIMIT is not set: the garbage collector works harder
// as the heap nears it instead of letting it grow to twice the live
// heap. Above the floor the limit follows the live heap (memoryLimitFor):
// a fixed 1300 MiB under a live heap of 1.4 GB (a million resources on
// etcd, the store behind) made the collector run back to back, 80% of the
// leader's CPU, taken from the etcd members on the same machine. GOMEMLIMIT
// (Go's own variable, e.g. "3GiB" or "off") overrides both: raise it on
// a machine with memory to spare. The floor was 1300 MiB until a 1M
// converge's live heap fell to ~700 MB: the floor then held ~300 MB of
// garbage the limit rule (memoryLimitFor) did not need. It was 900 MiB
// until the file pages a commit maps were bounded (state's commitRows):
// what is left of a 1 GiB budget beside the heap is those pages (up to
// ~90 MB in a commit, ~30 MB between) and a margin, and at 900 MiB the
// 1M cascade delete peaked at 1,016-1,042 MiB (970-991 at 832).
const defaultMemoryLimit = 832 << 20

// Start opens the store and starts everything; Close undoes it. An error
// opening the state says "open state: …" once (OpenError).
func Start(ctx context.Context, o Options) (*Engine, error) {
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		tuneMemoryLimit.Do(func() {
			debug.SetMemoryLimit(defaultMemoryLimit)
			go followLiveHeap(defaultMemoryLimit)
		})
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	// The sockets in it (workers, admin API) are reachable only through
	// an owner-only directory: one converge created is; one that already
	// holds a store is made so. Any other directory an operator named is
	// left alone, and the sockets' own 0600 protects them.
	if _, err := os.Stat(filepath.Join(o.StateDir, state.FileName)); err == nil {
		if err := os.Chmod(o.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("restrict state directory: %w", err)
		}
	}
	st := o.Store
	var err error
	switch {
	case st != nil: // opened by the caller
	case o.Etcd != nil:
		st, err = OpenEtcd(o.Etcd, false, time.Second)
	default:
		var bs *state.Store
		if bs, err = state.Open(o.StateDir, state.Options{Reinit: o.Reinit}); err == nil {
			st = bs
			if aside := bs.MovedAside(); aside != "" {
				o.Log.Warn("the state file was empty or damaged: moved aside, starting a fresh store (every resource is created again)",
					"file", filepath.Join(o.StateDir, state.FileName), "moved_to", aside)
			}
		}
	}
	if errors.Is(err, state.ErrLocked) {
		return nil, fmt.Errorf("open state: %w: another converge (sync or serve) is running on %s", err, o.StateDir)
	}
	if err != nil {
		return nil, OpenError(err)
	}
	e := &Engine{dir: o.StateDir, store: st, runErr: make(chan error, 1), log: o.Log, want: ExpectedWorkers(o.Workers)}
	ok := false
	defer func() {
		if !ok {
			e.Close()
		}
	}()
	// The workers this engine starts get a token of their own: the
	// external workers' (o.Token, $CONVERGE_WORKER_TOKEN) never reaches
	// them.
	var b [16]byte
	rand.Read(b[:]) // crypto/rand never fails (it crashes the program instead)
	e.token = hex.EncodeToString(b[:])
	ext := o.Token
	if ext == "" {
		ext = e.token
	}
	e.srv = providers.NewServer(providers.ServerOptions{Token: ext, Tokens: o.Tokens, LocalToken: e.token, Logger: o.Log, TLS: o.TLS})
	sock := filepath.Join(o.StateDir, "worker.sock")
	l, err := providers.ListenUnix(sock)
	if err != nil {
		return nil, fmt.Errorf("listen for workers: %w", err)
	}
	go e.serveWorkers(l)
	if o.WorkersListener != nil {
		go e.serveWorkers(o.WorkersListener)
	} else if o.Listen != "" {
		tl, err := net.Listen("tcp", o.Listen)
		if err != nil {
			return nil, fmt.Errorf("listen for workers on %s: %w", o.Listen, err)
		}
		go e.serveWorkers(tl)
	}
	cfg := o.Scheduler
	cfg.Logger = o.Log
	cfg.MaxEvents = state.DefaultMaxEvents // both backends keep that many
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
		if o.Changed != nil {
			store = observedStore{Backend: e.store, changed: o.Changed}
		}
		if o.WrapStore != nil {
			store = o.WrapStore(store)
		}
		return store
	}
	e.sched, err = scheduler.New(ctx, schedStore(), e.srv, cfg)
	if errors.Is(err, state.ErrDamaged) && o.Reinit && o.Store == nil && o.Etcd == nil {
		// Damage Open's checks did not reach (the load read a bad page
		// deeper in the file): --reinit-state starts afresh all the same.
		aside, merr := e.store.(*state.Store).CloseAndMoveAside()
		e.store = nil
		if merr != nil {
			return nil, fmt.Errorf("%w (%v)", err, merr)
		}
		o.Log.Warn("the state file was damaged: moved aside, starting a fresh store (every resource is created again)",
			"file", filepath.Join(o.StateDir, state.FileName), "moved_to", aside, "damage", err)
		bs, oerr := state.Open(o.StateDir, state.Options{})
		if oerr != nil {
			return nil, OpenError(oerr)
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

	adminSock := filepath.Join(o.StateDir, stateapi.SocketName)
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

	if len(o.Workers) > 0 {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("locate converge binary: %w", err)
		}
		e.sup, err = providers.StartWorkers(ctx, o.Workers, providers.SupervisorOptions{
			Addr: "unix://" + sock, Token: e.token, Dir: o.RepoDir, Self: self,
			RelogOutput: true, Logger: o.Log, BuiltinEnv: o.BuiltinEnv,
			ExtraEnv: append([]string{"CONVERGE_STATE_DIR=" + o.StateDir}, o.WorkerEnv...),
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
	e *Engine
}

// Controller is the engine's scheduler as the admin API serves it (its
// reconcile, pin and suspensions, and the warning while commits fail):
// what the site's actions call too.
func (e *Engine) Controller() stateapi.Controller { return adminController{e.sched, e} }

// Store is the store the engine writes (through its scheduler).
func (e *Engine) Store() state.Backend { return e.store }

// Scheduler is the engine's scheduler.
func (e *Engine) Scheduler() *scheduler.Scheduler { return e.sched }

// Server is the engine's worker service.
func (e *Engine) Server() *providers.Server { return e.srv }

// Supervisor is the supervisor of the worker processes the engine
// started, nil when it started none.
func (e *Engine) Supervisor() *providers.Supervisor { return e.sup }

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
// It changes nothing when the daemon's Control is no longer base.
func (a adminController) SetControl(ctx context.Context, base, c *converge.Control) error {
	a.e.controlMu.Lock()
	defer a.e.controlMu.Unlock()
	cur, err := a.e.Control(ctx)
	if err != nil {
		return err
	}
	if !sameControl(cur, base) {
		return stateapi.ErrControlChanged
	}
	if err := a.e.store.PutControl(ctx, c); err != nil {
		return err
	}
	a.e.control.Store(c)
	return a.Suspend(ctx, suspendedIDs(c))
}

// setFetchNow sets what the admin API's reconcile of the repository
// calls (nil: this engine follows no repository).
func (e *Engine) setFetchNow(f func(context.Context) (converge.Revision, error)) {
	if f == nil {
		e.fetchNow.Store(nil)
		return
	}
	e.fetchNow.Store(&f)
}

// sameControl reports whether a and b record the same pin and
// suspensions (as the admin API carries them: times to the nanosecond).
func sameControl(a, b *converge.Control) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && bytes.Equal(ja, jb)
}

// Control returns the pin and the suspensions as the engine last read or
// took them (the store's, kept in memory: serve's loop and /metrics read
// it without a store read, which etcd without quorum would hold up).
func (e *Engine) Control(context.Context) (*converge.Control, error) {
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
// that fails is logged (the workers on it can no longer connect). One
// closed under it is not a failure: a replica whose term was lost hands
// its workers listener to its refusal at once (Terms).
func (e *Engine) serveWorkers(l net.Listener) {
	if err := e.srv.Serve(l); err != nil && !errors.Is(err, net.ErrClosed) {
		e.log.Error("serve workers", "addr", l.Addr().String(), "err", err)
	}
}

// Workers reports on the worker processes the engine started: how many
// are due (neither connected nor failed) and why the failed ones are not
// running (e.g. "worker db-0 failed to start: …").
func (e *Engine) Workers() (due int, failed []string) {
	if e.sup == nil {
		return 0, nil
	}
	fs := e.sup.Failed()
	for _, f := range fs {
		failed = append(failed, f.String())
	}
	return max(0, e.want-len(fs)-len(e.srv.Workers())), failed
}

// ExpectedWorkers is how many worker processes specs start.
func ExpectedWorkers(specs []converge.WorkerSpec) int {
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

// Close stops everything in reverse order, flushing the scheduler so
// nothing it accepted is lost. Its error is the last flush's, the
// store's verify and close: writes a command reports as lost. It runs
// once the command's context may be done, so the store's last check is
// not cut short by it (the store bounds it itself).
func (e *Engine) Close() error {
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

// OpenEtcd opens the etcd store o describes: for writing (taking the
// writer's lock, waiting lockTimeout) unless readOnly.
func OpenEtcd(o *etcdstate.Options, readOnly bool, lockTimeout time.Duration) (*etcdstate.Store, error) {
	c := *o
	c.ReadOnly, c.LockTimeout = readOnly, lockTimeout
	st, err := etcdstate.Open(c)
	if errors.Is(err, state.ErrLocked) {
		return nil, fmt.Errorf("%w (another converge holds it)", err)
	}
	return st, err
}

// OpenError says that opening the state failed, once: the state
// package's own errors already begin "open state:".
func OpenError(err error) error {
	if strings.HasPrefix(err.Error(), "open state:") {
		return err
	}
	return fmt.Errorf("open state: %w", err)
}

// observedStore is the store the scheduler writes through, telling
// Options.Changed (the live site) which resources each committed batch
// changed.
type observedStore struct {
	state.Backend
	changed func(ids []converge.ID)
}

// CommitRows passes the backend's bound on the next commit's rows on
// (scheduler.CommitSizer), or 0 when it has none.
func (o observedStore) CommitRows() int {
	if cs, ok := o.Backend.(scheduler.CommitSizer); ok {
		return cs.CommitRows()
	}
	return 0
}

// Commit commits b, then reports the resources it touched: those put or
// deleted and the consumers of edges put or deleted.
func (o observedStore) Commit(ctx context.Context, b *converge.Batch) error {
	if err := o.Backend.Commit(ctx, b); err != nil {
		return err
	}
	if o.changed == nil {
		return nil
	}
	ids := make([]converge.ID, 0, len(b.Resources)+len(b.DeletedResources)+len(b.Edges)+len(b.DeletedEdges))
	for _, r := range b.Resources {
		ids = append(ids, r.ID())
	}
	ids = append(ids, b.DeletedResources...)
	for _, e := range b.Edges {
		ids = append(ids, e.Consumer)
	}
	for _, e := range b.DeletedEdges {
		ids = append(ids, e.Consumer)
	}
	if len(ids) > 0 || len(b.Events) > 0 || b.Applied != nil {
		o.changed(ids)
	}
	return nil
}
