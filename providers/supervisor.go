package providers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/convergehq/converge"
)

// SupervisorOptions configure StartWorkers.
type SupervisorOptions struct {
	// Addr is the control plane workers dial: "unix:///abs/path.sock" or
	// "host:port".
	Addr  string
	Token string
	// Dir resolves relative command paths (the repository directory).
	Dir string
	// Self is the converge binary, started for Builtin workers.
	Self           string
	Stdout, Stderr io.Writer
	// RelogOutput, when set, replaces Stdout and Stderr: every line a
	// worker writes is logged by Logger with the worker's name and the
	// stream, in Logger's format (a worker's own slog JSON lines keep
	// their level, message and attributes; other lines are info).
	RelogOutput bool
	// ExtraEnv is added to every worker's environment (KEY=VALUE).
	ExtraEnv []string
	// Environ is the environment the workers' environments are taken
	// from (default os.Environ()): only the variables BaseWorkerEnv,
	// PassEnv and the patterns of its own CONVERGE_WORKER_ENV name are
	// passed on (WorkerEnv).
	Environ []string
	// PassEnv are more names and NAME_* prefixes of Environ to pass to
	// every worker.
	PassEnv []string
	// BuiltinEnv are names and prefixes of Environ passed to Builtin
	// workers only: the knobs of the workers compiled into converge.
	BuiltinEnv []string
	Logger     *slog.Logger
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL
	// (default 5s).
	StopTimeout time.Duration
}

// Supervisor keeps worker processes running: each crashed or killed
// process is restarted with backoff until Stop.
type Supervisor struct {
	opts   SupervisorOptions
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
	stop   sync.Once

	mu     sync.Mutex // guards procs and failed
	procs  map[string]*os.Process
	failed map[string]failure // why a process that is not running now stopped
}

// WorkerFailure is a supervised worker process that is not running: its
// last start failed, or it exited and waits to be restarted.
type WorkerFailure struct {
	Name string // <spec name>-<i>, as in CONVERGE_WORKER_NAME
	// Started is false when the process could not be started at all
	// (say, its binary is missing).
	Started bool
	Err     error
}

func (f WorkerFailure) String() string {
	if !f.Started {
		return fmt.Sprintf("worker %s failed to start: %v", f.Name, f.Err)
	}
	return fmt.Sprintf("worker %s exited: %v", f.Name, f.Err)
}

// Restart backoff of a worker process.
const (
	minRestart = 100 * time.Millisecond
	maxRestart = 5 * time.Second
	// healthyRun resets the backoff: a process that ran this long was fine.
	healthyRun = 10 * time.Second
)

// StartWorkers starts Replicas processes (at least one) of every spec and
// keeps them running until Stop or until ctx is done. A Builtin spec runs
// `Self worker BUILTIN` with argv[0] "converge"; a Command spec runs that
// argv, a relative path resolved against Dir. Each process gets the
// allowed part of the parent's environment (WorkerEnv: BaseWorkerEnv, the
// operator's CONVERGE_WORKER_ENV, PassEnv, and BuiltinEnv for a builtin)
// plus CONVERGE_ADDR, CONVERGE_TOKEN, CONVERGE_WORKER_NAME=<name>-<i>,
// ExtraEnv and the spec's Env. It returns
// an error, starting nothing, if a spec is invalid; a process that fails to
// start is retried like a crashed one.
func StartWorkers(ctx context.Context, specs []converge.WorkerSpec, opts SupervisorOptions) (*Supervisor, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 5 * time.Second
	}
	type proc struct {
		name string
		path string
		argv []string
		env  []string
	}
	var procs []proc
	seen := map[string]bool{}
	environ := opts.Environ
	if environ == nil {
		environ = os.Environ()
	}
	for _, sp := range specs {
		if sp.Name == "" {
			return nil, errors.New("start workers: a worker has no name")
		}
		if seen[sp.Name] {
			return nil, fmt.Errorf("start workers: worker %q declared twice", sp.Name)
		}
		seen[sp.Name] = true
		var path string
		var argv []string
		switch {
		case sp.Builtin != "" && len(sp.Command) > 0:
			return nil, fmt.Errorf("start workers: worker %q: builtin and command are exclusive", sp.Name)
		case sp.Builtin != "":
			if opts.Self == "" {
				return nil, fmt.Errorf("start workers: worker %q: builtin needs the converge binary (Self)", sp.Name)
			}
			path, argv = opts.Self, []string{"converge", "worker", sp.Builtin}
		case len(sp.Command) > 0:
			argv = slices.Clone(sp.Command)
			path = argv[0]
			if strings.ContainsRune(path, '/') {
				if !filepath.IsAbs(path) {
					path = filepath.Join(opts.Dir, path)
				}
			} else if p, err := exec.LookPath(path); err == nil {
				path = p
			} else {
				return nil, fmt.Errorf("start workers: worker %q: %w", sp.Name, err)
			}
		default:
			return nil, fmt.Errorf("start workers: worker %q: needs builtin or command", sp.Name)
		}
		allow := slices.Concat(BaseWorkerEnv, opts.PassEnv, passFrom(environ))
		if sp.Builtin != "" {
			allow = append(allow, opts.BuiltinEnv...)
		}
		env := append(WorkerEnv(environ, allow), "CONVERGE_ADDR="+opts.Addr, "CONVERGE_TOKEN="+opts.Token)
		env = append(env, opts.ExtraEnv...)
		for _, k := range slices.Sorted(maps.Keys(sp.Env)) {
			env = append(env, k+"="+sp.Env[k])
		}
		for i := range max(sp.Replicas, 1) {
			name := sp.Name + "-" + strconv.Itoa(i)
			procs = append(procs, proc{name, path, argv, append(slices.Clip(env), "CONVERGE_WORKER_NAME="+name)})
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Supervisor{opts: opts, log: opts.Logger, cancel: cancel, procs: map[string]*os.Process{}, failed: map[string]failure{}}
	for _, p := range procs {
		s.wg.Add(1)
		go s.keep(ctx, p.name, p.path, p.argv, p.env)
	}
	return s, nil
}

// passFrom returns the patterns environ's CONVERGE_WORKER_ENV names.
func passFrom(environ []string) []string {
	for i := len(environ) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(environ[i], EnvWorkerPass+"="); ok {
			return ParseWorkerPass(v)
		}
	}
	return nil
}

// keep runs one worker process, restarting it with backoff until ctx is
// done.
func (s *Supervisor) keep(ctx context.Context, name, path string, argv, env []string) {
	defer s.wg.Done()
	wait := minRestart
	for ctx.Err() == nil {
		cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Dir: s.opts.Dir,
			Stdout: s.opts.Stdout, Stderr: s.opts.Stderr, SysProcAttr: sysProcAttr(),
			// A child the worker left behind must not hold its output
			// pipes, and so this wait, open for ever.
			WaitDelay: s.opts.StopTimeout}
		var relog []*lineLogger
		if s.opts.RelogOutput {
			relog = []*lineLogger{newLineLogger(s.log, name, "stdout"), newLineLogger(s.log, name, "stderr")}
			cmd.Stdout, cmd.Stderr = relog[0], relog[1]
		}
		start := time.Now()
		err := cmd.Start()
		started := err == nil
		if started {
			s.mu.Lock()
			s.procs[name] = cmd.Process
			delete(s.failed, name)
			s.mu.Unlock()
			s.log.Info("worker started", "worker", name, "pid", cmd.Process.Pid)
			done := make(chan struct{})
			go func() {
				select {
				case <-ctx.Done():
					s.terminate(cmd.Process, done)
				case <-done:
				}
			}()
			err = cmd.Wait()
			close(done)
			for _, l := range relog {
				l.Flush()
			}
			if err == nil {
				err = errors.New("exit status 0")
			}
		}
		if ctx.Err() != nil {
			s.mu.Lock()
			delete(s.procs, name)
			s.mu.Unlock()
			return
		}
		s.mu.Lock()
		delete(s.procs, name)
		prev, again := s.failed[name]
		s.failed[name] = failure{started, err}
		s.mu.Unlock()
		if time.Since(start) > healthyRun {
			wait = minRestart
		}
		switch {
		case again && prev.err.Error() == err.Error():
			// Said already: a retry that fails the same way is debug.
			s.log.Debug("worker failed again", "worker", name, "err", err, "in", wait)
		case started:
			s.log.Warn("worker exited; restarting", "worker", name, "err", err, "in", wait)
		default:
			s.log.Error("worker failed to start; retrying", "worker", name, "err", err, "in", wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, maxRestart)
	}
}

// terminate sends SIGTERM to p's process group, then SIGKILL if p has
// not exited (done closed) within the stop timeout.
func (s *Supervisor) terminate(p *os.Process, done <-chan struct{}) {
	_ = signalGroup(p, syscall.SIGTERM)
	t := time.NewTimer(s.opts.StopTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		_ = signalGroup(p, syscall.SIGKILL)
	}
}

// Pids returns the process ids of the running workers, sorted.
func (s *Supervisor) Pids() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, 0, len(s.procs))
	for _, p := range s.procs {
		out = append(out, p.Pid)
	}
	slices.Sort(out)
	return out
}

// Failed returns the worker processes that are not running now because
// their last start failed or they exited (until their restart succeeds),
// sorted by name.
func (s *Supervisor) Failed() []WorkerFailure {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]WorkerFailure, 0, len(s.failed))
	for name, f := range s.failed {
		out = append(out, WorkerFailure{Name: name, Started: f.started, Err: f.err})
	}
	slices.SortFunc(out, func(a, b WorkerFailure) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// failure is how a process stopped, kept in Supervisor.failed.
type failure struct {
	started bool
	err     error
}

// Stop terminates every worker (SIGTERM, then SIGKILL after the stop
// timeout), stops restarting them and waits until all have exited.
func (s *Supervisor) Stop() {
	s.stop.Do(s.cancel)
	s.wg.Wait()
}
