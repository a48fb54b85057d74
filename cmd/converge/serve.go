package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/builtin"
	"github.com/convergehq/converge/cmd/converge/internal/ops"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/cmd/converge/internal/workerauth"
	"github.com/convergehq/converge/site"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/controlplane"
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
	// workersTLS secures --workers-listen (see workerauth.TLSFiles).
	workersTLS workerauth.TLSFiles
	// tokenFile is --workers-token-file (see workerauth.TokenFile).
	tokenFile string
	// uiActions lets a signed-in person delete resources and run verbs
	// from the site (see uiActions); uiTokenFile holds its login token
	// (else $CONVERGE_UI_TOKEN), read into uiToken at start.
	uiActions   bool
	uiTokenFile string
	uiToken     string
	// pprof serves Go's runtime profiles at /debug/pprof/ (--pprof).
	pprof bool
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
	f.StringVar(&o.tokenFile, "workers-token-file", "", "with --workers-listen: the workers' tokens, one per line, instead of $CONVERGE_WORKER_TOKEN; read again when the file changes (or on SIGHUP), so a token rotates without a restart")
	f.StringVar(&o.workersTLS.Cert, "workers-tls-cert", "", "with --workers-listen: serve workers TLS with this certificate (PEM; needs --workers-tls-key)")
	f.StringVar(&o.workersTLS.Key, "workers-tls-key", "", "with --workers-listen: the private key (PEM) of --workers-tls-cert")
	f.StringVar(&o.workersTLS.ClientCA, "workers-tls-client-ca", "", "with --workers-tls-cert: require workers' client certificates signed by this PEM CA bundle (mutual TLS)")
	f.BoolVar(&o.workersTLS.Insecure, "insecure", false, "with --workers-listen: serve workers over plain TCP instead of TLS; their token crosses the network in clear (serve warns)")
	f.DurationVar(&o.poll, "poll", time.Minute, "fetch interval (jittered by up to 10%)")
	f.StringSliceVar(&o.startWorkers, "start-worker", nil, "start a worker from local configuration: a builtin NAME[:REPLICAS] (e.g. classic:2), or NAME=COMMAND (a worker binary, its path relative to the current directory)")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "also log the engine's info and debug messages and the workers' output (warnings and errors always show)")
	f.StringVar(&o.replica, "replica", "", "run as the replica NAME of a replicated control plane (needs --state etcd://…): one replica, elected, leads; the others serve the site, the webhook and read commands")
	f.DurationVar(&o.leaseTTL, "lease-ttl", defaultLeaseTTL, "with --replica: the leader's election lease; a leader that stops renewing it is replaced about this long after")
	f.StringVar(&o.advertise, "advertise", "", "with --replica and --workers-listen: the HOST:PORT workers reach this replica's workers listener at, which followers name while it leads (default: --workers-listen's host with the bound port, when it names a host)")
	f.BoolVar(&o.uiActions, "ui-actions", false, "let the site delete resources and run operator verbs for a person signed in with the login token (--ui-token-file or $"+envUIToken+"); without it the site is read-only")
	f.StringVar(&o.uiTokenFile, "ui-token-file", "", "with --ui-actions: the file holding the site's login token (default $"+envUIToken+")")
	f.BoolVar(&o.pprof, "pprof", false, "serve Go's runtime profiles (CPU, heap, goroutines) at /debug/pprof/ on --listen, for go tool pprof; they show the process's internals to anyone who reaches the address")
	o.forge.addFlags(f)
	o.signatures.addFlags(f)
	addReinitFlag(f, g)
	return c
}

func runServe(ctx context.Context, c *cobra.Command, g *globals, o serveOptions) error {
	out, errOut := c.OutOrStdout(), c.ErrOrStderr()
	if g.logFormat == "json" {
		// Every line the daemon prints is JSON, its reports as its logs.
		out = view.NewJSONLines(out)
	}
	if err := o.replicaFlags(g, c.Flags().Changed("lease-ttl")); err != nil {
		return err
	}
	workersTLS, tlsReload, err := o.workersTLS.Config(o.workersListen, time.Now())
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
	var tokens *workerauth.TokenFile
	switch {
	case o.tokenFile != "" && o.workersListen == "":
		return usageErr("--workers-token-file needs --workers-listen: its tokens are the TCP workers' (the unix socket's workers get their own)")
	case o.tokenFile != "" && os.Getenv("CONVERGE_WORKER_TOKEN") != "":
		return usageErr("--workers-token-file with $CONVERGE_WORKER_TOKEN: give the workers' tokens one way")
	case o.tokenFile != "":
		if tokens, err = workerauth.OpenTokenFile(o.tokenFile); err != nil {
			return err
		}
	case o.workersListen != "" && os.Getenv("CONVERGE_WORKER_TOKEN") == "":
		return usageErr("--workers-listen needs $CONVERGE_WORKER_TOKEN or --workers-token-file: the token every external worker presents (CONVERGE_TOKEN on the worker's side); without it no worker could connect")
	}
	if err := resolveSource(ctx, g); err != nil {
		return err
	}
	log := g.logger(errOut, o.verbose)
	if tlsReload != nil || tokens != nil {
		// A rotated certificate or token file is read at the next
		// handshake or worker after it changes; SIGHUP reads it at once.
		note := func(msg string) { fmt.Fprintln(out, "serve: "+msg) }
		if tlsReload != nil {
			tlsReload.Warn, tlsReload.Note = log.Warn, note
		}
		if tokens != nil {
			tokens.Warn, tokens.Note = log.Warn, note
		}
		defer workerauth.ReloadOnHangup(ctx, tlsReload, tokens)()
	}
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
	workers, err := builtin.ParseStartWorkers(o.startWorkers)
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
		live: site.NewLive(filepath.Join(dir, "site"), site.LiveOptions{Site: site.Options{Title: "converge"}, Log: errOut}), workersTLS: workersTLS,
		tokens: tokens, ops: ops.NewMonitor("starting: the store is not open yet")}
	if o.replica != "" {
		return s.runReplica(ctx)
	}
	wl, stopWorkersAddr, err := s.listenWorkers()
	if err != nil {
		return err
	}
	defer stopWorkersAddr()
	eo := s.engineOptions(os.Getenv("CONVERGE_WORKER_TOKEN"))
	eo.Listen, eo.WorkersListener = "", wl
	e, err := startEngine(ctx, eo)
	if err != nil {
		if wl != nil {
			wl.Close()
		}
		return err
	}
	defer closeEngine(e, errOut)
	s.ops.SetEngine(e)
	defer s.ops.SetEngine(nil)
	s.ops.SetNotReady("starting: the first revision is not evaluated yet")
	s.live.Attach(e.Store())
	// The site reads the store: it stops, and has stopped, before the
	// engine closes the store (defers run last first).
	stopSite := goUntilStopped(ctx, s.live.Run)
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
	live        *site.Live
	// workersTLS secures the workers' TCP listener (nil: plain TCP).
	workersTLS *tls.Config
	// tokens are --workers-token-file's, nil without it.
	tokens *workerauth.TokenFile
	// ops answers /metrics and /readyz.
	ops *ops.Monitor
}

// engineOptions are the options of the engine serve starts (a replica:
// one per term).
func (s *server) engineOptions(token string) controlplane.Options {
	o := controlplane.Options{StateDir: s.dir, Etcd: s.g.etcd, RepoDir: s.src.Root(), Workers: s.workers,
		Listen: s.o.workersListen, TLS: s.workersTLS, Token: token, Log: s.log,
		Changed: s.live.Changed, WrapStore: s.g.wrapStore, Reinit: s.g.reinitState}
	if s.tokens != nil {
		o.Tokens = s.tokens.Tokens
	}
	return o
}

// controller is the admin controller of the engine this process runs
// now, nil when it runs none (a follower replica): what the site's
// actions call.
func (s *server) controller() site.Actor {
	if e := s.ops.Engine(); e != nil {
		return e.Controller()
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
	var actions *site.Actions
	if s.o.uiActions {
		actions = site.NewActions(s.o.uiToken, s.controller, s.log)
	}
	mux := s.ops.Mux(ops.MuxOptions{WebhookSecret: os.Getenv(envWebhookSecret), Trigger: poke, Health: health,
		Actions: actions, SiteDir: s.live.Dir(), Log: s.log, Pprof: s.o.pprof})
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

// follow runs the sync loop on e until ctx is done
// (controlplane.Engine.Follow), saying what it does on serve's output,
// readiness and metrics.
func (s *server) follow(ctx context.Context, e *controlplane.Engine, trigger <-chan struct{}, health *gitsync.Health) {
	so := controlplane.SyncerOptions{Source: s.src, Path: s.g.path, Log: s.log, Signatures: s.o.policy,
		Records: func(inner gitsync.Records) gitsync.Records { return s.o.forge.records(inner, s.errOut) }}
	syncer := e.Syncer(so)
	setTimeouts(s.g, s.src, syncer, s.g.headSettings)
	var workersGrace time.Duration
	if s.o.workersListen != "" {
		// External workers come (back) on their own: from the old
		// leader to a new one, or to a daemon that just started.
		workersGrace = controlplane.WorkerReconnectWindow
	}
	e.Follow(ctx, controlplane.FollowOptions{Syncer: syncer, Poll: s.o.poll, Trigger: trigger, Health: health,
		Events: &serveEvents{s: s, syncer: syncer}, HowToStart: howToStartWorker(s.src.Remote(), true), StuckGrace: serveStuckGrace,
		WorkersGrace: workersGrace})
}

// serveEvents says what serve's follow loop does: a line on serve's
// output for each, and readiness, metrics and the live site's index.
type serveEvents struct {
	s      *server
	syncer *gitsync.Syncer
}

func (v *serveEvents) Pinned(pin *converge.Pin) {
	if pin == nil {
		fmt.Fprintf(v.s.out, "serve: unpinned: following %s again\n", v.s.src.Ref())
	} else {
		fmt.Fprintf(v.s.out, "serve: pinned to %s by %s: the head of %s is not applied until converge unpin\n", pin.Revision, pin.By, v.s.src.Ref())
	}
	v.s.ops.SetPin(pin)
}

func (v *serveEvents) Failed(err error, evaluated bool) {
	fmt.Fprintf(v.s.out, "serve: %v\n", err)
	if !evaluated {
		v.s.ops.SetNotReady("starting: the first fetch failed: " + err.Error())
	}
}

func (v *serveEvents) Evaluated() { v.s.ops.SetNotReady("") }

func (v *serveEvents) Pass(p *gitsync.Pass) {
	v.s.live.Changed(nil) // new revision records: the index
	v.s.ops.ObservePass(p)
	fmt.Fprintln(v.s.out, "serve: "+view.PassLine(p))
	if p.Applied {
		setTimeouts(v.s.g, v.s.src, v.syncer, p.Loaded.Desired.Settings) // the applied converge.cue's
	}
}

func (v *serveEvents) Converged(p *gitsync.Pass, summary string) {
	fmt.Fprintf(v.s.out, "serve: %s converged: %s\n", p.Revision, summary)
	v.s.ops.ObserveVerdict(ops.VerdictConverged)
	v.s.live.Changed(nil)
}

func (v *serveEvents) Stuck(p *gitsync.Pass, desc string) {
	fmt.Fprintf(v.s.out, "serve: %s %s\n", p.Revision, desc)
	v.s.ops.ObserveVerdict(ops.VerdictStuck)
	v.s.live.Changed(nil)
}

func (v *serveEvents) Error(err error) { fmt.Fprintf(v.s.out, "serve: %v\n", err) }

// envWebhookSecret holds the webhook's secret: the HMAC key of GitHub's,
// Gitea's and Forgejo's signatures, GitLab's token.
const envWebhookSecret = "CONVERGE_WEBHOOK_SECRET"

// serveStall is how long serve's loop may go without a look at the engine
// (a fetch or an apply that hangs) before GET /healthz reports it.
const serveStall = 5 * time.Minute

// serveStuckGrace is how long serve's engine must stay stuck before the
// applied revision's converge/sync verdict is failure.
const serveStuckGrace = controlplane.DefaultStuckGrace

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

// listenWorkers opens --workers-listen (nil, and a no-op stop, when it is
// not set), writes the bound address to workers.addr in the state
// directory (for tools when it picked a free port) and says where workers
// connect and how (TLS or mutual TLS); stop removes the file. The caller
// (a worker service serving it) closes the listener.
func (s *server) listenWorkers() (l net.Listener, stop func(), err error) {
	if s.o.workersListen == "" {
		return nil, func() {}, nil
	}
	l, err = net.Listen("tcp", s.o.workersListen)
	if err != nil {
		return nil, nil, fmt.Errorf("listen for workers on %s: %w", s.o.workersListen, err)
	}
	addrFile := filepath.Join(s.dir, "workers.addr")
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		l.Close()
		return nil, nil, fmt.Errorf("create state directory: %w", err)
	}
	if err := os.WriteFile(addrFile, []byte(l.Addr().String()+"\n"), 0o600); err != nil {
		l.Close()
		return nil, nil, fmt.Errorf("write %s: %w", addrFile, err)
	}
	how := ""
	if m := s.o.workersTLS.Mode(); m != "" {
		how = " (" + m + ")"
	}
	fmt.Fprintf(s.out, "serve: workers on %s%s\n", l.Addr(), how)
	if s.o.workersTLS.Insecure {
		fmt.Fprintf(s.errOut, "converge: warning: --insecure: workers connect to %s over plain TCP; their token (and every task and result) crosses the network in clear\n", l.Addr())
	}
	return l, func() { os.Remove(addrFile) }, nil
}
