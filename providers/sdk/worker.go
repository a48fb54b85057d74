package sdk

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/convergehq/converge"
	convergev1 "github.com/convergehq/converge/proto/converge/v1"
)

// Environment variables Serve reads.
const (
	EnvAddr        = "CONVERGE_ADDR"        // "unix:///abs/path.sock", "host:port", or "host:port,host:port,…" (replicas)
	EnvToken       = "CONVERGE_TOKEN"       // the control plane's bearer token
	EnvWorkerName  = "CONVERGE_WORKER_NAME" // default: hostname-pid
	EnvConcurrency = "CONVERGE_CONCURRENCY" // default 256
	// TLS to a control plane on TCP (ignored for unix sockets): the CA
	// that signed the server's certificate, and for mutual TLS the
	// worker's certificate and key, all PEM files.
	EnvTLSCA   = "CONVERGE_TLS_CA"
	EnvTLSCert = "CONVERGE_TLS_CERT"
	EnvTLSKey  = "CONVERGE_TLS_KEY"
)

// LeaderTrailer is the trailer of a control-plane replica's refusal
// (codes.Unavailable: it is not the leader) that holds the leader's
// workers address, "" when none is known. A worker given several
// addresses goes there next if it is one of them, else to the next.
const LeaderTrailer = "converge-leader"

// DefaultConcurrency is how many tasks a worker runs at once by default:
// the control plane's default max_inflight of one kind version, so one
// worker can take a whole kind's window. At 64, two workers held a
// converge of cheap tasks to 128 in flight, and a million resources took
// 40% longer, their results coming back in smaller batches (docs/
// BENCHMARKS.md). A provider whose tasks share a scarce resource bounds
// it itself (a connection pool), or sets Concurrency.
const DefaultConcurrency = 256

const (
	maxBatch     = 512     // results per ResultBatch message
	maxBatchSize = 4 << 20 // approximate bytes per ResultBatch message
	maxMsgSize   = 64 << 20
	// partItems and partBytes bound one part of a streamed compose
	// result: a composition of any size travels as parts this small.
	partItems = 4096
	partBytes = 1 << 20
)

// Protocol is the worker protocol version this SDK speaks: 2 streams a
// compose result in parts, so a composition of any size reaches the
// control plane. Control planes older than 2 take one message per
// result, which must then fit their message limit.
const Protocol = 2

// Options configure Connect.
type Options struct {
	// Addr is the control plane: "unix:///abs/path.sock" or "host:port",
	// or, for a replicated control plane (serve --replica), the replicas'
	// "host:port" separated by commas: the worker connects to whichever
	// leads, and follows the leadership when it moves.
	Addr string
	// Token is the bearer token the control plane expects.
	Token string
	// Name identifies the worker in logs and results (default hostname-pid).
	Name string
	// Concurrency bounds the tasks run at once (default 256).
	Concurrency int
	// Logger receives connection events (default slog.Default()).
	Logger *slog.Logger
	// TLS, if set, secures a TCP connection (not a unix socket).
	TLS *tls.Config
}

// OptionsFromEnv reads Options from CONVERGE_ADDR, CONVERGE_TOKEN,
// CONVERGE_WORKER_NAME and CONVERGE_CONCURRENCY.
func OptionsFromEnv() (Options, error) {
	o := Options{Addr: os.Getenv(EnvAddr), Token: os.Getenv(EnvToken), Name: os.Getenv(EnvWorkerName)}
	if s := os.Getenv(EnvConcurrency); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("%s=%q: want a positive integer", EnvConcurrency, s)
		}
		o.Concurrency = n
	}
	ca, cert, key := os.Getenv(EnvTLSCA), os.Getenv(EnvTLSCert), os.Getenv(EnvTLSKey)
	if ca == "" && cert == "" && key == "" {
		return o, nil
	}
	o.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return o, fmt.Errorf("%s: %w", EnvTLSCA, err)
		}
		o.TLS.RootCAs = x509.NewCertPool()
		if !o.TLS.RootCAs.AppendCertsFromPEM(pem) {
			return o, fmt.Errorf("%s: no PEM certificate in %s", EnvTLSCA, ca)
		}
	}
	if cert != "" || key != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return o, fmt.Errorf("%s/%s: %w", EnvTLSCert, EnvTLSKey, err)
		}
		o.TLS.Certificates = []tls.Certificate{c}
	}
	return o, nil
}

// Serve runs providers as a worker configured from the environment (see
// OptionsFromEnv) until ctx is done, reconnecting with backoff whenever
// the control plane goes away. It returns nil when ctx is done, and an
// error if the configuration is invalid or the control plane refuses the
// worker (a wrong token).
func Serve(ctx context.Context, providers ...Provider) error {
	o, err := OptionsFromEnv()
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return Connect(ctx, o, providers...)
}

// Connect is Serve with explicit options instead of the environment.
func Connect(ctx context.Context, o Options, providers ...Provider) error {
	c, err := newClient(o, providers)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	addrs := splitAddrs(o.Addr)
	clients := make([]convergev1.ControlClient, len(addrs))
	for i, addr := range addrs {
		creds := insecure.NewCredentials()
		if o.TLS != nil && !strings.HasPrefix(addr, "unix:") {
			creds = credentials.NewTLS(o.TLS)
		}
		conn, err := grpc.NewClient(target(addr),
			grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
				MinConnectTimeout: 2 * time.Second,
			}),
		)
		if err != nil {
			return fmt.Errorf("connect %s: %w", addr, err)
		}
		defer conn.Close()
		clients[i] = convergev1.NewControlClient(conn)
	}

	// With several addresses a failed attempt moves to the next one (or
	// to the leader a refusing follower names) and the backoff grows only
	// once every address has failed in a row.
	maxBackoff := 5 * time.Second
	if len(addrs) > 1 {
		maxBackoff = time.Second
	}
	const minBackoff = 50 * time.Millisecond
	wait := minBackoff
	cur, failedInRow := 0, 0
	for {
		registered, leader, err := c.session(ctx, clients[cur])
		if ctx.Err() != nil {
			return nil
		}
		switch status.Code(err) {
		case codes.Unauthenticated, codes.InvalidArgument, codes.PermissionDenied:
			return fmt.Errorf("connect %s: %w", addrs[cur], err)
		}
		if registered {
			wait, failedInRow = minBackoff, 0
		} else {
			failedInRow++
		}
		next := (cur + 1) % len(addrs)
		if i := slices.Index(addrs, leader); leader != "" && i >= 0 && i != cur {
			next, failedInRow = i, 0 // a follower named the leader: go there now
		}
		pause := time.Duration(0)
		if len(addrs) == 1 || failedInRow >= len(addrs) {
			pause = wait + rand.N(wait/2+1)
			wait = min(2*wait, maxBackoff)
			failedInRow = 0
		}
		args := []any{"worker", c.name, "addr", addrs[cur], "err", err, "next", addrs[next], "in", pause}
		if h := connectHint(err, o.TLS); h != "" {
			args = append(args, "hint", h)
		}
		c.log.Warn("worker disconnected; reconnecting", args...)
		cur = next
		if pause == 0 {
			continue
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// connectHint explains a failed connection when its error looks like a
// mismatch between the worker's TLS settings (cfg; nil for plain TCP)
// and the control plane's (serve --workers-tls-*); "" otherwise.
func connectHint(err error, cfg *tls.Config) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	mtls := "set " + EnvTLSCert + " and " + EnvTLSKey + " to a client certificate its CA signed (mutual TLS)"
	switch {
	case cfg == nil && strings.Contains(msg, "error reading server preface: EOF"):
		return "the control plane closed the connection at once: it may require TLS (set " + EnvTLSCA + ", and for mutual TLS " + EnvTLSCert + " and " + EnvTLSKey + ")"
	case cfg != nil && strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "the control plane does not serve TLS on this address: unset " + EnvTLSCA + ", " + EnvTLSCert + " and " + EnvTLSKey + ", or give serve --workers-tls-cert"
	case strings.Contains(msg, "tls: certificate required"), strings.Contains(msg, "tls: bad certificate"),
		strings.Contains(msg, "tls: unknown certificate authority"):
		return "the control plane refused this worker's client certificate, or its lack of one: " + mtls
	case cfg != nil && (strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset by peer")):
		return "the control plane closed the TLS connection: if it requires mutual TLS, " + mtls
	case strings.Contains(msg, "x509: certificate signed by unknown authority"):
		return "the control plane's certificate is not signed by a CA in " + EnvTLSCA
	}
	return ""
}

// splitAddrs splits Options.Addr's comma-separated list.
func splitAddrs(addr string) []string {
	var out []string
	for _, a := range strings.Split(addr, ",") {
		out = append(out, strings.TrimSpace(a))
	}
	return out
}

func target(addr string) string {
	if strings.HasPrefix(addr, "unix:") {
		return addr
	}
	return "passthrough:///" + addr
}

type kindKey struct {
	kind    string
	version int
}

// client is one worker: its providers and its concurrency slots, shared by
// successive sessions.
type client struct {
	name      string
	token     string
	log       *slog.Logger
	providers map[kindKey]*Provider
	caps      []*convergev1.Capability
	sem       chan struct{} // one slot per running handler
	waiting   atomic.Bool   // the receiver is blocked on sem
}

func newClient(o Options, providers []Provider) (*client, error) {
	if o.Addr == "" {
		return nil, fmt.Errorf("no control plane address (%s)", EnvAddr)
	}
	if addrs := splitAddrs(o.Addr); len(addrs) > 1 {
		for _, a := range addrs {
			if a == "" || strings.HasPrefix(a, "unix:") {
				return nil, fmt.Errorf("control plane addresses %q: want host:port,host:port,… (a unix socket is one local control plane, never in a list)", o.Addr)
			}
		}
	}
	if o.Token == "" {
		return nil, fmt.Errorf("no token (%s)", EnvToken)
	}
	if len(providers) == 0 {
		return nil, errors.New("no providers")
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Name == "" {
		h, _ := os.Hostname()
		o.Name = h + "-" + strconv.Itoa(os.Getpid())
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	c := &client{
		name: o.Name, token: o.Token, log: o.Logger,
		providers: make(map[kindKey]*Provider),
		sem:       make(chan struct{}, o.Concurrency),
	}
	for i := range providers {
		p := &providers[i]
		ref := converge.KindRef{Kind: p.Kind, Version: p.Version}
		if p.Kind == "" || p.Version <= 0 {
			return nil, fmt.Errorf("provider %s: want a kind and a version > 0", ref)
		}
		if p.Compose != nil && p.ComposeStream != nil {
			return nil, fmt.Errorf("provider %s: set Compose or ComposeStream, not both", ref)
		}
		if (p.Parts != nil) != (p.ComposePart != nil) || p.Parts != nil && p.ComposeStream == nil {
			return nil, fmt.Errorf("provider %s: Parts and ComposePart go together, with ComposeStream", ref)
		}
		k := kindKey{p.Kind, p.Version}
		if _, dup := c.providers[k]; dup {
			return nil, fmt.Errorf("provider %s: declared twice", ref)
		}
		rs := p.Reactions()
		if len(rs) == 0 {
			return nil, fmt.Errorf("provider %s: no handlers", ref)
		}
		c.providers[k] = p
		c.caps = append(c.caps, &convergev1.Capability{Kind: p.Kind, KindVersion: int32(p.Version), Reactions: rs})
	}
	return c, nil
}

// session holds one stream until it breaks or ctx is done. registered
// reports whether the control plane accepted the worker; leader is the
// leader's workers address a refusing follower replica named.
func (c *client) session(ctx context.Context, client convergev1.ControlClient) (registered bool, leader string, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sctx = metadata.AppendToOutgoingContext(sctx, "authorization", "Bearer "+c.token)
	stream, err := client.Connect(sctx)
	if err != nil {
		return false, "", err
	}
	// A follower replica refuses the stream; its trailer names the leader.
	refused := func(err error) (bool, string, error) {
		if vs := stream.Trailer().Get(LeaderTrailer); len(vs) == 1 {
			leader = vs[0]
		}
		return false, leader, err
	}
	if err := stream.Send(&convergev1.WorkerMessage{Msg: &convergev1.WorkerMessage_Register{Register: &convergev1.Register{
		Name: c.name, Capabilities: c.caps, Concurrency: int32(cap(c.sem)), Protocol: Protocol,
	}}}); err != nil {
		_, rerr := stream.Recv() // the server's status explains a refused send
		return refused(rerr)
	}
	m, err := stream.Recv()
	if err != nil {
		return refused(err)
	}
	reg := m.GetRegistered()
	if reg == nil {
		return false, "", errors.New("control plane did not answer register")
	}
	interval := time.Duration(reg.GetHeartbeatIntervalMs()) * time.Millisecond
	if interval <= 0 {
		interval = 2 * time.Second
	}
	c.log.Info("worker registered", "worker", c.name, "id", reg.GetWorkerId())

	out := &outbox{wake: make(chan struct{}, 1), parts: reg.GetProtocol() >= 2, maxMsg: maxMsgSize}
	if m := reg.GetMaxMessageBytes(); m > 0 {
		out.maxMsg = int(m)
	}
	if !out.parts {
		c.log.Warn("the control plane speaks worker protocol 1: a compose result is sent as one message and must fit its message limit",
			"worker", c.name, "sdk_protocol", Protocol)
	}
	var lastRecv atomic.Int64
	lastRecv.Store(time.Now().UnixNano())
	sendErr := make(chan error, 1)
	go func() {
		sendErr <- c.send(sctx, stream, out, interval, &lastRecv)
		cancel()
	}()
	for {
		m, err := stream.Recv()
		if err != nil {
			cancel()
			if serr := <-sendErr; serr != nil && !errors.Is(serr, context.Canceled) {
				return true, "", serr
			}
			return true, "", err
		}
		lastRecv.Store(time.Now().UnixNano())
		for _, t := range m.GetTasks().GetTasks() {
			if !c.acquire(sctx) {
				break
			}
			go c.run(sctx, t, out)
		}
	}
}

// acquire takes a concurrency slot, waiting while all are busy; it returns
// false if ctx is done first.
func (c *client) acquire(ctx context.Context) bool {
	select {
	case c.sem <- struct{}{}:
		return true
	default:
	}
	c.waiting.Store(true)
	defer c.waiting.Store(false)
	select {
	case c.sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// send writes results and heartbeats: the only goroutine calling
// stream.Send after registration.
func (c *client) send(ctx context.Context, stream convergev1.Control_ConnectClient, out *outbox, interval time.Duration, lastRecv *atomic.Int64) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	batch := &convergev1.ResultBatch{}
	msg := &convergev1.WorkerMessage{Msg: &convergev1.WorkerMessage_Results{Results: batch}}
	var spare []outItem
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-ticker.C:
			if !c.waiting.Load() && now.Sub(time.Unix(0, lastRecv.Load())) > 3*interval {
				return errors.New("control plane silent for 3 heartbeat intervals")
			}
			if err := stream.Send(&convergev1.WorkerMessage{Msg: &convergev1.WorkerMessage_Heartbeat{
				Heartbeat: &convergev1.Heartbeat{InFlight: int32(len(c.sem))},
			}}); err != nil {
				return err
			}
			continue
		case <-out.wake:
		}
		out.mu.Lock()
		all := out.results
		out.results = spare[:0]
		out.mu.Unlock()
		rs := all
		for len(rs) > 0 {
			if rs[0].sent != nil {
				// A part of a streamed composition: alone, then its
				// Emitter may make the next.
				batch.Results = append(batch.Results, rs[0].res)
				err := stream.Send(msg)
				clear(batch.Results)
				batch.Results = batch.Results[:0]
				close(rs[0].sent)
				rs[0] = outItem{}
				rs = rs[1:]
				if err != nil {
					return err
				}
				continue
			}
			if rs[0].comp != nil {
				err := sendComposition(stream, rs[0].res.TaskId, rs[0].comp, out.maxMsg)
				rs[0] = outItem{}
				rs = rs[1:]
				if err != nil {
					return err
				}
				continue
			}
			n, size := 0, 0
			for n < len(rs) && rs[n].comp == nil && rs[n].sent == nil && n < maxBatch && size < maxBatchSize {
				if len(rs[n].res.Children) > 0 || len(rs[n].res.Edges) > 0 {
					size += proto.Size(rs[n].res)
				} else {
					size += 64 + len(rs[n].res.Status) + len(rs[n].res.Message)
				}
				batch.Results = append(batch.Results, rs[n].res)
				n++
			}
			err := stream.Send(msg)
			clear(batch.Results)
			batch.Results = batch.Results[:0]
			clear(rs[:n])
			rs = rs[n:]
			if err != nil {
				return err
			}
		}
		spare = all[:0]
	}
}

// sendComposition streams comp as the parts of task taskID's result, each
// converted only when it is sent, and lets go of what it sent: a worker
// holds the composition and one part, not a second copy of all of it. A
// part over the message limit (one huge child) ends the result with a
// permanent failure that says so.
func sendComposition(stream convergev1.Control_ConnectClient, taskID string, comp *Composition, maxMsg int) error {
	part := &convergev1.Result{TaskId: taskID, More: true}
	msg := &convergev1.WorkerMessage{Msg: &convergev1.WorkerMessage_Results{Results: &convergev1.ResultBatch{Results: []*convergev1.Result{part}}}}
	items, size, parts := 0, 0, 0
	send := func(last bool) error {
		part.More = !last
		if last {
			part.Outcome = convergev1.Outcome_OUTCOME_OK
		}
		if n := proto.Size(part); n > maxMsg-(64<<10) {
			*part = convergev1.Result{TaskId: taskID, Outcome: convergev1.Outcome_OUTCOME_PERMANENT,
				Message: fmt.Sprintf("result too large: part %d is %d bytes, over the control plane's message limit of %d bytes%s",
					parts+1, n, maxMsg, partHint(true))}
			last = true
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
		parts++
		if last {
			return errDone
		}
		part.Children, part.Edges = part.Children[:0], part.Edges[:0]
		items, size = 0, 0
		return nil
	}
	for i := range comp.Children {
		if items >= partItems || size >= partBytes {
			if err := send(false); err != nil {
				return ignoreDone(err)
			}
		}
		ch := &comp.Children[i]
		part.Children = append(part.Children, &convergev1.Child{Kind: ch.Kind, KindVersion: int32(ch.KindVersion), Name: ch.Name,
			Spec: ch.Spec, ProviderConfigRef: ch.ProviderConfigRef})
		items++
		size += len(ch.Kind) + len(ch.Name) + len(ch.Spec) + len(ch.ProviderConfigRef) + 16
		*ch = converge.Child{}
	}
	for i := range comp.Edges {
		if items >= partItems || size >= partBytes {
			if err := send(false); err != nil {
				return ignoreDone(err)
			}
		}
		e := &comp.Edges[i]
		pe := &convergev1.Edge{Consumer: string(e.Consumer), Producer: string(e.Producer)}
		for _, f := range e.Flows {
			pe.Flows = append(pe.Flows, &convergev1.ValueFlow{From: f.From, To: f.To})
			size += len(f.From) + len(f.To) + 8
		}
		part.Edges = append(part.Edges, pe)
		items++
		size += len(e.Consumer) + len(e.Producer) + 16
		*e = converge.Edge{}
	}
	return ignoreDone(send(true))
}

// errDone ends sendComposition early after a final part.
var errDone = errors.New("composition sent")

func ignoreDone(err error) error {
	if err == errDone {
		return nil
	}
	return err
}

// outbox collects finished results for the sender.
type outbox struct {
	mu      sync.Mutex // guards results
	results []outItem
	wake    chan struct{} // capacity 1: results is non-empty
	// parts: the control plane takes a result in parts (protocol 2);
	// maxMsg is the largest message it accepts.
	parts  bool
	maxMsg int
}

// outItem is one queued answer: a result, or (comp set) a composition
// the sender streams in parts, res holding only its task id, or (sent
// set) one part of a streamed composition, sent alone, after which sent
// is closed.
type outItem struct {
	res  *convergev1.Result
	comp *Composition
	sent chan struct{}
}

// add queues r for the sender. A result over the message limit is
// replaced by a permanent failure that says so: it could never arrive.
func (o *outbox) add(r *convergev1.Result) {
	if len(r.Children)+len(r.Edges) > 0 {
		if n := proto.Size(r); n > o.maxMsg-(64<<10) {
			r = &convergev1.Result{TaskId: r.TaskId, Outcome: convergev1.Outcome_OUTCOME_PERMANENT,
				Message: fmt.Sprintf("result too large: the result is %d bytes, over the control plane's message limit of %d bytes%s",
					n, o.maxMsg, partHint(o.parts))}
		}
	} else if n := len(r.Status) + len(r.Message); n > o.maxMsg-(64<<10) {
		r = &convergev1.Result{TaskId: r.TaskId, Outcome: convergev1.Outcome_OUTCOME_PERMANENT,
			Message: fmt.Sprintf("result too large: the status is %d bytes, over the control plane's message limit of %d bytes", n, o.maxMsg)}
	}
	o.push(outItem{res: r})
}

// addComposition queues the answer of a compose task: streamed in parts
// when it is big and the control plane takes parts, else one result.
func (o *outbox) addComposition(taskID string, comp *Composition) {
	if o.parts && comp != nil && len(comp.Children)+len(comp.Edges) > partItems {
		o.push(outItem{res: &convergev1.Result{TaskId: taskID}, comp: comp})
		return
	}
	r := compositionResult(comp)
	r.TaskId = taskID
	o.add(r)
}

func (o *outbox) push(it outItem) {
	o.mu.Lock()
	o.results = append(o.results, it)
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// run answers one task exactly once: with the handler's result, or with a
// transient "deadline exceeded" when the deadline passes first. Its
// concurrency slot is held until the handler returns.
func (c *client) run(sctx context.Context, t *convergev1.Task, out *outbox) {
	defer func() { <-c.sem }()
	req := requestFromProto(t)
	ctx := sctx
	var answered atomic.Bool
	if dl := t.GetDeadlineUnixNano(); dl != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(sctx, time.Unix(0, dl))
		defer cancel()
		stop := context.AfterFunc(ctx, func() {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) && answered.CompareAndSwap(false, true) {
				out.add(&convergev1.Result{TaskId: t.GetId(), Outcome: convergev1.Outcome_OUTCOME_TRANSIENT,
					Message: fmt.Sprintf("%s %s/%s: deadline exceeded", t.GetReaction(), t.GetKind(), t.GetName())})
			}
		})
		defer stop()
	}
	if ctx.Err() != nil {
		return // expired on arrival (answered above) or the session is gone
	}
	if p := c.providers[kindKey{req.Kind, req.KindVersion}]; p != nil && p.ComposeStream != nil && req.Reaction == converge.ReactionCompose {
		c.stream(ctx, p, req, t.GetId(), out, &answered)
		return
	}
	res, comp := c.call(ctx, req)
	if answered.CompareAndSwap(false, true) {
		if comp != nil {
			out.addComposition(t.GetId(), comp)
			return
		}
		res.TaskId = t.GetId()
		out.add(res)
	}
}

// call runs the handler for req, turning its return (or panic) into a
// result without a task id, or, for a successful compose, the
// composition (sent by addComposition).
func (c *client) call(ctx context.Context, req *Request) (res *convergev1.Result, comp *Composition) {
	defer func() {
		if v := recover(); v != nil {
			c.log.Error("handler panicked", "reaction", req.Reaction, "kind", req.Kind, "name", req.Name,
				"panic", v, "stack", string(debug.Stack()))
			res, comp = &convergev1.Result{Outcome: convergev1.Outcome_OUTCOME_TRANSIENT, Message: fmt.Sprintf("panic: %v", v)}, nil
		}
	}()
	p := c.providers[kindKey{req.Kind, req.KindVersion}]
	if p == nil {
		return errResult(Permanent(fmt.Errorf("%s/v%d is not served by worker %s", req.Kind, req.KindVersion, c.name))), nil
	}
	notServed := func() *convergev1.Result {
		return errResult(Permanent(fmt.Errorf("%s/v%d: reaction %q is not served by worker %s", req.Kind, req.KindVersion, req.Reaction, c.name)))
	}
	switch req.Reaction {
	case converge.ReactionReconcile:
		if p.Reconcile == nil {
			return notServed(), nil
		}
		return statusResult(p.Reconcile(ctx, req)), nil
	case converge.ReactionCompose:
		if p.Compose == nil {
			return notServed(), nil
		}
		comp, err := p.Compose(ctx, req)
		if err != nil {
			return errResult(err), nil
		}
		if comp == nil {
			comp = &Composition{}
		}
		return nil, comp
	case converge.ReactionTeardown:
		if p.Teardown == nil {
			return notServed(), nil
		}
		return errResult(p.Teardown(ctx, req)), nil
	case converge.ReactionReact:
		if p.React == nil {
			return notServed(), nil
		}
		return errResult(p.React(ctx, req)), nil
	case converge.ReactionObserve:
		if p.Observe == nil {
			return notServed(), nil
		}
		return observationResult(p.Observe(ctx, req)), nil
	}
	h := p.Verbs[req.Reaction]
	if h == nil {
		return notServed(), nil
	}
	return statusResult(h(ctx, req)), nil
}

func errResult(err error) *convergev1.Result {
	if err == nil {
		return &convergev1.Result{Outcome: convergev1.Outcome_OUTCOME_OK}
	}
	o := convergev1.Outcome_OUTCOME_TRANSIENT
	if OutcomeOf(err) == converge.OutcomePermanent {
		o = convergev1.Outcome_OUTCOME_PERMANENT
	}
	return &convergev1.Result{Outcome: o, Message: err.Error()}
}

func statusResult(st any, err error) *convergev1.Result {
	if err != nil {
		return errResult(err)
	}
	var b []byte
	switch v := st.(type) {
	case nil:
	case json.RawMessage:
		b = v
	case []byte:
		b = v
	default:
		if b, err = json.Marshal(v); err != nil {
			return errResult(Permanent(fmt.Errorf("encode status: %w", err)))
		}
	}
	if string(b) == "null" {
		b = nil
	}
	return &convergev1.Result{Outcome: convergev1.Outcome_OUTCOME_OK, Status: b}
}

// observationResult encodes an Observe handler's answer; a nil
// Observation is an object that does not exist.
func observationResult(o *Observation, err error) *convergev1.Result {
	if err != nil {
		return errResult(err)
	}
	po := &convergev1.Observation{}
	if o != nil {
		po.Exists, po.Managed = o.Exists, o.Managed
		switch v := o.Actual.(type) {
		case nil:
		case json.RawMessage:
			po.Actual = v
		default:
			b, err := json.Marshal(v)
			if err != nil {
				return errResult(Permanent(fmt.Errorf("encode observation: %w", err)))
			}
			po.Actual = b
		}
		if len(po.Actual) > 0 && po.Actual[0] != '{' {
			return errResult(Permanent(fmt.Errorf("observation: actual is not a JSON object: %.40s", po.Actual)))
		}
	}
	return &convergev1.Result{Outcome: convergev1.Outcome_OUTCOME_OK, Observation: po}
}

func compositionResult(comp *Composition) *convergev1.Result {
	r := &convergev1.Result{Outcome: convergev1.Outcome_OUTCOME_OK}
	if comp == nil {
		return r
	}
	r.Children = make([]*convergev1.Child, len(comp.Children))
	for i, ch := range comp.Children {
		r.Children[i] = &convergev1.Child{Kind: ch.Kind, KindVersion: int32(ch.KindVersion), Name: ch.Name,
			Spec: ch.Spec, ProviderConfigRef: ch.ProviderConfigRef}
	}
	r.Edges = make([]*convergev1.Edge, len(comp.Edges))
	for i, e := range comp.Edges {
		pe := &convergev1.Edge{Consumer: string(e.Consumer), Producer: string(e.Producer)}
		for _, f := range e.Flows {
			pe.Flows = append(pe.Flows, &convergev1.ValueFlow{From: f.From, To: f.To})
		}
		r.Edges[i] = pe
	}
	return r
}

func requestFromProto(t *convergev1.Task) *Request {
	r := &Request{
		TaskID: t.GetId(), Key: t.GetKey(), Reaction: t.GetReaction(),
		UID: t.GetUid(), Kind: t.GetKind(), KindVersion: int(t.GetKindVersion()), Name: t.GetName(),
		Generation: t.GetGeneration(), Args: t.GetArgs(), DryRun: t.GetDryRun(),
	}
	if b := t.GetSpec(); len(b) > 0 {
		r.Spec = b
	}
	if b := t.GetStatus(); len(b) > 0 {
		r.Status = b
	}
	if b := t.GetConfig(); len(b) > 0 {
		r.Config = b
	}
	if b := t.GetBaseSpec(); len(b) > 0 {
		r.BaseSpec, r.BaseRevision = b, t.GetBaseRevision()
	}
	if s := t.GetSubject(); s != nil {
		r.Subject = &converge.Subject{Resource: converge.ID(s.GetResource()), UID: s.GetUid(),
			Generation: s.GetGeneration(), Transition: s.GetTransition()}
		if b := s.GetStatus(); len(b) > 0 {
			r.Subject.Status = b
		}
	}
	return r
}

func partHint(parts bool) string {
	if parts {
		return " (one child's spec or the status alone is too large)"
	}
	return " (the control plane speaks worker protocol 1, which cannot stream a big composition in parts: upgrade it)"
}
