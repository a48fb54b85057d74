package etcdstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// ErrNoLeader is returned by Leader when no replica leads the prefix.
var ErrNoLeader = errors.New("no leader")

// Election keys under the prefix (doc.go, "Replicas and the leader").
const (
	kElection    = "election"  // the election's keys are election/LEASE
	kSyncRequest = "sync"      // a follower's request that the leader fetch now
	minTermTTL   = time.Second // etcd leases count whole seconds
)

// Advert is what a leader publishes as its election value: who it is,
// since when, and where it serves workers and HTTP (for followers to
// point workers and people at).
type Advert struct {
	// Name is the replica's name (serve --replica NAME).
	Name string `json:"name"`
	// Since is when it won the election.
	Since time.Time `json:"since"`
	// Workers is the address it serves workers on (--workers-listen),
	// "" for none.
	Workers string `json:"workers,omitempty"`
	// HTTP is its site and webhook address (--listen), "" for none.
	HTTP string `json:"http,omitempty"`
	// Host and PID locate the leader's process (Campaign fills them).
	Host string `json:"host,omitempty"`
	PID  int    `json:"pid,omitempty"`
}

// Replica is one converge control-plane replica's seat in the election
// of a prefix: it campaigns (Campaign) for a Term during which it alone
// writes the store, and it asks the leader for a sync (RequestSync). It
// is safe for concurrent use.
type Replica struct {
	cli    *clientv3.Client
	ownCli bool
	// sessCli carries the election session (its lease's keepalives and
	// the election's requests) on a connection of its own, so a big
	// commit's megabytes in flight on cli never queue ahead of a
	// renewal (doc.go, "Replicas and the leader"). It is cli when the
	// caller gave the client (Options.Client).
	sessCli *clientv3.Client
	opts    Options
	name    string
	ttl     time.Duration
	// lapsed is the lease of a term lost while etcd could not be told
	// (it had no quorum, or could not be reached): once etcd answers
	// again it may hold that lease, and the lost term's election key
	// with it, for a whole TTL (a new etcd leader renews every lease),
	// naming a leader that is not one and holding the next back. The
	// next Campaign revokes it first. 0 for none.
	lapsedMu sync.Mutex
	lapsed   clientv3.LeaseID
	// registered: this replica wrote its replica/NAME key (register),
	// once a process, not at every campaign.
	registered bool
}

// NewReplica connects to the cluster o names (o.Client, or o.Endpoints)
// as the replica name, whose election sessions live ttl (rounded up to
// whole seconds, at least 1s) after the replica last renewed them: a
// leader that dies is replaced about ttl later.
func NewReplica(o Options, name string, ttl time.Duration) (*Replica, error) {
	if err := fill(&o); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	if name == "" || strings.ContainsAny(name, "/\x00") {
		return nil, fmt.Errorf("replica name %q: want a non-empty name without / or NUL", name)
	}
	if ttl < minTermTTL {
		return nil, fmt.Errorf("replica %s: lease TTL %v: want at least %v", name, ttl, minTermTTL)
	}
	r := &Replica{opts: o, name: name, ttl: ttl, cli: o.Client, sessCli: o.Client}
	if r.cli != nil {
		return r, nil
	}
	for _, c := range []**clientv3.Client{&r.cli, &r.sessCli} {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: o.Endpoints, TLS: o.TLS, Username: o.Username, Password: o.Password,
			DialTimeout: o.DialTimeout, Logger: zap.NewNop(),
		})
		if err != nil {
			r.ownCli = true
			r.Close()
			return nil, fmt.Errorf("replica %s: connect %s: %w", name, strings.Join(o.Endpoints, ","), noAnswer(err))
		}
		*c = cli
	}
	r.ownCli = true
	return r, nil
}

// Name returns the replica's name.
func (r *Replica) Name() string { return r.name }

// Close closes the client if NewReplica dialed it. End every Term first.
func (r *Replica) Close() error {
	if !r.ownCli {
		return nil
	}
	var errs []error
	for _, c := range []**clientv3.Client{&r.cli, &r.sessCli} {
		if *c != nil {
			errs = append(errs, (*c).Close())
			*c = nil
		}
	}
	return errors.Join(errs...)
}

// Term is one replica's leadership: it lasts until its session's lease
// is lost (Done) or End. Every write of the store Open returns is
// conditioned on the term's election key, so once another replica has
// won, a store of an ended term (a leader paused past its lease and
// resumed, or cut off from the cluster) cannot commit: ErrFenced.
type Term struct {
	r        *Replica
	session  *concurrency.Session
	election *concurrency.Election
	// Advert is what the leader published, Since set.
	Advert Advert
	// Rev is the etcd revision at which the term began.
	Rev int64
	// TTL is the session lease's time to live as etcd granted it: at
	// least the replica's, more if the cluster's minimum is higher (etcd
	// raises a TTL under 1.5 election timeouts).
	TTL time.Duration
	// ctx is done when the session is lost or the term ends: its store's
	// writes stop then.
	ctx    context.Context
	cancel context.CancelFunc
}

// Campaign waits until this replica leads the prefix, or ctx is done
// (then it returns ctx's error and leaves no candidacy behind). a is
// published as the election value with Name and Since filled in.
func (r *Replica) Campaign(ctx context.Context, a Advert) (*Term, error) {
	// The lease of a term lost while etcd could not be told goes first,
	// as soon as etcd answers (every 100ms meanwhile: a quorum that
	// comes back names that term's replica until it goes).
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		err := r.revokeLapsed(rctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := r.register(ctx); err != nil {
		return nil, fmt.Errorf("campaign: %w", err)
	}
	s, err := concurrency.NewSession(r.sessCli, concurrency.WithTTL(int((r.ttl+time.Second-1)/time.Second)))
	if err != nil {
		return nil, fmt.Errorf("campaign: start session: %w", noAnswer(err))
	}
	// A session lost while waiting ends the campaign: Campaign alone
	// would go on waiting, and then win with a key the lease took away.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.Done():
			cancel()
		case <-cctx.Done():
		}
	}()
	e := concurrency.NewElection(s, r.opts.Prefix+kElection)
	a.Name = r.name
	a.Since = time.Time{}
	a.Host, _ = os.Hostname()
	a.PID = os.Getpid()
	v, _ := json.Marshal(a) // an Advert always encodes
	campaign := make(chan error, 1)
	go func() { campaign <- e.Campaign(cctx, string(v)) }()
	select {
	case err := <-campaign:
		if err != nil {
			s.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("campaign: %w", err)
		}
	case <-ctx.Done():
		// A cancelled Campaign withdraws its key with the client's own
		// context, which waits as long as etcd does not answer: wait for
		// that a little (so a reader of the election finds no candidacy
		// left behind), then leave it to finish (Close ends it) rather
		// than hold up a shutdown.
		cancel()
		withdrawn := make(chan struct{})
		go func() {
			defer close(withdrawn)
			if err := <-campaign; err == nil {
				e.Resign(context.Background())
			}
			s.Close()
		}()
		select {
		case <-withdrawn:
		case <-time.After(2 * time.Second):
		}
		return nil, ctx.Err()
	}
	a.Since = time.Now().UTC()
	v, _ = json.Marshal(a)
	// Proclaim is conditioned on our key: it fails if the lease is gone.
	if err := e.Proclaim(cctx, string(v)); err != nil {
		s.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("campaign: publish leadership: %w", err)
	}
	term := &Term{r: r, session: s, election: e, Advert: a, Rev: e.Header().Revision, TTL: r.ttl}
	term.ctx, term.cancel = context.WithCancel(context.Background())
	go func() {
		select {
		case <-s.Done():
		case <-term.ctx.Done():
		}
		term.cancel()
	}()
	if ttl, err := r.sessCli.TimeToLive(cctx, s.Lease()); err == nil && ttl.GrantedTTL > 0 {
		term.TTL = time.Duration(ttl.GrantedTTL) * time.Second
	}
	return term, nil
}

// Done is closed when the term is lost: its session's lease expired or
// could not be renewed for its TTL, or a write of its store found its
// fence gone (another replica leads); and once it ends (End). The
// replica must stop writing at once (its writes are refused anyway) and
// campaign again.
func (t *Term) Done() <-chan struct{} { return t.ctx.Done() }

// Open opens the store as the term's writer: its lock is taken under
// the term's lease (waiting up to twice the TTL for a writer outside the
// election, e.g. a `converge sync`, to finish), and every write is
// fenced on the term's election key as well as on the lock. o's
// connection fields are ignored: the replica's client is used.
func (t *Term) Open(o Options) (*Store, error) {
	o.Client, o.Endpoints = t.r.cli, nil
	o.Prefix = t.r.opts.Prefix
	o.ReadOnly = false
	o.termLease = t.session.Lease()
	o.termCtx, o.termLost = t.ctx, t.cancel
	if o.LockTimeout <= 0 {
		o.LockTimeout = 2 * t.r.ttl
	}
	key, rev := t.election.Key(), t.election.Rev()
	user := o.Fence
	o.Fence = func() []clientv3.Cmp {
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", rev)}
		if user != nil {
			cmps = append(cmps, user()...)
		}
		return cmps
	}
	return Open(o)
}

// End resigns the leadership (if the session is still alive) and ends
// the session, releasing its lease: another replica can win at once.
// Close the term's store first.
func (t *Term) End() error {
	defer t.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lost := t.session.Done()
	if t.ctx.Err() != nil {
		lost = t.ctx.Done() // fenced: another replica leads
	}
	select {
	case <-lost:
		// Lost: etcd has expired the lease, or will once it can (it
		// may renew it first: a quorum that comes back renews every
		// lease). Revoke it now if etcd answers at once, else at the
		// next Campaign.
		t.session.Orphan() // stop renewing a lease that leads nothing
		t.r.setLapsed(t.session.Lease())
		lctx, lcancel := context.WithTimeout(context.Background(), time.Second)
		defer lcancel()
		t.r.revokeLapsed(lctx)
		return nil
	default:
	}
	var errs []error
	if err := t.election.Resign(ctx); err != nil {
		errs = append(errs, fmt.Errorf("resign: %w", err))
	}
	if err := t.session.Close(); err != nil && !strings.Contains(err.Error(), "lease not found") {
		errs = append(errs, fmt.Errorf("end session: %w", err))
	}
	return errors.Join(errs...)
}

// setLapsed records the lease of a lost term, for revokeLapsed.
func (r *Replica) setLapsed(id clientv3.LeaseID) {
	r.lapsedMu.Lock()
	defer r.lapsedMu.Unlock()
	r.lapsed = id
}

// revokeLapsed revokes the lease of the term lost before, if any: its
// election key goes with it. A lease etcd no longer has is done with.
func (r *Replica) revokeLapsed(ctx context.Context) error {
	r.lapsedMu.Lock()
	defer r.lapsedMu.Unlock()
	if r.lapsed == 0 {
		return nil
	}
	_, err := r.cli.Revoke(clientv3.WithRequireLeader(ctx), r.lapsed)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return err
	}
	r.lapsed = 0
	return nil
}

// SyncRequests returns a channel that receives (coalesced) every
// RequestSync made after the term began, until ctx is done.
func (t *Term) SyncRequests(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	wc := follow(ctx, t.r.cli, t.r.opts.Prefix+kSyncRequest, t.Rev+1)
	go func() {
		for resp := range wc {
			if len(resp.Events) == 0 {
				continue
			}
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out
}

// RequestSync asks the leader to fetch and sync now (a webhook delivery
// a follower received): it writes the sync request key, which the
// leader's term watches (SyncRequests).
func (r *Replica) RequestSync(ctx context.Context) error {
	v := r.name + " " + time.Now().UTC().Format(time.RFC3339Nano)
	if _, err := r.cli.Put(ctx, r.opts.Prefix+kSyncRequest, v); err != nil {
		return fmt.Errorf("request sync: %w", err)
	}
	return nil
}

// Leader returns the current leader's advert, or ErrNoLeader.
func (r *Replica) Leader(ctx context.Context) (Advert, error) {
	return leader(ctx, r.cli, r.opts.Prefix)
}

// Leader connects to the cluster o names and returns the advert of the
// prefix's current leader, or ErrNoLeader when no replica leads it.
func Leader(o Options) (Advert, error) {
	if err := fill(&o); err != nil {
		return Advert{}, fmt.Errorf("leader: %w", err)
	}
	cli := o.Client
	if cli == nil {
		var err error
		cli, err = clientv3.New(clientv3.Config{
			Endpoints: o.Endpoints, TLS: o.TLS, Username: o.Username, Password: o.Password,
			DialTimeout: o.DialTimeout, Logger: zap.NewNop(),
		})
		if err != nil {
			return Advert{}, fmt.Errorf("leader: connect %s: %w", strings.Join(o.Endpoints, ","), noAnswer(err))
		}
		defer cli.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.DialTimeout)
	defer cancel()
	a, err := leader(ctx, cli, o.Prefix)
	if err != nil && !errors.Is(err, ErrNoLeader) && ctx.Err() != nil {
		err = noAnswer(err)
	}
	return a, err
}

// leader reads the election's oldest key: the leader's (as
// concurrency.Election.Leader does, without a session).
func leader(ctx context.Context, cli *clientv3.Client, prefix string) (Advert, error) {
	// WithRequireLeader: a member cut off from its quorum answers at
	// once that it has none, instead of leaving the read to time out.
	resp, err := cli.Get(clientv3.WithRequireLeader(ctx), prefix+kElection+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		if errors.Is(err, rpctypes.ErrNoLeader) {
			return Advert{}, fmt.Errorf("read leader: etcd has lost its quorum: %w", err)
		}
		return Advert{}, fmt.Errorf("read leader: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return Advert{}, ErrNoLeader
	}
	// The read is linearizable and requires etcd's leader: a key it
	// returns has a live lease (etcd deletes a lease's keys in the same
	// step that ends it). A lost term's lease that a returning quorum
	// renewed is live too: its replica revokes it (Term.End, Campaign).
	kv := resp.Kvs[0]
	var a Advert
	if err := json.Unmarshal(kv.Value, &a); err != nil {
		return Advert{}, fmt.Errorf("read leader: %s: %w", kv.Key, err)
	}
	return a, nil
}

// Health reports whether the cluster answers with a leader of its own
// within timeout: nil, or an error saying it is unreachable or has no
// quorum (why a term was lost, when it was not a pause).
func (r *Replica) Health(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := r.cli.Get(clientv3.WithRequireLeader(ctx), r.opts.Prefix+kSyncRequest, clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("etcd (%s) is unreachable or has lost its quorum: %w", strings.Join(r.cli.Endpoints(), ","), err)
	}
	return nil
}
