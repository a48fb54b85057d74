package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/state/etcdstate"
	gitsync "github.com/convergehq/converge/sync"
)

// Terms runs the leadership terms of one replica of a replicated control
// plane (serve --replica): it campaigns for the leadership; while it
// leads (a term) it runs an engine on the store opened under the term
// and the term's work (the follow loop), and when its term ends (its
// election lease lost: paused, cut off from etcd) it stops them at once
// and campaigns again. Workers that connect while it follows are
// refused, pointed at the leader.
type Terms struct {
	rep   *etcdstate.Replica
	stall time.Duration
	// health is the current term's, nil while following.
	health atomic.Pointer[gitsync.Health]
}

// NewTerms returns the terms of rep; each term's Health reports a loop
// that goes stall without a look at its engine.
func NewTerms(rep *etcdstate.Replica, stall time.Duration) *Terms {
	return &Terms{rep: rep, stall: stall}
}

// Health is the current term's health (GET /healthz), nil while the
// replica follows.
func (t *Terms) Health() *gitsync.Health { return t.health.Load() }

// TermEvents hear what a replica's terms do, for serve's output and
// readiness. Run calls them from its own goroutine.
type TermEvents interface {
	// Follows says leader leads while this replica campaigns.
	Follows(leader string)
	// CampaignFailed says a campaign failed; Run campaigns again.
	CampaignFailed(err error)
	// Leads says a term began.
	Leads(term *etcdstate.Term)
	// Leading says the term's engine runs (nil: it stopped).
	Leading(e *Engine)
	// Lost says the term was lost: its engine is stopping.
	Lost()
	// CloseFailed says the term's engine did not close cleanly.
	CloseFailed(err error)
	// SteppedDown says the term ended, and why; Run campaigns again.
	SteppedDown(why string)
	// ShuttingDown says Run returns: ctx is done.
	ShuttingDown()
}

// TermOptions are what Terms.Run needs.
type TermOptions struct {
	// Advert is what the replica publishes while it leads.
	Advert etcdstate.Advert
	// Workers, when set, is the replica's workers listener: a term's
	// engine serves it, a follower's refusal otherwise.
	Workers *ConnSwitch
	// Token, Tokens and TLS are the external workers'
	// (providers.ServerOptions).
	Token  string
	Tokens func() []string
	TLS    *tls.Config
	Log    *slog.Logger
	// Engine are the options of a term's engine; its store, listeners and
	// live-site hook are the term's own.
	Engine Options
	// Work runs a term's work on its engine until ctx is done: reqs
	// carries the sync requests of any replica (webhook deliveries), h is
	// the term's health.
	Work   func(ctx context.Context, e *Engine, reqs <-chan struct{}, h *gitsync.Health)
	Events TermEvents
}

// Run campaigns and leads, term after term, until ctx is done.
func (t *Terms) Run(ctx context.Context, o TermOptions) {
	ev := o.Events
	// follower refuses workers while the replica does not lead: from
	// the start, and from the moment a term is lost (lead starts it
	// then, before its engine has stopped).
	var follower *providers.Follower
	defer func() {
		if follower != nil {
			follower.Close()
		}
	}()
	for {
		if follower == nil {
			follower = t.refuseWorkers(ctx, o)
		}
		if l := t.leader(ctx); l.Name != "" {
			ev.Follows(l.Name)
		}
		term, err := t.rep.Campaign(ctx, o.Advert)
		if follower != nil {
			follower.Close()
			follower = nil
		}
		if ctx.Err() != nil {
			ev.ShuttingDown()
			return
		}
		if err != nil {
			ev.CampaignFailed(err)
			if !pause(ctx) {
				return
			}
			continue
		}
		h := &gitsync.Health{Stall: t.stall}
		t.health.Store(h)
		why, failed, refusal := t.lead(ctx, term, o, h)
		t.health.Store(nil)
		follower = refusal
		if err := term.End(); err != nil {
			o.Log.Warn("end term", "replica", t.rep.Name(), "err", err)
		}
		if ctx.Err() != nil {
			ev.ShuttingDown()
			return
		}
		ev.SteppedDown(why)
		if failed && !pause(ctx) {
			// A replica that cannot lead (its engine would not start)
			// leaves the others, already campaigning, ahead of it.
			ev.ShuttingDown()
			return
		}
	}
}

// leader is the current leader as a follower names it to the workers
// it refuses (a zero Leader when etcd does not say within 2s).
func (t *Terms) leader(ctx context.Context) providers.Leader {
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	a, err := t.rep.Leader(lctx)
	if err != nil {
		return providers.Leader{}
	}
	return providers.Leader{Name: a.Name, Workers: a.Workers}
}

// refuseWorkers makes the workers listener's current service a
// follower's refusal, pointing workers at the leader; nil without a
// listener.
func (t *Terms) refuseWorkers(ctx context.Context, o TermOptions) *providers.Follower {
	if o.Workers == nil {
		return nil
	}
	f := providers.NewFollower(providers.ServerOptions{Token: o.Token, Tokens: o.Tokens, TLS: o.TLS, Logger: o.Log},
		func() providers.Leader { return t.leader(ctx) })
	go f.Serve(o.Workers.attach())
	return f
}

// lead runs one term: the engine (the store opened under the term, so
// every write is fenced on its election key) and the term's work, until
// ctx is done or the term is lost. It returns why the term ended,
// failed when this replica could not run it, and the refusal of workers
// it started when the term was lost (nil otherwise).
//
// The moment the term is lost (Term.Done) the replica stops leading:
// Health is nil (serve's /healthz says it follows), new workers are
// refused and pointed at the leader, and the term's context (the sync
// loop, the scheduler's store requests) is cancelled; the engine then
// closes without waiting on etcd (a lost term's store answers ErrFenced
// at once).
func (t *Terms) lead(ctx context.Context, term *etcdstate.Term, o TermOptions, health *gitsync.Health) (why string, failed bool, refusal *providers.Follower) {
	name := t.rep.Name()
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var lost atomic.Bool
	var lostAt time.Time    // when the loss was seen; set before lost
	var attachMu sync.Mutex // orders the engine's attach and the refusal's
	refused := make(chan *providers.Follower, 1)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-term.Done():
			attachMu.Lock()
			defer attachMu.Unlock()
			lostAt = time.Now()
			lost.Store(true)
			t.health.Store(nil)
			cancel() // stop the sync loop and the scheduler at once
			refused <- t.refuseWorkers(ctx, o)
		case <-tctx.Done():
		}
	}()
	defer func() {
		cancel()
		<-watched
		select {
		case refusal = <-refused:
		default:
		}
	}()
	since := term.Advert.Since.Format(time.RFC3339Nano)
	o.Events.Leads(term)
	st, err := term.Open(etcdstate.Options{})
	if err != nil {
		return fmt.Sprintf("open state: %v", err), true, nil
	}
	// The takeover is an event of the state, before the scheduler loads
	// it (the store numbers it; the scheduler numbers on from it).
	ev := converge.Event{Time: time.Now().UTC(), Type: "Leader", Message: fmt.Sprintf("leader %s since %s", name, since)}
	if err := st.Commit(tctx, &converge.Batch{Events: []converge.Event{ev}}); err != nil {
		st.Close()
		return fmt.Sprintf("record the takeover: %v", err), true, nil
	}
	eo := o.Engine
	eo.Store, eo.Etcd, eo.Listen, eo.Changed = st, nil, "", nil
	attachMu.Lock()
	if o.Workers != nil && !lost.Load() {
		eo.WorkersListener = o.Workers.attach()
	}
	attachMu.Unlock()
	e, err := Start(tctx, eo)
	if err != nil {
		st.Close()
		return err.Error(), true, nil
	}
	// Sync requests of any replica (webhook deliveries) reach the term
	// (it fetches on start anyway).
	reqs := term.SyncRequests(tctx)
	// Operators elsewhere reach the admin API through etcd (intents.go).
	intents := make(chan struct{})
	go func() { serveIntents(tctx, term, e.admin.Handler, o.Log); close(intents) }()
	o.Events.Leading(e)
	o.Work(tctx, e, reqs, health)
	cancel()
	<-intents
	o.Events.Leading(nil)
	if lost.Load() {
		o.Events.Lost()
	}
	if err := e.Close(); err != nil && !(lost.Load() && errors.Is(err, etcdstate.ErrFenced)) {
		o.Events.CloseFailed(err)
	}
	if !lost.Load() {
		return "shutting down", false, nil
	}
	stopped := fmt.Sprintf("its engine stopped in %v", time.Since(lostAt).Round(time.Millisecond))
	// Paused, or cut off: say which when etcd itself is the trouble.
	if err := t.rep.Health(time.Second); err != nil {
		return fmt.Sprintf("lost the election lease (%s): %v", stopped, err), false, nil
	}
	return fmt.Sprintf("lost the election lease (%s; not renewed for %v, or another replica leads: paused, or cut off from etcd)", stopped, term.TTL), false, nil
}

// pause waits a second before the next campaign, less when ctx ends
// first; it reports whether ctx is still live.
func pause(ctx context.Context) bool {
	wait, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	<-wait.Done()
	return ctx.Err() == nil
}

// WorkersAdvert is the workers address a replica publishes in its
// election value while it leads, for followers to name to the workers
// they refuse: advertise (--advertise) when given; else, when listen
// (--workers-listen) names a host, that host with the bound port
// (127.0.0.1:0 → 127.0.0.1:PORT, m1.example.com:9090 as written, which
// is also the name a worker's TLS checks the certificate against); else
// (":9090", "0.0.0.0:9090") the bound address, which no worker can
// dial: workers then try their address list in order.
func WorkersAdvert(listen, advertise string, bound net.Addr) string {
	if advertise != "" {
		return advertise
	}
	host, _, err := net.SplitHostPort(listen)
	_, boundPort, berr := net.SplitHostPort(bound.String())
	if err != nil || berr != nil || host == "" {
		return bound.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return bound.String()
	}
	return net.JoinHostPort(host, boundPort)
}

// ConnSwitch hands the connections of one listener (a replica's
// --workers-listen, which outlives its terms) to whichever worker
// service is current: the leader's engine during a term, a follower's
// refusal otherwise. attach makes a new current one; a service stopping
// closes its listener, and connections arriving between two are closed.
type ConnSwitch struct {
	l    net.Listener
	mu   sync.Mutex // guards cur
	cur  *subListener
	done chan struct{}
}

// NewConnSwitch starts accepting on l; Close stops it.
func NewConnSwitch(l net.Listener) *ConnSwitch {
	sw := &ConnSwitch{l: l, done: make(chan struct{})}
	go sw.accept()
	return sw
}

func (sw *ConnSwitch) accept() {
	defer close(sw.done)
	for {
		c, err := sw.l.Accept()
		if err != nil {
			return
		}
		sw.mu.Lock()
		cur := sw.cur
		sw.mu.Unlock()
		if cur == nil {
			c.Close()
			continue
		}
		select {
		case cur.conns <- c:
		case <-cur.closed:
			c.Close()
		}
	}
}

// attach returns the listener of the next current service.
func (sw *ConnSwitch) attach() net.Listener {
	sub := &subListener{addr: sw.l.Addr(), conns: make(chan net.Conn), closed: make(chan struct{})}
	sw.mu.Lock()
	old := sw.cur
	sw.cur = sub
	sw.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return sub
}

// Close closes the real listener and the current service's.
func (sw *ConnSwitch) Close() {
	sw.l.Close()
	<-sw.done
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.cur != nil {
		sw.cur.Close()
	}
}

// subListener is one service's view of a ConnSwitch.
type subListener struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *subListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *subListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *subListener) Addr() net.Addr { return l.addr }
