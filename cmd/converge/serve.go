package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/site"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/stateapi"
	gitsync "github.com/convergehq/converge/sync"
)

type serveOptions struct {
	signatures    signatureOptions
	policy        *gitsync.SignaturePolicy // loaded from signatures
	listen        string
	workersListen string
	poll          time.Duration
	startWorkers  []string
	verbose       bool
	forge         forgeOptions
	// replica names this process among the replicas of an etcd state;
	// leaseTTL is its election session's time to live.
	replica  string
	leaseTTL time.Duration
	// advertise is the workers address a leader publishes for followers
	// to name (--advertise; see workersAdvert).
	advertise string
	// workersTLS secures --workers-listen (see workersTLSOptions).
	workersTLS workersTLSOptions
	// uiActions lets a signed-in person delete resources and run verbs
	// from the site (see uiActions); uiTokenFile holds its login token
	// (else $CONVERGE_UI_TOKEN), read into uiToken at start.
	uiActions   bool
	uiTokenFile string
	uiToken     string
}

func newServeCommand(g *globals) *cobra.Command {
	var o serveOptions
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: follow the branch, apply every good commit, serve workers, webhook, admin API",
		Long: `serve follows a branch of a local or remote repository (--repo PATH|URL): on
start, every --poll interval (with jitter) and on every signed webhook
(POST /hooks/git from GitHub, Gitea, Forgejo or GitLab, with the secret in
$CONVERGE_WEBHOOK_SECRET), it fetches and gives each new first-parent commit
its verdict (validate, lint), applies the newest good one and drives it to
convergence. Workers connect over a unix socket in the state directory or,
with --workers-listen, over TCP with the token in $CONVERGE_WORKER_TOKEN
(required then). That listener serves TLS: --workers-tls-cert and
--workers-tls-key, and --workers-tls-client-ca for mutual TLS (workers set
CONVERGE_TLS_CA and, for mutual TLS, CONVERGE_TLS_CERT and
CONVERGE_TLS_KEY); plain TCP only with --insecure, which warns.
For a local repository serve starts the workers its converge.cue declares;
a remote repository never makes converge start a command (use
--start-worker for builtin workers from local configuration). While serve
runs, get, list, tree, events, delete and do talk to it through its admin
API. The HTTP listener also serves GET /metrics (Prometheus), GET /readyz
(ready once the store is open and the first revision evaluated) and
GET /healthz (503 while commits fail or the sync loop is stuck). The site
is read-only unless --ui-actions: then a person who signs in with the
login token (--ui-token-file FILE, else $CONVERGE_UI_TOKEN) may delete a
resource or run an operator verb from its page, confirming each by typing
its id; the action goes through the admin API's controller. SIGTERM
or SIGINT stops it gracefully: everything accepted is flushed.

With --state etcd://… and --replica NAME, serve is one of several
replicas (on as many machines) of one control plane: they elect a leader
through etcd (converge leader names it), which alone runs the sync loop,
the scheduler and the workers; every replica serves the site, /healthz
and the webhook (a follower passes a delivery on to the leader). A
leader that loses its election lease (--lease-ttl) stops at once, and
its writes are refused from then on. External workers list every
replica in CONVERGE_ADDR and follow the leader; CONVERGE_WORKER_TOKEN
must then be set, the same on every replica.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runServe(c.Context(), c, g, o) },
	}
	f := c.Flags()
	f.StringVar(&o.listen, "listen", ":8080", "HTTP address for the site, the webhook, /metrics, /readyz and /healthz (\"\" for none)")
	f.StringVar(&o.workersListen, "workers-listen", "", "TCP address for external workers: TLS (--workers-tls-cert, --workers-tls-key) or, with --insecure, plain TCP; needs the workers' token in $CONVERGE_WORKER_TOKEN")
	f.StringVar(&o.workersTLS.cert, "workers-tls-cert", "", "with --workers-listen: serve workers TLS with this certificate (PEM; needs --workers-tls-key)")
	f.StringVar(&o.workersTLS.key, "workers-tls-key", "", "with --workers-listen: the private key (PEM) of --workers-tls-cert")
	f.StringVar(&o.workersTLS.clientCA, "workers-tls-client-ca", "", "with --workers-tls-cert: require workers' client certificates signed by this PEM CA bundle (mutual TLS)")
	f.BoolVar(&o.workersTLS.insecure, "insecure", false, "with --workers-listen: serve workers over plain TCP instead of TLS; their token crosses the network in clear (serve warns)")
	f.DurationVar(&o.poll, "poll", time.Minute, "fetch interval (jittered by up to 10%)")
	f.StringSliceVar(&o.startWorkers, "start-worker", nil, "start a worker from local configuration: a builtin NAME[:REPLICAS] (e.g. classic:2), or NAME=COMMAND (a worker binary, its path relative to the current directory)")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "also log the engine's info and debug messages and the workers' output (warnings and errors always show)")
	f.StringVar(&o.replica, "replica", "", "run as the replica NAME of a replicated control plane (needs --state etcd://…): one replica, elected, leads; the others serve the site, the webhook and read commands")
	f.DurationVar(&o.leaseTTL, "lease-ttl", defaultLeaseTTL, "with --replica: the leader's election lease; a leader that stops renewing it is replaced about this long after")
	f.StringVar(&o.advertise, "advertise", "", "with --replica and --workers-listen: the HOST:PORT workers reach this replica's workers listener at, which followers name while it leads (default: --workers-listen's host with the bound port, when it names a host)")
	f.BoolVar(&o.uiActions, "ui-actions", false, "let the site delete resources and run operator verbs for a person signed in with the login token (--ui-token-file or $"+envUIToken+"); without it the site is read-only")
	f.StringVar(&o.uiTokenFile, "ui-token-file", "", "with --ui-actions: the file holding the site's login token (default $"+envUIToken+")")
	o.forge.addFlags(f)
	o.signatures.addFlags(f)
	addReinitFlag(f, g)
	return c
}

func runServe(ctx context.Context, c *cobra.Command, g *globals, o serveOptions) error {
	out, errOut := c.OutOrStdout(), c.ErrOrStderr()
	if g.logFormat == "json" {
		// Every line the daemon prints is JSON, its reports as its logs.
		out = newJSONLines(out)
	}
	if err := o.replicaFlags(g, c.Flags().Changed("lease-ttl")); err != nil {
		return err
	}
	workersTLS, err := o.workersTLS.config(o.workersListen, time.Now())
	if err != nil {
		return err
	}
	if o.policy, err = o.signatures.policy(); err != nil {
		return err
	}
	if o.uiTokenFile != "" && !o.uiActions {
		return usageErr("--ui-token-file needs --ui-actions")
	}
	if o.uiActions {
		if o.uiToken, err = uiToken(o.uiTokenFile); err != nil {
			return err
		}
	}
	if o.workersListen != "" && os.Getenv("CONVERGE_WORKER_TOKEN") == "" {
		return usageErr("--workers-listen needs $CONVERGE_WORKER_TOKEN: the token every external worker presents (CONVERGE_TOKEN on the worker's side); without it no worker could connect")
	}
	if err := resolveSource(ctx, g); err != nil {
		return err
	}
	log := g.logger(errOut, o.verbose)
	dir, err := stateDir(g)
	if err != nil {
		return err
	}
	notesDir := dir // whose notes a local repository's verdicts are
	if o.replica != "" {
		// Replicas may share a machine (and a work tree): each keeps its
		// sockets, mirrors and site apart. Whichever leads writes the
		// local repository's notes, as a serve on the state would.
		dir = filepath.Join(dir, "replicas", o.replica)
	}
	src, err := openFollowed(ctx, g, dir)
	if err != nil {
		return err
	}
	// Every revision record is also written to its commit's git note (and
	// posted to the forge, pushed to origin, when configured).
	o.forge.configured = g.headSettings.ForgeTimeout
	if src.Remote() {
		notesDir = dir // the notes live in this replica's own mirror
	}
	if err := o.forge.start(ctx, src, notesDir, log); err != nil {
		return err
	}
	defer o.forge.stop()
	workers, err := builtinWorkers(o.startWorkers)
	if err != nil {
		return err
	}
	if !src.Remote() {
		// A local repository is trusted: start the workers it declares.
		declared, err := headWorkers(g, src, g.path)
		if err != nil {
			log.Warn("no declared workers started", "err", err)
		}
		workers = append(workers, declared...)
	}
	s := &server{g: g, o: o, out: out, errOut: errOut, log: log, dir: dir, src: src, workers: workers,
		live: newLiveSite(filepath.Join(dir, "site"), errOut), workersTLS: workersTLS,
		ops: newOps("starting: the store is not open yet")}
	if o.replica != "" {
		return s.runReplica(ctx)
	}
	wl, stopWorkersAddr, err := s.listenWorkers()
	if err != nil {
		return err
	}
	defer stopWorkersAddr()
	eo := s.engineOptions(os.Getenv("CONVERGE_WORKER_TOKEN"))
	eo.listen, eo.workersListener = "", wl
	e, err := startEngine(ctx, eo)
	if err != nil {
		if wl != nil {
			wl.Close()
		}
		return err
	}
	defer closeEngine(e, errOut)
	s.ops.engine.Store(e)
	defer s.ops.engine.Store(nil)
	s.ops.setNotReady("starting: the first revision is not evaluated yet")
	s.live.attach(e.store)
	// The site reads the store: it stops, and has stopped, before the
	// engine closes the store (defers run last first).
	stopSite := goUntilStopped(ctx, s.live.run)
	defer stopSite()

	// health answers GET /healthz from what the loop below last saw.
	health := &gitsync.Health{Stall: serveStall}
	trigger := make(chan struct{}, 1)
	poke := func() {
		select {
		case trigger <- struct{}{}:
		default:
		}
	}
	_, stopHTTP, err := s.startHTTP(poke, func() (int, string) {
		if why := health.Check(time.Now()); why != "" {
			return http.StatusServiceUnavailable, why
		}
		return http.StatusOK, "ok"
	})
	if err != nil {
		return err
	}
	defer stopHTTP()
	s.announce()
	s.follow(ctx, e, trigger, health)
	fmt.Fprintln(out, "serve: shutting down")
	return nil
}

// server is one serve process: what it was started with and what it
// keeps across leadership terms (a replica leads, follows, leads again).
type server struct {
	g           *globals
	o           serveOptions
	out, errOut io.Writer
	log         *slog.Logger
	dir         string // the local state directory (a replica's own)
	src         *gitsync.Source
	workers     []converge.WorkerSpec
	live        *liveSite
	rep         *etcdstate.Replica // a replica's seat in the election; nil unless --replica
	// workersTLS secures the workers' TCP listener (nil: plain TCP).
	workersTLS *tls.Config
	// ops answers /metrics and /readyz.
	ops *ops
}

// engineOptions are the options of the engine serve starts (a replica:
// one per term).
func (s *server) engineOptions(token string) engineOptions {
	return engineOptions{stateDir: s.dir, etcd: s.g.etcd, repoDir: s.src.Root(), workers: s.workers,
		listen: s.o.workersListen, tls: s.workersTLS, token: token, log: s.log,
		changed: s.live.changed, wrapStore: s.g.wrapStore, reinit: s.g.reinitState}
}

// controller is the admin controller of the engine this process runs
// now, nil when it runs none (a follower replica): what the site's
// actions call.
func (s *server) controller() stateapi.Controller {
	if e := s.ops.engine.Load(); e != nil {
		return adminController{e.sched, e}
	}
	return nil
}

// announce says what serve follows and where its state is.
func (s *server) announce() {
	where := s.src.URL()
	if where == "" {
		where = s.src.Root()
	}
	fmt.Fprintf(s.out, "serve: following %s of %s; state in %s\n", s.src.Ref(), where, stateName(s.g, s.dir))
}

// startHTTP serves the site, the webhook (which calls poke), /healthz
// (health's status and text), /readyz and /metrics on --listen, writes
// the bound address to http.addr in the state directory, and returns it;
// stop ends it. With --listen "" it serves nothing.
func (s *server) startHTTP(poke func(), health func() (int, string)) (addr string, stop func(), err error) {
	if s.o.listen == "" {
		return "", func() {}, nil
	}
	mux := http.NewServeMux()
	secret := os.Getenv(envWebhookSecret)
	if secret == "" {
		s.log.Warn("webhook disabled: $" + envWebhookSecret + " is not set, so POST /hooks/git refuses every delivery (serve still polls)")
	}
	mux.Handle("POST /hooks/git", &gitsync.Webhook{Secret: []byte(secret), Trigger: poke, Log: s.log, Observe: s.ops.observeWebhook})
	answer := func(check func() (int, string)) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			code, text := check()
			if code != http.StatusOK {
				http.Error(w, text, code)
				return
			}
			_, _ = io.WriteString(w, text+"\n") // a failed write is a client that went away
		}
	}
	mux.HandleFunc("GET /healthz", answer(health))
	mux.HandleFunc("GET /readyz", answer(s.ops.ready))
	mux.Handle("GET /metrics", s.ops.handler())
	if s.o.uiActions {
		newUIActions(s.o.uiToken, s.controller, s.log).register(mux)
	}
	mux.Handle("GET /", site.Handler(s.live.dir))
	l, err := net.Listen("tcp", s.o.listen)
	if err != nil {
		return "", nil, fmt.Errorf("listen %s: %w", s.o.listen, err)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serve http", "addr", l.Addr().String(), "err", err)
		}
	}()
	// The bound address, for tools when --listen picked a free port.
	addrFile := filepath.Join(s.dir, "http.addr")
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		hs.Close()
		return "", nil, fmt.Errorf("create state directory: %w", err)
	}
	if err := os.WriteFile(addrFile, []byte(l.Addr().String()+"\n"), 0o600); err != nil {
		hs.Close()
		return "", nil, fmt.Errorf("write %s: %w", addrFile, err)
	}
	fmt.Fprintf(s.out, "serve: http on %s\n", l.Addr())
	return l.Addr().String(), func() { hs.Close(); os.Remove(addrFile) }, nil
}

// follow runs the sync loop on e until ctx is done: it fetches on start,
// every poll interval and on every trigger, gives each new commit its
// verdict, applies the newest good one and judges its convergence.
func (s *server) follow(ctx context.Context, e *engine, trigger <-chan struct{}, health *gitsync.Health) {
	out, src, live := s.out, s.src, s.live
	syncer := &gitsync.Syncer{Source: src, Path: s.g.path, Records: s.o.forge.records(e.store, s.errOut),
		Engine: e.sched, Log: s.log, Lint: lintFunc(), Compose: e.sched.DryCompose, Signatures: s.o.policy,
		Control: e}
	setTimeouts(s.g, src, syncer, s.g.headSettings)

	// current is the applied pass awaiting its converge/sync verdict; only
	// this loop touches it. A revision applied before a restart and never
	// judged is picked up again.
	current, err := pendingPass(ctx, e.store)
	if err != nil {
		// Serve on: the next applied revision gets its verdict.
		s.log.Error("resume pending verdict", "err", err)
	}
	// Failing commits get the same grace as a stuck graph: a daemon
	// judges the revision, then goes on retrying them.
	settle := gitsync.Settle{Grace: serveStuckGrace, CommitGrace: serveStuckGrace}
	evaluated := false
	pinnedTo := ""
	step := func() {
		passes, err := syncer.Advance(ctx)
		if pin := syncer.Pinned(ctx); pin == nil && pinnedTo != "" {
			fmt.Fprintf(out, "serve: unpinned: following %s again\n", src.Ref())
			pinnedTo = ""
			s.ops.setPin(nil)
		} else if pin != nil && pin.Revision.Hash != pinnedTo {
			fmt.Fprintf(out, "serve: pinned to %s by %s: the head of %s is not applied until converge unpin\n", pin.Revision, pin.By, src.Ref())
			pinnedTo = pin.Revision.Hash
			s.ops.setPin(pin)
		}
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(out, "serve: %v\n", err)
			if !evaluated {
				s.ops.setNotReady("starting: the first fetch failed: " + err.Error())
			}
		}
		if err == nil && !evaluated {
			evaluated = true
			s.ops.setNotReady("")
		}
		if len(passes) > 0 {
			live.changed(nil) // new revision records: the index
		}
		for _, p := range passes {
			s.ops.observePass(p)
			fmt.Fprintln(out, "serve: "+describePass(p))
			if p.Applied {
				if current != nil && current.Revision.Hash != p.Revision.Hash {
					// Never leave a verdict pending: the older revision
					// was replaced before it converged.
					if err := syncer.SetSyncStatus(ctx, current, converge.StateSuccess,
						fmt.Sprintf("superseded by %.7s before it converged", p.Revision.Hash)); err != nil {
						fmt.Fprintf(out, "serve: %v\n", err)
					}
				}
				current = p
				setTimeouts(s.g, src, syncer, p.Loaded.Desired.Settings) // the applied converge.cue's
				settle.Reset()
				health.Stuck("")
			}
		}
	}
	poll := time.NewTimer(0)
	defer poll.Stop()
	watch := time.NewTicker(100 * time.Millisecond)
	defer watch.Stop()
	// `converge reconcile` (and sync beside this daemon): a step now,
	// answered with the head it followed.
	type fetched struct {
		rev converge.Revision
		err error
	}
	reconcile := make(chan chan fetched)
	fetchNow := func(rctx context.Context) (converge.Revision, error) {
		reply := make(chan fetched, 1)
		select {
		case reconcile <- reply:
		case <-rctx.Done():
			return converge.Revision{}, rctx.Err()
		case <-ctx.Done():
			return converge.Revision{}, errors.New("serve is shutting down")
		}
		select {
		case f := <-reply:
			return f.rev, f.err
		case <-rctx.Done():
			return converge.Revision{}, rctx.Err()
		}
	}
	e.fetchNow.Store(&fetchNow)
	defer e.fetchNow.Store(nil)
	for {
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
			step()
			poll.Reset(jitter(s.o.poll))
		case reply := <-reconcile:
			step()
			var c *converge.Control
			if pin := syncer.Pinned(ctx); pin != nil {
				c = &converge.Control{Pin: pin}
			}
			rev, _, err := gitsync.Target(src, c)
			reply <- fetched{rev, err}
		case <-trigger:
			step()
		case <-watch.C:
			pr := e.sched.Progress()
			health.Observe(time.Now(), pr)
			p := current
			if p == nil {
				continue
			}
			summary := gitsync.Summary(pr)
			due, failedWorkers := e.workers()
			switch settle.Observe(time.Now(), pr, due) {
			case gitsync.Converged:
				if err := syncer.SetSyncStatus(ctx, p, converge.StateSuccess, summary); err != nil {
					fmt.Fprintf(out, "serve: %v\n", err)
				}
				fmt.Fprintf(out, "serve: %s converged: %s\n", p.Revision, summary)
				s.ops.observeVerdict(verdictConverged)
				live.changed(nil)
				current = nil
			case gitsync.Stuck, gitsync.Undurable:
				why := "stuck"
				if gitsync.NotDurable(pr) {
					why = "state not durable"
				}
				desc := gitsync.Verdict(why, pr, gitsync.UnservedHint(e.sched.Problems(), failedWorkers, howToStartWorker(src.Remote(), true)))
				if err := syncer.SetSyncStatus(ctx, p, converge.StateFailure, desc); err != nil {
					fmt.Fprintf(out, "serve: %v\n", err)
				}
				fmt.Fprintf(out, "serve: %s %s\n", p.Revision, desc)
				s.ops.observeVerdict(verdictStuck)
				health.Stuck(p.Revision.String() + " " + desc)
				live.changed(nil)
				current = nil
			}
		}
	}
}

// pendingPass returns the applied revision whose converge/sync verdict is
// still pending (serve stopped before judging it), or nil.
func pendingPass(ctx context.Context, st state.Backend) (*gitsync.Pass, error) {
	rev, err := st.Applied(ctx)
	if err != nil || rev == nil || rev.Dirty {
		return nil, err
	}
	rec, err := st.Revision(ctx, rev.Hash)
	if errors.Is(err, converge.ErrNotFound) {
		return nil, nil // applied by an older converge that kept no record
	}
	if err != nil {
		return nil, err
	}
	if s, ok := rec.Status(converge.ContextSync); ok && s.State == converge.StatePending {
		return &gitsync.Pass{Revision: rec.Revision, Record: rec}, nil
	}
	return nil, nil
}

// envWebhookSecret holds the webhook's secret: the HMAC key of GitHub's,
// Gitea's and Forgejo's signatures, GitLab's token.
const envWebhookSecret = "CONVERGE_WEBHOOK_SECRET"

// serveStall is how long serve's loop may go without a look at the engine
// (a fetch or an apply that hangs) before GET /healthz reports it.
const serveStall = 5 * time.Minute

// serveStuckGrace is how long serve's engine must stay stuck before the
// applied revision's converge/sync verdict is failure.
const serveStuckGrace = 5 * time.Second

// goUntilStopped runs fn in a goroutine with a context that stop cancels;
// stop returns once fn has returned.
func goUntilStopped(ctx context.Context, fn func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// describePass is one line about a revision's verdict.
func describePass(p *gitsync.Pass) string {
	switch {
	case !p.Valid():
		return fmt.Sprintf("%s invalid (%s), not applied: %s", p.Revision, plural(len(p.Record.Errors), "error"), p.Record.Errors[0])
	case breakingPass(p):
		return fmt.Sprintf("%s not applied: breaking schema change (%s): %s", p.Revision, plural(len(p.Record.Findings), "finding"), p.Record.Findings[0])
	case p.Held != "":
		return fmt.Sprintf("%s %s", p.Revision, p.Held)
	case p.Applied && p.Priced != nil:
		// Counted as plan counts it; on an empty store there was nothing
		// to dry-run against, so what the documents compose is not in it.
		more := ""
		if p.Fresh {
			more = " (on an empty store: what they compose comes on top)"
		}
		return fmt.Sprintf("%s applied: %s%s", p.Revision, gitsync.Summarize(p.Priced).AppliedText(), more)
	}
	if st, ok := p.Record.Status(converge.ContextSync); ok {
		return fmt.Sprintf("%s %s", p.Revision, st.Description)
	}
	return p.Revision.String() + " checked"
}

// breakingPass reports whether lint refused p.
func breakingPass(p *gitsync.Pass) bool {
	st, ok := p.Record.Status(converge.ContextLint)
	return ok && st.State == converge.StateFailure && len(p.Record.Findings) > 0
}

// jitter returns d ± up to 10%.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d))
}

// builtinWorkers parses --start-worker NAME[:REPLICAS] values.
func builtinWorkers(vals []string) ([]converge.WorkerSpec, error) {
	var out []converge.WorkerSpec
	for _, v := range vals {
		if name, command, ok := strings.Cut(v, "="); ok {
			// A command worker from local configuration: its path is
			// the operator's (relative to the current directory),
			// never the repository's, so a remote --repo can run a
			// custom worker that the remote does not name.
			if name == "" || command == "" || strings.ContainsAny(name, "/ ") {
				return nil, fmt.Errorf("--start-worker %q: want NAME=COMMAND (a path)", v)
			}
			abs, err := filepath.Abs(command)
			if err != nil {
				return nil, fmt.Errorf("--start-worker %q: %w", v, err)
			}
			out = append(out, converge.WorkerSpec{Name: name, Command: []string{abs}, Replicas: 1})
			continue
		}
		name, reps, _ := strings.Cut(v, ":")
		n := 1
		if reps != "" {
			var err error
			if n, err = strconv.Atoi(reps); err != nil || n < 1 {
				return nil, fmt.Errorf("--start-worker %q: want NAME[:REPLICAS]", v)
			}
		}
		if name != "classic" && name != "classic-leaves" {
			return nil, errors.New("--start-worker " + v + ": no such builtin worker (have " + builtinWorkerNames + ")")
		}
		out = append(out, converge.WorkerSpec{Name: name, Builtin: name, Replicas: n})
	}
	return out, nil
}
