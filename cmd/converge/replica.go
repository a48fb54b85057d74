package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/state/etcdstate"
	gitsync "github.com/convergehq/converge/sync"
)

// defaultLeaseTTL is a replica's election lease when --lease-ttl is not
// given: a dead leader is replaced a few seconds after it stopped.
const defaultLeaseTTL = 5 * time.Second

// replicaFlags checks --replica and --lease-ttl against each other and
// against --state.
func (o serveOptions) replicaFlags(g *globals, ttlSet bool) error {
	if o.replica == "" {
		if ttlSet {
			return usageErr("--lease-ttl needs --replica")
		}
		if o.advertise != "" {
			return usageErr("--advertise needs --replica: it is the workers address a leader publishes to the other replicas")
		}
		return nil
	}
	if o.advertise != "" {
		if o.workersListen == "" {
			return usageErr("--advertise needs --workers-listen: it is where workers reach that listener")
		}
		host, port, err := net.SplitHostPort(o.advertise)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return usageErr("--advertise %q: want HOST:PORT, the address workers connect to (e.g. m1.example.com:9090)", o.advertise)
		}
	}
	if g.etcd == nil {
		return usageErr("--replica %s needs --state etcd://…: replicas share their state, and elect their leader, in etcd", o.replica)
	}
	if o.leaseTTL < time.Second {
		return usageErr("--lease-ttl %v: want at least 1s (etcd leases count whole seconds)", o.leaseTTL)
	}
	if o.workersListen != "" && os.Getenv("CONVERGE_WORKER_TOKEN") == "" {
		return usageErr("--replica with --workers-listen needs $CONVERGE_WORKER_TOKEN, the same on every replica: workers follow the leader from one replica to another")
	}
	return nil
}

// workersAdvert is the workers address a replica publishes in its
// election value while it leads, for followers to name to the workers
// they refuse: --advertise (advertise) when given; else, when
// --workers-listen (listen) names a host, that host with the bound port
// (127.0.0.1:0 → 127.0.0.1:PORT, m1.example.com:9090 as written, which
// is also the name a worker's TLS checks the certificate against); else
// (":9090", "0.0.0.0:9090") the bound address, which no worker can
// dial: workers then try their address list in order.
func workersAdvert(listen, advertise string, bound net.Addr) string {
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

// runReplica is serve as one replica of a replicated control plane: it
// serves the site, /healthz and the webhook for as long as it runs, and
// campaigns for the leadership; while it leads (a term) it runs the
// engine and the sync loop, and when its term ends (its election lease
// lost: paused, cut off from etcd) it stops them at once and campaigns
// again. Workers that connect while it follows are refused, pointed at
// the leader.
func (s *server) runReplica(ctx context.Context) error {
	name := s.o.replica
	rep, err := etcdstate.NewReplica(*s.g.etcd, name, s.o.leaseTTL)
	if err != nil {
		return err
	}
	defer rep.Close()
	s.rep = rep
	token := os.Getenv("CONVERGE_WORKER_TOKEN")
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}

	// The live site follows the store through etcd, led or not.
	ro, err := openEtcd(s.g.etcd, true, 0)
	if err != nil {
		return openStateErr(err)
	}
	defer ro.Close() // read only: a failed close loses nothing
	// A follower's site reads etcd a round trip a resource: on shutdown
	// its reads stop at once (stoppableReader) rather than finish an
	// update of thousands.
	siteCtx, stopReads := context.WithCancel(ctx)
	defer stopReads()
	s.live.attach(stoppableReader{Backend: ro, ctx: siteCtx})
	stopSite := goUntilStopped(ctx, s.live.run)
	defer stopSite()
	stopWatch := goUntilStopped(ctx, func(ctx context.Context) {
		ro.Watch(ctx, func(ids []converge.ID, all bool) {
			if all {
				s.live.rebuild()
				return
			}
			s.live.changed(ids)
		})
	})
	defer stopWatch()

	// health is the current term's, nil while following.
	var health atomic.Pointer[gitsync.Health]
	poke := func() {
		// Leader or not, a delivery goes through etcd: the leader (this
		// replica or another) watches for it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := rep.RequestSync(rctx); err != nil {
			s.log.Error("pass a webhook delivery on to the leader", "err", err)
		}
	}
	httpAddr, stopHTTP, err := s.startHTTP(poke, func() (int, string) {
		h := health.Load()
		if h == nil {
			return http.StatusOK, "ok: replica " + name + " follows"
		}
		if why := h.Check(time.Now()); why != "" {
			return http.StatusServiceUnavailable, why
		}
		return http.StatusOK, "ok: replica " + name + " leads"
	})
	if err != nil {
		return err
	}
	defer stopHTTP()
	s.ops.setNotReady("") // a follower serves the site and the webhook; a leader is ready once it evaluated

	var sw *connSwitch
	advert := etcdstate.Advert{HTTP: httpAddr}
	l, stopWorkersAddr, err := s.listenWorkers()
	if err != nil {
		return err
	}
	defer stopWorkersAddr()
	if l != nil {
		sw = newConnSwitch(l)
		defer sw.Close()
		advert.Workers = workersAdvert(s.o.workersListen, s.o.advertise, l.Addr())
		fmt.Fprintf(s.out, "serve: replica %s advertises workers address %s\n", name, advert.Workers)
	}
	s.announce()
	leader := func() providers.Leader {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		a, err := rep.Leader(lctx)
		if err != nil {
			return providers.Leader{}
		}
		return providers.Leader{Name: a.Name, Workers: a.Workers}
	}
	for {
		var follower *providers.Follower
		if sw != nil {
			follower = providers.NewFollower(providers.ServerOptions{Token: token, TLS: s.workersTLS, Logger: s.log}, leader)
			go follower.Serve(sw.attach())
		}
		if l := leader(); l.Name != "" {
			fmt.Fprintf(s.out, "serve: replica %s follows %s\n", name, l.Name)
		}
		term, err := rep.Campaign(ctx, advert)
		if follower != nil {
			follower.Close()
		}
		if ctx.Err() != nil {
			fmt.Fprintln(s.out, "serve: shutting down")
			return nil
		}
		if err != nil {
			fmt.Fprintf(s.out, "serve: replica %s: %v; campaigning again\n", name, err)
			if sleepCtx(ctx, time.Second) != nil {
				return nil
			}
			continue
		}
		h := &gitsync.Health{Stall: serveStall}
		health.Store(h)
		why, failed := s.lead(ctx, term, token, sw, h)
		health.Store(nil)
		if err := term.End(); err != nil {
			s.log.Warn("end term", "replica", name, "err", err)
		}
		if ctx.Err() != nil {
			fmt.Fprintln(s.out, "serve: shutting down")
			return nil
		}
		fmt.Fprintf(s.out, "serve: replica %s stepped down: %s; campaigning again\n", name, why)
		if failed && sleepCtx(ctx, time.Second) != nil {
			// A replica that cannot lead (its engine would not start)
			// leaves the others, already campaigning, ahead of it.
			fmt.Fprintln(s.out, "serve: shutting down")
			return nil
		}
	}
}

// lead runs one term: the engine (the store opened under the term, so
// every write is fenced on its election key) and the sync loop, until
// ctx is done or the term is lost. It returns why the term ended, and
// failed when this replica could not run it.
func (s *server) lead(ctx context.Context, term *etcdstate.Term, token string, sw *connSwitch, health *gitsync.Health) (why string, failed bool) {
	name := s.o.replica
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var lost atomic.Bool
	go func() {
		select {
		case <-term.Done():
			lost.Store(true)
			cancel() // stop the sync loop and the scheduler at once
		case <-tctx.Done():
		}
	}()
	since := term.Advert.Since.Format(time.RFC3339Nano)
	fmt.Fprintf(s.out, "serve: replica %s leads since %s (election lease %v)\n", name, since, term.TTL)
	st, err := term.Open(etcdstate.Options{})
	if err != nil {
		return fmt.Sprintf("open state: %v", err), true
	}
	// The takeover is an event of the state, before the scheduler loads
	// it (the store numbers it; the scheduler numbers on from it).
	ev := converge.Event{Time: time.Now().UTC(), Type: "Leader", Message: fmt.Sprintf("leader %s since %s", name, since)}
	if err := st.Commit(ctx, &converge.Batch{Events: []converge.Event{ev}}); err != nil {
		st.Close()
		return fmt.Sprintf("record the takeover: %v", err), true
	}
	o := s.engineOptions(token)
	o.store, o.etcd, o.listen, o.changed = st, nil, "", nil
	if sw != nil {
		o.workersListener = sw.attach()
	}
	e, err := startEngine(tctx, o)
	if err != nil {
		st.Close()
		return err.Error(), true
	}
	// Webhook deliveries to any replica reach the term as sync requests
	// (it fetches on start anyway).
	reqs := term.SyncRequests(tctx)
	s.ops.engine.Store(e)
	s.ops.setNotReady("leading: the first revision is not evaluated yet")
	s.follow(tctx, e, reqs, health)
	s.ops.engine.Store(nil)
	s.ops.setNotReady("")
	if lost.Load() {
		fmt.Fprintf(s.out, "serve: replica %s lost the leadership: stopping its engine\n", name)
	}
	if err := e.close(); err != nil && !(lost.Load() && errors.Is(err, etcdstate.ErrFenced)) {
		fmt.Fprintf(s.errOut, "converge: close engine: %v\n", err)
	}
	if !lost.Load() {
		return "shutting down", false
	}
	// Paused, or cut off: say which when etcd itself is the trouble.
	if err := s.rep.Health(time.Second); err != nil {
		return fmt.Sprintf("lost the election lease: %v", err), false
	}
	return fmt.Sprintf("lost the election lease (not renewed for %v: paused, or cut off from etcd)", term.TTL), false
}

// connSwitch hands the connections of one listener (a replica's
// --workers-listen, which outlives its terms) to whichever worker
// service is current: the leader's engine during a term, a follower's
// refusal otherwise. attach makes a new current one; a service stopping
// closes its listener, and connections arriving between two are closed.
type connSwitch struct {
	l    net.Listener
	mu   sync.Mutex // guards cur
	cur  *subListener
	done chan struct{}
}

func newConnSwitch(l net.Listener) *connSwitch {
	sw := &connSwitch{l: l, done: make(chan struct{})}
	go sw.accept()
	return sw
}

func (sw *connSwitch) accept() {
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
func (sw *connSwitch) attach() net.Listener {
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
func (sw *connSwitch) Close() {
	sw.l.Close()
	<-sw.done
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.cur != nil {
		sw.cur.Close()
	}
}

// subListener is one service's view of a connSwitch.
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
