package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/ops"
	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/sync/controlplane"
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
	if o.workersListen != "" && os.Getenv("CONVERGE_WORKER_TOKEN") == "" && o.tokenFile == "" {
		return usageErr("--replica with --workers-listen needs $CONVERGE_WORKER_TOKEN (or --workers-token-file), the same on every replica: workers follow the leader from one replica to another")
	}
	return nil
}

// replicaEtcdHook, when set, may give a replica's etcd options a
// client of its own (Options.Client) before the replica connects, and
// returns what closes it. Only tests set it (history_hooks_test.go: the
// test binary is the converge its replica processes run), to record
// every write a replica sends to etcd; it is nil in converge itself.
var replicaEtcdHook func(o *etcdstate.Options, replica string) (close func(), err error)

// runReplica is serve as one replica of a replicated control plane: it
// serves the site, /healthz and the webhook for as long as it runs, and
// campaigns for the leadership; while it leads (a term) it runs the
// engine and the sync loop, and when its term ends (its election lease
// lost: paused, cut off from etcd) it stops them at once and campaigns
// again. Workers that connect while it follows are refused, pointed at
// the leader.
func (s *server) runReplica(ctx context.Context) error {
	name := s.o.replica
	eo := *s.g.etcd
	if replicaEtcdHook != nil {
		closeHook, err := replicaEtcdHook(&eo, name)
		if err != nil {
			return err
		}
		defer closeHook()
	}
	rep, err := etcdstate.NewReplica(eo, name, s.o.leaseTTL)
	if err != nil {
		return err
	}
	defer rep.Close()
	token := os.Getenv("CONVERGE_WORKER_TOKEN")
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}

	// The live site follows the store through etcd, led or not.
	ro, err := controlplane.OpenEtcd(s.g.etcd, true, 0)
	if err != nil {
		return controlplane.OpenError(err)
	}
	defer ro.Close() // read only: a failed close loses nothing
	// A follower's site reads etcd a round trip a resource: its reads
	// take Run's context, so on shutdown they stop at once rather than
	// finish an update of thousands.
	s.live.Attach(ro)
	stopSite := goUntilStopped(ctx, s.live.Run)
	defer stopSite()
	stopWatch := goUntilStopped(ctx, func(ctx context.Context) {
		ro.Watch(ctx, func(ids []converge.ID, all bool) {
			if all {
				s.live.Rebuild()
				return
			}
			s.live.Changed(ids)
		})
	})
	defer stopWatch()

	terms := controlplane.NewTerms(rep, serveStall)
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
		h := terms.Health()
		if h == nil {
			return ops.FollowerHealth(rep)
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
	s.ops.SetNotReady("") // a follower serves the site and the webhook; a leader is ready once it evaluated

	var sw *controlplane.ConnSwitch
	advert := etcdstate.Advert{HTTP: httpAddr}
	l, stopWorkersAddr, err := s.listenWorkers()
	if err != nil {
		return err
	}
	defer stopWorkersAddr()
	if l != nil {
		sw = controlplane.NewConnSwitch(l)
		defer sw.Close()
		advert.Workers = controlplane.WorkersAdvert(s.o.workersListen, s.o.advertise, l.Addr())
		fmt.Fprintf(s.out, "serve: replica %s advertises workers address %s\n", name, advert.Workers)
	}
	s.announce()
	var tokens func() []string
	if s.tokens != nil {
		tokens = s.tokens.Tokens
	}
	terms.Run(ctx, controlplane.TermOptions{Advert: advert, Workers: sw, Token: token, Tokens: tokens, TLS: s.workersTLS, Log: s.log,
		Engine: s.engineOptions(token), Work: s.follow, Events: replicaEvents{s}})
	return nil
}

// replicaEvents says what a replica's terms do on serve's output, and
// which engine its readiness, metrics and the site's actions read.
type replicaEvents struct{ s *server }

func (v replicaEvents) Follows(leader string) {
	fmt.Fprintf(v.s.out, "serve: replica %s follows %s\n", v.s.o.replica, leader)
}

func (v replicaEvents) CampaignFailed(err error) {
	fmt.Fprintf(v.s.out, "serve: replica %s: %v; campaigning again\n", v.s.o.replica, err)
}

func (v replicaEvents) Leads(term *etcdstate.Term) {
	fmt.Fprintf(v.s.out, "serve: replica %s leads since %s (election lease %v)\n", v.s.o.replica, term.Advert.Since.Format(time.RFC3339Nano), term.TTL)
}

func (v replicaEvents) Leading(e *controlplane.Engine) {
	v.s.ops.SetEngine(e)
	if e != nil {
		v.s.ops.SetNotReady("leading: the first revision is not evaluated yet")
	} else {
		v.s.ops.SetNotReady("")
	}
}

func (v replicaEvents) Lost() {
	fmt.Fprintf(v.s.out, "serve: replica %s lost the leadership: stopping its engine\n", v.s.o.replica)
}

func (v replicaEvents) CloseFailed(err error) {
	fmt.Fprintf(v.s.errOut, "converge: close engine: %v\n", err)
}

func (v replicaEvents) SteppedDown(why string) {
	fmt.Fprintf(v.s.out, "serve: replica %s stepped down: %s; campaigning again\n", v.s.o.replica, why)
}

func (v replicaEvents) ShuttingDown() { fmt.Fprintln(v.s.out, "serve: shutting down") }
