package providers

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/convergehq/converge"
	convergev1 "github.com/convergehq/converge/proto/converge/v1"
)

// Tuning of the stream senders.
const (
	// maxBatch caps the tasks sent in one TaskBatch message.
	maxBatch = 512
	// resultBuffer is the capacity of the Results channel.
	resultBuffer = 8192
	// maxMsgSize bounds one gRPC message either way. A compose result of
	// any size arrives in parts far below it (protocol 2); a worker on
	// protocol 1 sends one message per result.
	maxMsgSize = 64 << 20
)

// Protocol is the worker protocol version the control plane speaks: 2
// takes a result in parts (Result.more), so a composition of any size
// arrives. A worker on an older protocol is still served, with a warning.
const Protocol = 2

// ServerOptions configure a Server.
type ServerOptions struct {
	// Token is the bearer token every worker must present. An empty Token
	// refuses every worker: there is no unauthenticated mode.
	Token string
	// Tokens, if set, are the external workers' tokens accepted now, asked
	// at every authentication instead of Token: a token file read again
	// when it changes, so tokens rotate without a restart (add the new
	// one, move the workers, drop the old one).
	Tokens func() []string
	// LocalToken, if set, is accepted too: the token of the workers the
	// control plane starts itself (SupervisorOptions.Token), so that they
	// never learn Token, the one external workers share.
	LocalToken string
	Logger     *slog.Logger
	// HeartbeatInterval is how often workers send heartbeats and the
	// server pings them (default 2s).
	HeartbeatInterval time.Duration
	// WorkerTimeout drops a worker that sent nothing for this long
	// (default 3 × HeartbeatInterval).
	WorkerTimeout time.Duration
	// TLS, if set, secures every non-unix listener (set ClientAuth to
	// tls.RequireAndVerifyClientCert for mutual TLS). Unix sockets are
	// owner-only and stay plain, so local workers need no certificates.
	TLS *tls.Config
}

// Server is the control plane's side of the worker protocol: the gRPC
// Control service workers connect to, and the scheduler.Dispatcher that
// routes tasks to them. It is safe for concurrent use.
type Server struct {
	opts    ServerOptions
	log     *slog.Logger
	grpc    *grpc.Server // plain: unix sockets, and TCP when TLS is nil
	tls     *grpc.Server // TCP when TLS is set, else nil
	results chan *converge.Result
	changed chan struct{}
	done    chan struct{}
	close   sync.Once
	ids     atomic.Uint64

	// mu guards workers, routes, rr, and each worker's inflight, queue
	// and spare.
	mu      sync.Mutex
	workers map[string]*worker // by id
	routes  map[route][]*worker
	rr      int
}

// route is what a task is routed by: strict equality of all three.
type route struct {
	kind     string
	version  int
	reaction string
}

// worker is one connected stream.
type worker struct {
	id, name string
	caps     []Capability
	capacity int
	since    time.Time
	// wake (capacity 1) tells the sender goroutine the queue is non-empty.
	wake     chan struct{}
	lastSeen atomic.Int64 // unix nanoseconds of the last message received
	// delivering is set while the receiver waits for room on Results: the
	// worker is not silent then, the scheduler is slow.
	delivering atomic.Bool
	// removed is set (under Server.mu) once remove has answered the
	// worker's tasks: a second remove does nothing.
	removed bool

	inflight map[string]int // task ids sent or queued, not answered: their max children (0: no limit)
	// partial holds the parts received so far of streamed results, by
	// task id (the receiver goroutine only).
	partial  map[string]*parts
	protocol int32
	queue    []*convergev1.Task // tasks not yet sent
	spare    []*convergev1.Task // the sender's previous batch, for reuse
}

// Capability is one (kind, kind_version) a worker serves and its reactions.
type Capability struct {
	Kind      string
	Version   int
	Reactions []string
}

// WorkerInfo describes a connected worker.
type WorkerInfo struct {
	Name           string
	ID             string
	Capabilities   []Capability
	InFlight       int
	Capacity       int
	ConnectedSince time.Time
}

// NewServer returns a Server; call Serve to accept workers.
func NewServer(opts ServerOptions) *Server {
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 2 * time.Second
	}
	if opts.WorkerTimeout <= 0 {
		opts.WorkerTimeout = 3 * opts.HeartbeatInterval
	}
	s := &Server{
		opts:    opts,
		log:     opts.Logger,
		results: make(chan *converge.Result, resultBuffer),
		changed: make(chan struct{}, 1),
		done:    make(chan struct{}),
		workers: make(map[string]*worker),
		routes:  make(map[route][]*worker),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	common := []grpc.ServerOption{
		grpc.StreamInterceptor(s.authStream),
		grpc.UnaryInterceptor(s.authUnary),
		grpc.MaxRecvMsgSize(maxMsgSize),
		grpc.MaxSendMsgSize(maxMsgSize),
	}
	s.grpc = grpc.NewServer(common...)
	convergev1.RegisterControlServer(s.grpc, controlService{s: s})
	if opts.TLS != nil {
		s.tls = grpc.NewServer(append(common, grpc.Creds(newLoggedTLS(credentials.NewTLS(opts.TLS), s.log)))...)
		convergev1.RegisterControlServer(s.tls, controlService{s: s})
	}
	return s
}

// Serve accepts workers on l until Close, then returns nil (also when
// called after Close). It may be called for several listeners (a unix
// socket and a TCP port). l is closed when Serve returns. With
// ServerOptions.TLS set, a listener that is not a unix socket serves TLS.
func (s *Server) Serve(l net.Listener) error {
	srv := s.grpc
	if s.tls != nil && l.Addr().Network() != "unix" {
		srv = s.tls
	}
	if err := srv.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// Close disconnects every worker and stops serving. Tasks in flight get
// no result.
func (s *Server) Close() error {
	s.close.Do(func() {
		close(s.done)
		s.grpc.Stop()
		if s.tls != nil {
			s.tls.Stop()
		}
	})
	return nil
}

// ListenUnix listens on a unix socket at path with owner-only permissions
// (0600), creating its parent directory (0700) if needed. A stale socket
// left by a dead process is removed; a live one is an error, and so is a
// path that exists and is not a socket.
func ListenUnix(path string) (net.Listener, error) {
	// sun_path holds 108 bytes on Linux and 104 on the BSDs, with a NUL.
	limit := 103
	if runtime.GOOS == "linux" {
		limit = 107
	}
	if len(path) > limit {
		return nil, fmt.Errorf("listen unix: socket path %s is %d bytes, over the %d unix sockets allow", path, len(path), limit)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("listen unix: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("listen unix: %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen unix: %s is in use by a live server", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen unix: remove stale socket: %w", err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen unix: %w", err)
	}
	// The parent directory is owner-only, so the moment between bind and
	// chmod exposes nothing to other users when we created it.
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen unix: %w", err)
	}
	return l, nil
}

// Workers returns the connected workers, sorted by name then id.
func (s *Server) Workers() []WorkerInfo {
	s.mu.Lock()
	out := make([]WorkerInfo, 0, len(s.workers))
	for _, w := range s.workers {
		out = append(out, WorkerInfo{
			Name: w.name, ID: w.id, Capabilities: w.caps,
			InFlight: len(w.inflight), Capacity: w.capacity, ConnectedSince: w.since,
		})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b WorkerInfo) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// Serves reports whether a connected worker serves reaction for ref.
func (s *Server) Serves(ref converge.KindRef, reaction string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.routes[route{ref.Kind, ref.Version, reaction}]) > 0
}

// Dispatch queues t for the connected worker serving t's kind, version and
// reaction with the most free capacity (ties rotate). It never blocks: it
// returns an error wrapping converge.ErrNoWorker when no worker serves t or
// all are at capacity. The task is sent by the worker's stream sender in a
// batch with others. t's byte slices are not copied: callers replace them,
// never modify them in place, after Dispatch.
func (s *Server) Dispatch(ctx context.Context, t *converge.Task) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dispatch %s: %w", t.ID, err)
	}
	r := route{t.Kind, t.KindVersion, t.Reaction}
	s.mu.Lock()
	ws := s.routes[r]
	if len(ws) == 0 {
		s.mu.Unlock()
		return fmt.Errorf("dispatch %s %s: %w serves it", t.Ref(), t.Reaction, converge.ErrNoWorker)
	}
	var best *worker
	bestFree := 0
	s.rr++
	for i := range ws {
		w := ws[(s.rr+i)%len(ws)]
		if free := w.capacity - len(w.inflight); free > bestFree {
			best, bestFree = w, free
		}
	}
	if best == nil {
		s.mu.Unlock()
		return fmt.Errorf("dispatch %s %s: %w free: %d at capacity", t.Ref(), t.Reaction, converge.ErrNoWorker, len(ws))
	}
	best.inflight[t.ID] = t.MaxChildren
	best.queue = append(best.queue, taskToProto(t))
	s.mu.Unlock()
	select {
	case best.wake <- struct{}{}:
	default:
	}
	return nil
}

// Results delivers every result, at most once per dispatched task.
func (s *Server) Results() <-chan *converge.Result { return s.results }

// Changed is signalled (coalesced) when workers connect, disconnect or
// free capacity.
func (s *Server) Changed() <-chan struct{} { return s.changed }

func (s *Server) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// authorized reports whether ctx carries the server's bearer token, or
// its local workers' one.
func (s *Server) authorized(ctx context.Context) error {
	err := checkTokens(ctx, s.opts.Token, s.opts.Tokens)
	if err != nil && s.opts.LocalToken != "" && checkToken(ctx, s.opts.LocalToken) == nil {
		return nil
	}
	return err
}

// checkTokens is checkToken against tokens() when it is set, else
// against token.
func checkTokens(ctx context.Context, token string, tokens func() []string) error {
	if tokens == nil {
		return checkToken(ctx, token)
	}
	err := status.Error(codes.Unauthenticated, "missing or invalid token")
	for _, t := range tokens() {
		if checkToken(ctx, t) == nil {
			err = nil // no early return: every token is compared
		}
	}
	return err
}

// checkToken reports whether ctx carries the bearer token; an empty
// token refuses every caller.
func checkToken(ctx context.Context, token string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if token == "" || len(vals) != 1 {
		return status.Error(codes.Unauthenticated, "missing or invalid token")
	}
	want := []byte("Bearer " + token)
	if subtle.ConstantTimeCompare([]byte(vals[0]), want) != 1 {
		return status.Error(codes.Unauthenticated, "missing or invalid token")
	}
	return nil
}

func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.authorized(ss.Context()); err != nil {
		s.log.Warn("worker refused", "err", err)
		return err
	}
	return h(srv, ss)
}

func (s *Server) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.authorized(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// controlService implements convergev1.ControlServer.
type controlService struct {
	convergev1.UnimplementedControlServer
	s *Server
}

func (c controlService) Connect(stream convergev1.Control_ConnectServer) error {
	return c.s.connect(stream)
}

// connect runs one worker stream: register, then send batches and pings
// here while a second goroutine receives results and heartbeats.
func (s *Server) connect(stream convergev1.Control_ConnectServer) (err error) {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	reg := first.GetRegister()
	if reg == nil {
		return status.Error(codes.InvalidArgument, "first message must be register")
	}
	w, err := s.newWorker(reg)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if err := stream.Send(&convergev1.ControlMessage{Msg: &convergev1.ControlMessage_Registered{
		Registered: &convergev1.Registered{WorkerId: w.id, HeartbeatIntervalMs: s.opts.HeartbeatInterval.Milliseconds(),
			Protocol: Protocol, MaxMessageBytes: maxMsgSize},
	}}); err != nil {
		return err
	}
	s.add(w)
	s.log.Info("worker connected", "worker", w.name, "id", w.id, "capacity", w.capacity, "protocol", max(w.protocol, 1))
	if w.protocol < Protocol {
		s.log.Warn("worker speaks an older worker protocol: each result must fit one message, so a compose result over the limit cannot arrive; rebuild the worker with the current SDK",
			"worker", w.name, "worker_protocol", max(w.protocol, 1), "protocol", Protocol, "max_message_bytes", maxMsgSize)
	}
	defer func() {
		s.remove(w, err)
	}()

	recvErr := make(chan error, 1)
	go func() { recvErr <- s.receive(stream, w) }()

	tick := min(s.opts.HeartbeatInterval, s.opts.WorkerTimeout/3)
	timedOut := status.Error(codes.DeadlineExceeded, "no heartbeat within the worker timeout")
	// The watchdog notices a silent worker on its own goroutine: the
	// loop below can be stuck in Send to a worker that stopped reading
	// (a stopped process, a dead host: its flow-control window full)
	// and would never look. It answers the worker's tasks at once
	// (remove); their results, should the worker wake, are ignored.
	watchdogDone := make(chan struct{})
	defer close(watchdogDone)
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-watchdogDone:
				return
			case now := <-t.C:
				if !w.delivering.Load() && now.Sub(time.Unix(0, w.lastSeen.Load())) > s.opts.WorkerTimeout {
					s.log.Warn("worker timed out", "worker", w.name, "id", w.id)
					s.remove(w, timedOut)
					return
				}
			}
		}
	}()

	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	lastPing := time.Now()
	batch := &convergev1.TaskBatch{}
	msg := &convergev1.ControlMessage{Msg: &convergev1.ControlMessage_Tasks{Tasks: batch}}
	for {
		select {
		case <-w.wake:
		case now := <-ticker.C:
			s.mu.Lock()
			gone := w.removed
			s.mu.Unlock()
			if gone {
				return timedOut
			}
			if now.Sub(lastPing) >= s.opts.HeartbeatInterval-tick/2 { // tolerate ticker jitter
				lastPing = now
				if err := stream.Send(&convergev1.ControlMessage{Msg: &convergev1.ControlMessage_Ping{
					Ping: &convergev1.Ping{UnixNano: now.UnixNano()},
				}}); err != nil {
					return err
				}
			}
			continue
		case err := <-recvErr:
			return err
		case <-s.done:
			return status.Error(codes.Unavailable, "control plane closing")
		case <-stream.Context().Done():
			// The receiver returns too (its Recv fails); its error
			// says why the stream ended, e.g. an oversized message.
			if err := <-recvErr; err != nil {
				return err
			}
			return stream.Context().Err()
		}
		s.mu.Lock()
		all := w.queue
		w.queue = w.spare[:0]
		s.mu.Unlock()
		tasks := all
		for len(tasks) > 0 {
			n := min(len(tasks), maxBatch)
			batch.Tasks = tasks[:n]
			err := stream.Send(msg)
			clear(tasks[:n])
			tasks = tasks[n:]
			if err != nil {
				return err
			}
		}
		batch.Tasks = nil
		s.mu.Lock()
		w.spare = all[:0]
		s.mu.Unlock()
	}
}

// receive reads the worker's messages until the stream ends.
func (s *Server) receive(stream convergev1.Control_ConnectServer, w *worker) error {
	var out []*converge.Result
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		w.lastSeen.Store(time.Now().UnixNano())
		switch msg := m.Msg.(type) {
		case *convergev1.WorkerMessage_Results:
			out = out[:0]
			s.mu.Lock()
			for _, r := range msg.Results.GetResults() {
				id := r.GetTaskId()
				limit, ok := w.inflight[id]
				if !ok {
					continue // unknown or already answered: at most once
				}
				res := resultFromProto(r, w.name)
				p := w.partial[id]
				if n := len(res.Children) + p.children(); limit > 0 && n > limit {
					// Stop holding parts of a composition that is over
					// its kind's limit already; the scheduler says so.
					delete(w.partial, id)
					delete(w.inflight, id)
					out = append(out, &converge.Result{TaskID: id, Worker: w.name, Outcome: converge.OutcomePermanent,
						Message: fmt.Sprintf("more than max_children %d children", limit)})
					continue
				}
				if r.GetMore() {
					if p == nil {
						p = &parts{}
						w.partial[id] = p
					}
					p.add(res)
					continue
				}
				if p != nil {
					p.join(res)
				}
				delete(w.partial, id)
				delete(w.inflight, id)
				out = append(out, res)
			}
			s.mu.Unlock()
			for _, r := range out {
				select {
				case s.results <- r:
					continue
				default:
				}
				w.delivering.Store(true)
				select {
				case s.results <- r:
				case <-s.done:
					return nil
				case <-stream.Context().Done():
					return stream.Context().Err()
				}
				w.delivering.Store(false)
				w.lastSeen.Store(time.Now().UnixNano())
			}
			clear(out)
			s.signal()
		case *convergev1.WorkerMessage_Heartbeat:
		case *convergev1.WorkerMessage_Register:
			return status.Error(codes.InvalidArgument, "register sent twice")
		}
	}
}

func (s *Server) newWorker(reg *convergev1.Register) (*worker, error) {
	id := fmt.Sprintf("w%d", s.ids.Add(1))
	w := &worker{
		id:       id,
		name:     reg.GetName(),
		capacity: int(reg.GetConcurrency()),
		since:    time.Now(),
		wake:     make(chan struct{}, 1),
		inflight: make(map[string]int),
		partial:  make(map[string]*parts),
		protocol: reg.GetProtocol(),
	}
	if w.name == "" {
		w.name = id
	}
	if w.capacity <= 0 {
		return nil, fmt.Errorf("register %s: concurrency %d, want > 0", w.name, w.capacity)
	}
	for _, c := range reg.GetCapabilities() {
		if c.GetKind() == "" || c.GetKindVersion() <= 0 || len(c.GetReactions()) == 0 {
			return nil, fmt.Errorf("register %s: capability %s/v%d needs a kind, a version > 0 and reactions",
				w.name, c.GetKind(), c.GetKindVersion())
		}
		w.caps = append(w.caps, Capability{Kind: c.GetKind(), Version: int(c.GetKindVersion()), Reactions: slices.Clone(c.GetReactions())})
	}
	w.lastSeen.Store(w.since.UnixNano())
	return w, nil
}

func (s *Server) add(w *worker) {
	s.mu.Lock()
	s.workers[w.id] = w
	for _, c := range w.caps {
		for _, r := range c.Reactions {
			k := route{c.Kind, c.Version, r}
			if !slices.Contains(s.routes[k], w) {
				s.routes[k] = append(s.routes[k], w)
			}
		}
	}
	s.mu.Unlock()
	s.signal()
}

// remove forgets w after its stream ended with why. Each of its queued
// and in-flight tasks gets a transient result at once, naming the worker
// and why, so the scheduler runs it again elsewhere now, not when its
// lease expires.
func (s *Server) remove(w *worker, why error) {
	s.mu.Lock()
	if w.removed {
		s.mu.Unlock()
		return
	}
	w.removed = true
	lost := make([]string, 0, len(w.inflight))
	for id := range w.inflight {
		lost = append(lost, id)
	}
	delete(s.workers, w.id)
	for _, c := range w.caps {
		for _, r := range c.Reactions {
			k := route{c.Kind, c.Version, r}
			ws := slices.DeleteFunc(s.routes[k], func(x *worker) bool { return x == w })
			if len(ws) == 0 {
				delete(s.routes, k)
			} else {
				s.routes[k] = ws
			}
		}
	}
	w.inflight, w.queue, w.spare, w.partial = map[string]int{}, nil, nil, nil
	s.mu.Unlock()
	msg := "worker " + w.name + " disconnected"
	switch {
	case why == nil:
	case status.Code(why) == codes.ResourceExhausted:
		msg = "worker " + w.name + " sent a message over the control plane's limit (" + status.Convert(why).Message() + ")"
		if w.protocol < Protocol {
			msg += ": it speaks an older worker protocol that cannot stream a big result in parts; rebuild it with the current SDK"
		}
		s.log.Error("worker stream failed", "worker", w.name, "id", w.id, "err", why)
	case status.Code(why) == codes.Canceled || errors.Is(why, context.Canceled):
		// The stream's context ends when the worker's connection does:
		// "context canceled" says nothing to the person reading a reason.
		msg += ": the worker went away (its connection closed)"
	default:
		msg += ": " + status.Convert(why).Message()
	}
	s.log.Info("worker disconnected", "worker", w.name, "id", w.id, "lost_tasks", len(lost), "why", why)
	for _, id := range lost {
		r := &converge.Result{TaskID: id, Worker: w.name, Outcome: converge.OutcomeTransient, Message: msg}
		select {
		case s.results <- r:
		case <-s.done:
			return
		}
	}
	s.signal()
}

func taskToProto(t *converge.Task) *convergev1.Task {
	p := &convergev1.Task{
		Id: t.ID, Key: t.Key, Reaction: t.Reaction, Uid: t.UID,
		Kind: t.Kind, KindVersion: int32(t.KindVersion), Name: t.Name, Generation: t.Generation,
		Spec: t.Spec, Status: t.Status, Config: t.Config, Args: t.Args, DryRun: t.DryRun,
		BaseSpec: t.BaseSpec, BaseRevision: t.BaseRevision,
	}
	if !t.Deadline.IsZero() {
		p.DeadlineUnixNano = t.Deadline.UnixNano()
	}
	if sub := t.Subject; sub != nil {
		p.Subject = &convergev1.Subject{
			Resource: string(sub.Resource), Uid: sub.UID, Generation: sub.Generation,
			Transition: sub.Transition, Status: sub.Status,
		}
	}
	return p
}

// parts are the parts of a streamed result received so far, kept as
// they came: one result of a million children is then one allocation of
// its final size (join), not a slice doubled twenty times.
type parts struct {
	kids    [][]converge.Child
	edges   [][]converge.Edge
	removed [][]converge.ID
	n       int // children so far
}

// add keeps the children, edges and removals of part r.
func (p *parts) add(r *converge.Result) {
	p.kids = append(p.kids, r.Children)
	p.edges = append(p.edges, r.Edges)
	p.removed = append(p.removed, r.Removed)
	p.n += len(r.Children)
}

// children counts the children received so far (0 for a nil p).
func (p *parts) children() int {
	if p == nil {
		return 0
	}
	return p.n
}

// join makes last, the final part, the whole result: every part's
// children, edges and removals in order, with last's own after them.
// Parts are dropped as they are copied.
func (p *parts) join(last *converge.Result) {
	last.Children = joinParts(p.kids, last.Children)
	last.Edges = joinParts(p.edges, last.Edges)
	last.Removed = joinParts(p.removed, last.Removed)
}

// joinParts concatenates ps and then tail into one slice of exactly their
// length, clearing ps as it goes.
func joinParts[T any](ps [][]T, tail []T) []T {
	n := len(tail)
	for _, x := range ps {
		n += len(x)
	}
	if n == 0 {
		return nil
	}
	out := make([]T, 0, n)
	for i := range ps {
		out = append(out, ps[i]...)
		ps[i] = nil
	}
	return append(out, tail...)
}

func resultFromProto(p *convergev1.Result, worker string) *converge.Result {
	r := &converge.Result{TaskID: p.GetTaskId(), Worker: worker, Message: p.GetMessage(),
		Delta: p.GetDelta(), Revision: p.GetRevision()}
	if rm := p.GetRemoved(); len(rm) > 0 {
		r.Removed = make([]converge.ID, len(rm))
		for i, id := range rm {
			r.Removed[i] = converge.ID(id)
		}
	}
	switch p.GetOutcome() {
	case convergev1.Outcome_OUTCOME_OK:
		r.Outcome = converge.OutcomeOK
	case convergev1.Outcome_OUTCOME_PERMANENT:
		r.Outcome = converge.OutcomePermanent
	default:
		r.Outcome = converge.OutcomeTransient
	}
	if len(p.GetStatus()) > 0 {
		r.Status = p.GetStatus()
	}
	if o := p.GetObservation(); o != nil {
		r.Observed = &converge.Observation{Exists: o.GetExists(), Managed: o.GetManaged()}
		if len(o.GetActual()) > 0 {
			r.Observed.Actual = o.GetActual()
		}
	}
	if cs := p.GetChildren(); len(cs) > 0 {
		r.Children = make([]converge.Child, len(cs))
		for i, c := range cs {
			r.Children[i] = converge.Child{
				Kind: c.GetKind(), KindVersion: int(c.GetKindVersion()), Name: c.GetName(),
				Spec: c.GetSpec(), ProviderConfigRef: c.GetProviderConfigRef(), Added: c.GetAdded(),
			}
		}
	}
	if es := p.GetEdges(); len(es) > 0 {
		r.Edges = make([]converge.Edge, len(es))
		var flows flowLists
		for i, e := range es {
			r.Edges[i] = converge.Edge{Consumer: converge.ID(e.GetConsumer()), Producer: converge.ID(e.GetProducer())}
			if fs := e.GetFlows(); len(fs) > 0 {
				r.Edges[i].Flows = flows.of(fs)
			}
		}
	}
	return r
}

// flowLists shares the flow lists of one result's edges: a composition's
// million edges carry a handful of distinct lists, and a list each was
// two million small allocations at 1M (flow lists are never changed in
// place; the scheduler's graph shares them the same way).
type flowLists struct {
	byKey map[string][]converge.ValueFlow
	key   []byte
}

// maxFlowLists bounds the distinct lists one result shares.
const maxFlowLists = 256

// of returns the flow list fs converts to, shared with an equal one
// converted before.
func (l *flowLists) of(fs []*convergev1.ValueFlow) []converge.ValueFlow {
	k := l.key[:0]
	for _, f := range fs {
		k = append(append(append(append(k, f.GetFrom()...), 0), f.GetTo()...), 0)
	}
	l.key = k
	if x, ok := l.byKey[string(k)]; ok {
		return x
	}
	out := make([]converge.ValueFlow, len(fs))
	for j, f := range fs {
		out[j] = converge.ValueFlow{From: f.GetFrom(), To: f.GetTo()}
	}
	if l.byKey == nil {
		l.byKey = make(map[string][]converge.ValueFlow)
	}
	if len(l.byKey) < maxFlowLists {
		l.byKey[string(k)] = out
	}
	return out
}
