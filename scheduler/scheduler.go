package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergehq/converge"
)

// ErrNotRunning is returned by Do when Run is not running: nobody would
// receive the verb's result.
var ErrNotRunning = errors.New("scheduler not running")

// ErrUndeclaredVerb is returned (wrapped, naming the kind's verbs) when Do
// asks for a verb the resource's kind does not declare.
var ErrUndeclaredVerb = errors.New("undeclared verb")

// Config tunes a Scheduler. The zero value is usable: every field has a
// default.
type Config struct {
	// Now is the clock (default time.Now).
	Now func() time.Time
	// FlushInterval is the group-commit period (default 5ms).
	FlushInterval time.Duration
	// MaxBatch flushes early when this many resources are pending
	// (default 2000).
	MaxBatch int
	// MaxCommit is the most resource rows one commit writes (default
	// 6144: at a million rows on 2 cores such a commit takes 0.5-1 s, a
	// batch of 8,192 up to 1.8 s); more wait for the next.
	MaxCommit int
	// LeaseTTL is the lease of a task whose kind sets no task_deadline
	// (default 30s).
	LeaseTTL time.Duration
	// ComposeLeaseTTL is the lease of a task of a composer kind that sets
	// no task_deadline (default: LeaseTTL when that is set, else 2m: a
	// million-child composition streams for tens of seconds on a busy
	// machine).
	ComposeLeaseTTL time.Duration
	// BackoffBase and BackoffMax bound the exponential backoff with full
	// jitter (defaults 200ms, 30s).
	BackoffBase, BackoffMax time.Duration
	// DefaultMaxInflight caps tasks per (kind, version) when the kind sets
	// no max_inflight (default 256).
	DefaultMaxInflight int
	// MaxEvents is how many events the store keeps (its retention): at
	// most this many wait to be written, the oldest dropped unwritten
	// past it, since the store would trim them as they arrived (a
	// million-child composition makes a million "Created" events). Zero
	// keeps every event until it is written.
	MaxEvents int
	// Rand is the jitter source (default: randomly seeded).
	Rand *mrand.Rand
	// Logger receives operational logs (default: discarded).
	Logger *slog.Logger
	// Validator checks composed children until Apply passes one; nil
	// accepts every child.
	Validator Validator
	// ResyncInterval is the default resync interval of the applied
	// revision, as last stored (converge.AppliedSource), for kinds that
	// set none; Apply replaces it. Zero arms no default resync until the
	// first Apply, which then re-arms every row.
	ResyncInterval time.Duration
	// PostponeLoadedResyncs arms each loaded row's resync one interval
	// from now instead of running the ones already due: for a process
	// that runs only until a revision converges (sync, delete, do),
	// where a million overdue resyncs would be dispatched and abandoned
	// at exit. A daemon leaves it false: a restart does not postpone a
	// due resync.
	PostponeLoadedResyncs bool
	// LocalFor, when set, makes the LocalComposer of the stored kinds
	// (nil if none composes in CUE): a CUE composer is then composed and
	// torn down before any Apply (delete, a restart). Apply's Validator
	// replaces it.
	LocalFor func(kinds []*converge.Kind) LocalComposer
	// Suspended are the roots suspended from the start ("" for every
	// resource): see Suspend.
	Suspended []converge.ID
}

func (c *Config) defaults() {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = 5 * time.Millisecond
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 2000
	}
	if c.MaxCommit <= 0 {
		c.MaxCommit = 6144
	}
	if c.ComposeLeaseTTL <= 0 {
		c.ComposeLeaseTTL = c.LeaseTTL
		if c.ComposeLeaseTTL <= 0 {
			c.ComposeLeaseTTL = 2 * time.Minute
		}
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 30 * time.Second
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = 200 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 30 * time.Second
	}
	if c.BackoffMax < c.BackoffBase {
		c.BackoffMax = c.BackoffBase
	}
	if c.DefaultMaxInflight <= 0 {
		c.DefaultMaxInflight = 256
	}
	if c.Rand == nil {
		var seed [16]byte
		_, _ = rand.Read(seed[:])
		c.Rand = mrand.New(mrand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Settled says whether `converge sync` can stop waiting.
type Settled int

const (
	// Working: something is running, scheduled or eligible.
	Working Settled = iota
	// Converged: every resource is Ready, nothing is Deleting, no
	// reactor delivery is owed, and all of it is durable: nothing waits
	// to be written or is being written. A verdict made on it is a
	// promise the store keeps (a root's rows may drain for minutes
	// after the graph is Ready in memory: a million rows on etcd).
	Converged
	// Stuck: nothing can progress without an outside change (a spec
	// change, a worker connecting): every non-Ready resource is
	// permanently failed, parked, or waiting on one that is.
	Stuck
)

func (s Settled) String() string {
	switch s {
	case Working:
		return "working"
	case Converged:
		return "converged"
	case Stuck:
		return "stuck"
	}
	return "settled(" + strconv.Itoa(int(s)) + ")"
}

// Progress is a point-in-time view of the engine for progress displays.
type Progress struct {
	// Counts tallies every resource by phase.
	Counts converge.Counts
	// Dispatched and Completed count tasks since New.
	Dispatched, Completed uint64
	// Rate is completed tasks per second over the last few seconds.
	Rate float64
	// Inflight is the number of tasks leased to workers now.
	Inflight int
	// Deliveries is the number of reactor deliveries still owed.
	Deliveries int
	// CommitError is why the newest commit of state failed, or "" once a
	// commit succeeds: while it is set, what the engine did is not yet
	// durable and the graph never counts as Converged.
	CommitError string
	// Refused counts resources the store refused to keep (they are
	// Failed, with the store's reason).
	Refused int
	// Held counts the resources a suspension holds back (Suspend): each
	// was due a dispatch that did not start.
	Held    int
	Settled Settled
}

// Problem is one resource that keeps the graph from Ready.
type Problem struct {
	ID     converge.ID
	Phase  converge.Phase
	Reason string
	// Permanent: it will not change without an outside change (permanent
	// failure, parked with no worker, teardown failed permanently).
	Permanent bool
	// Unserved is the kind version no connected worker serves, when that
	// is what it waits for (parked); zero otherwise.
	Unserved converge.KindRef
}

// maxProblems bounds Problems.
const maxProblems = 100

// Scheduler drives the resource graph. All mutable state is owned by the
// Run loop; the exported methods talk to it through a channel (or run
// directly while Run is not running).
type Scheduler struct {
	cfg   Config
	store Store
	// commitCtx is what every commit runs under: New's context without
	// its cancellation.
	commitCtx context.Context
	disp      Dispatcher
	log       *slog.Logger

	// runMu guards running and runDone.
	runMu   sync.Mutex
	running bool
	runDone chan struct{}
	cmds    chan command

	// progMu guards prog.
	progMu sync.Mutex
	prog   Progress

	// Everything below is owned by the Run loop (or by a command run
	// while Run is not running, under runMu).
	ctx       context.Context
	inline    bool // a command runs outside Run
	now       time.Time
	validator Validator
	settings  converge.Settings

	// The loop's parts (doc.go, "Parts"): each owns its state, and
	// its methods touch only that; the Scheduler's methods join them.
	graph resourceGraph // the resources, their edges and counts (graph.go)
	lease leases        // dispatch: queues, tasks, leases, timers (leases*.go, dispatch.go)
	batch batcher       // the pending writes and the commit (batch.go, flush.go)
	react reactors      // bindings and their deliveries (reactor.go)

	kinds    map[converge.KindRef]*converge.Kind
	retiring map[converge.KindRef]bool
	configs  map[string]*converge.ProviderConfig
	defaults map[converge.KindRef]*converge.ProviderConfig
	applied  *converge.Revision
	// secrets caches which kinds have secret fields and the provider
	// configs' secret values (secret.go); nil when kinds or configs
	// changed since.
	secrets *secretCache

	// local composes the kinds whose compose is CUE (from Apply's
	// Validator); their results come back on localRes.
	local    LocalComposer
	localRes chan *converge.Result
	// startQueue holds the loaded nodes a start looks at once (their
	// flows, their due work), all but the settled ones; pump takes them
	// in chunks after the queue, so the loop answers Apply and results
	// meanwhile.
	startQueue []*node
	// loading is what a load keeps between its steps (load.go).
	loading loading
	// rearmQueue holds the nodes whose resync a new default interval
	// re-arms, taken in chunks like startQueue.
	rearmQueue []*node

	uidBuf []byte

	// validatorP is the validator the checker goroutines of Run's
	// result stage use (s.validator, published); pre is the check of
	// the result the loop is handling.
	validatorP atomic.Pointer[validatorBox]
	pre        precheck

	rateSamples []rateSample
	// ops are the counters only Metrics reads.
	ops opStats

	// susp are the suspended roots (suspend.go).
	susp suspension
	// rollouts are the composers with a rollout in progress or halted
	// (rollout.go).
	rollouts map[converge.ID]*node
}

type rateSample struct {
	at        time.Time
	completed uint64
}

// New loads the store's snapshot under ctx and returns a scheduler ready
// to Run. Leases held by a previous process are treated as expired: their
// tasks are dispatched again. Every commit runs under ctx without its
// cancellation (the store bounds each write itself): the last flush,
// after Run's context is done, must not be cut short.
func New(ctx context.Context, store Store, disp Dispatcher, cfg Config) (*Scheduler, error) {
	cfg.defaults()
	sl, ok := store.(StreamLoader)
	if !ok {
		sl = wholeLoad{store}
	}
	for try := 0; ; try++ {
		s, err := newStreamed(ctx, store, sl, disp, cfg)
		if errors.Is(err, errLoadRestarted) && try < 3 {
			continue
		}
		return s, err
	}
}

// wholeLoad streams a store that loads only whole (Load; a test's
// wrapper): the rows are handed over, and let go, one at a time.
type wholeLoad struct{ Store }

func (w wholeLoad) LoadStream(ctx context.Context, begin func(*converge.Snapshot, int) error, each func(*converge.Resource) error) (*converge.Snapshot, error) {
	snap, err := w.Load(ctx)
	if err != nil {
		return nil, err
	}
	rows := snap.Resources
	snap.Resources = nil
	if err := begin(snap, len(rows)); err != nil {
		return nil, err
	}
	for i, r := range rows {
		rows[i] = nil // the scheduler's now: packed, it is garbage here
		if err := each(r); err != nil {
			return nil, err
		}
	}
	return snap, nil
}

// errLoadRestarted: a streamed load's read started again (newStreamed).
var errLoadRestarted = errors.New("the store's read started again")

// newStreamed is New over a store that streams its rows: each is packed
// as it arrives. A read the store starts again ends this one
// (errLoadRestarted), for New to start afresh.
func newStreamed(ctx context.Context, store Store, sl StreamLoader, disp Dispatcher, cfg Config) (*Scheduler, error) {
	var s *Scheduler
	snap, err := sl.LoadStream(ctx, func(snap *converge.Snapshot, rows int) error {
		if s != nil {
			return errLoadRestarted
		}
		s = newScheduler(ctx, store, disp, cfg, snap, rows)
		return nil
	}, func(r *converge.Resource) error {
		s.loadRow(r)
		return nil
	})
	if err != nil {
		return nil, err // the store says "load state: …"
	}
	s.loadEnd(snap)
	s.publish()
	return s, nil
}

// newScheduler returns a scheduler holding snap's kinds, configs and
// bindings, with room for rows resources, ready to load them (loadRow,
// then loadEnd).
func newScheduler(ctx context.Context, store Store, disp Dispatcher, cfg Config, snap *converge.Snapshot, rows int) *Scheduler {
	var pref [6]byte
	_, _ = rand.Read(pref[:])
	s := &Scheduler{
		cfg:       cfg,
		store:     store,
		disp:      disp,
		log:       cfg.Logger,
		cmds:      make(chan command),
		localRes:  make(chan *converge.Result, 64),
		ctx:       context.Background(),
		commitCtx: context.WithoutCancel(ctx),
		validator: cfg.Validator,
		graph: resourceGraph{
			nodes:     make(map[converge.ID]*node, rows),
			gitRoots:  make(map[converge.ID]*node),
			loose:     make(map[converge.ID]*adjacency),
			flowLists: make(map[string][]converge.ValueFlow),
		},
		lease: leases{
			refs:     make(map[converge.KindRef]*refState),
			serves:   make(map[servesKey]bool),
			tasks:    make(map[string]*taskRec),
			taskPref: hex.EncodeToString(pref[:]) + "-",
		},
		batch: batcher{
			delRes:     make(map[converge.ID]bool),
			edgePut:    make(map[edgeKey]*converge.Edge),
			edgeDel:    make(map[edgeKey]bool),
			delivDirty: make(map[string]*converge.Delivery),
			eventSeq:   snap.LastEventSeq,
			interval:   cfg.FlushInterval,
			maxEvents:  cfg.MaxEvents,
		},
		react: reactors{
			bindings:   make(map[string]*converge.Binding),
			byKind:     make(map[string][]*converge.Binding),
			deliveries: make(map[string]*converge.Delivery),
			fired:      make(map[firedKey]int64),
			delivLease: make(map[string]string),
		},
		rollouts: map[converge.ID]*node{},
		kinds:    make(map[converge.KindRef]*converge.Kind),
		retiring: make(map[converge.KindRef]bool),
		configs:  make(map[string]*converge.ProviderConfig),
		defaults: make(map[converge.KindRef]*converge.ProviderConfig),
		applied:  snap.Applied,
	}
	s.now = cfg.Now()
	s.settings.ResyncInterval = cfg.ResyncInterval
	s.ops.init()
	s.setValidator(cfg.Validator)
	s.susp.set(cfg.Suspended)
	if s.local == nil && cfg.LocalFor != nil {
		s.local = cfg.LocalFor(snap.Kinds)
	}
	s.loadBegin(snap)
	return s
}

// command is a closure run by the loop (or inline while Run is stopped).
type command func(s *Scheduler)

// exec runs c on the state owner and waits for it.
func (s *Scheduler) exec(ctx context.Context, c command) error {
	for {
		s.runMu.Lock()
		if !s.running {
			s.now = s.cfg.Now()
			s.inline = true
			c(s)
			s.inline = false
			s.publish()
			s.runMu.Unlock()
			return nil
		}
		done := s.runDone
		s.runMu.Unlock()
		ran := make(chan struct{})
		wrapped := func(s *Scheduler) {
			c(s)
			s.pump()
			s.publish()
			close(ran)
		}
		select {
		case s.cmds <- wrapped:
			select {
			case <-ran:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		case <-done:
			// Run stopped; run inline.
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Run is the single event loop: it dispatches eligible tasks, handles
// results, worker changes, timers and commands, and group-commits state.
// It runs until ctx is done, then commits everything pending and returns
// that final commit's error, or nil: a cancelled ctx is the normal way to
// stop it. A second concurrent Run returns an error at once.
func (s *Scheduler) Run(ctx context.Context) error {
	s.runMu.Lock()
	if s.running {
		s.runMu.Unlock()
		return errors.New("run scheduler: already running")
	}
	s.running = true
	s.runDone = make(chan struct{})
	s.ctx = ctx
	s.runMu.Unlock()
	defer func() {
		s.runMu.Lock()
		s.running = false
		s.ctx = context.Background()
		close(s.runDone)
		s.runMu.Unlock()
	}()

	s.batch.commitReq = make(chan *converge.Batch)
	s.batch.commitRes = make(chan error, 1)
	go func(req <-chan *converge.Batch, res chan<- error) {
		for b := range req {
			res <- s.store.Commit(s.commitCtx, b)
		}
	}(s.batch.commitReq, s.batch.commitRes)
	defer func() {
		close(s.batch.commitReq)
		s.batch.commitReq = nil
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	results := s.checkResults(ctx, s.disp.Results())
	changed := s.disp.Changed()
	s.now = s.cfg.Now()
	s.onChanged() // a fresh start: re-check every parked resource
	for {
		s.pump()
		if len(s.batch.dirty)+len(s.batch.updated) >= s.cfg.MaxBatch {
			s.flushAsync()
		}
		s.publish()
		wake := s.nextWake()
		if len(s.startQueue) > 0 || len(s.rearmQueue) > 0 {
			wake = s.now // the next chunk, after a look around
		}
		if !wake.IsZero() {
			d := wake.Sub(s.cfg.Now())
			if d < 0 {
				d = 0
			}
			timer.Reset(d)
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			s.now = s.cfg.Now()
			err := s.flush()
			s.publish()
			return err
		case r, ok := <-results:
			if !ok {
				results = nil // the dispatcher shut down
				continue
			}
			s.now = s.cfg.Now()
			s.onChecked(r)
		drain:
			for i := 0; i < 4096; i++ {
				select {
				case r, ok = <-results:
					if !ok {
						results = nil
						break drain
					}
					s.onChecked(r)
				default:
					break drain
				}
			}
		case r := <-s.localRes:
			s.now = s.cfg.Now()
			s.onChecked(precheck{res: r})
		case _, ok := <-changed:
			if !ok {
				changed = nil
				continue
			}
			s.now = s.cfg.Now()
			s.onChanged()
		case c := <-s.cmds:
			s.now = s.cfg.Now()
			c(s)
		case err := <-s.batch.commitRes:
			s.now = s.cfg.Now()
			s.commitEnded(err)
		case <-timer.C:
			s.now = s.cfg.Now()
			s.fireTimers()
		}
	}
}

// checkResults is Run's result stage: GOMAXPROCS goroutines check each
// result's status (checkStatus, off the loop) and pass it on, until ctx
// is done or in closes (then the returned channel closes). Results of
// different tasks may pass each other; each task has one result.
func (s *Scheduler) checkResults(ctx context.Context, in <-chan *converge.Result) <-chan precheck {
	out := make(chan precheck, 1024)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case r, ok := <-in:
					if !ok {
						return
					}
					select {
					case out <- s.precheckResult(r):
					case <-ctx.Done():
						return
					}
				}
			}
		}()
	}
	go func() { wg.Wait(); close(out) }()
	return out
}

// onChecked handles one result of the result stage.
func (s *Scheduler) onChecked(p precheck) {
	s.pre = p
	s.onResult(p.res)
	s.pre = precheck{}
}

func (s *Scheduler) nextWake() time.Time {
	var w time.Time
	if len(s.lease.timers) > 0 {
		w = s.lease.timers[0].at
	}
	if r := s.lease.nextResync(); !r.IsZero() && (w.IsZero() || r.Before(w)) {
		w = r
	}
	if !s.batch.flushAt.IsZero() && !s.batch.committing && (w.IsZero() || s.batch.flushAt.Before(w)) {
		w = s.batch.flushAt
	}
	return w
}

// Flush commits everything pending now.
func (s *Scheduler) Flush(ctx context.Context) error {
	var err error
	if e := s.exec(ctx, func(s *Scheduler) { err = s.flush() }); e != nil {
		return e
	}
	return err
}

// Progress returns the newest published progress; safe from any
// goroutine.
func (s *Scheduler) Progress() Progress {
	s.progMu.Lock()
	defer s.progMu.Unlock()
	return s.prog
}

// Problems lists what keeps the graph from Ready, most severe first, at
// most 100 entries.
func (s *Scheduler) Problems() []Problem {
	var out []Problem
	_ = s.exec(context.Background(), func(s *Scheduler) { out = s.problems() })
	return out
}

// Delete marks the teardown tree of id (id, everything it owns and
// everything depending on any of those) and starts tearing it down in
// reverse dependency order. It returns converge.ErrNotFound (wrapped) if
// id does not exist. When id is composed and its owner is not torn down
// with it, the owner recomposes as soon as the teardown is done (a new
// generation): a child it still emits comes back at once, with a new uid.
func (s *Scheduler) Delete(ctx context.Context, id converge.ID) error {
	var err error
	e := s.exec(ctx, func(s *Scheduler) {
		n := s.graph.nodes[id]
		if n == nil {
			err = fmt.Errorf("delete %s: %w", id, converge.ErrNotFound)
			return
		}
		for _, m := range s.cascade([]*node{n}, "deleted by operator") {
			if o := m.owner; o != nil && !o.deleting() {
				m.set(mRecomposeOwner)
				s.forgetComposition(o)
			}
		}
		err = s.flush()
	})
	if e != nil {
		return e
	}
	return err
}

// Do runs the operator verb on id's worker with args and waits for its
// result. The outcome is recorded as an event. It refuses a verb the
// kind does not declare (ErrUndeclaredVerb) and returns ErrNoWorker
// (wrapped) when no worker serves it.
func (s *Scheduler) Do(ctx context.Context, id converge.ID, verb string, args map[string]string) (*converge.Result, error) {
	var ch chan verbOutcome
	var err error
	e := s.exec(ctx, func(s *Scheduler) {
		if s.inline {
			err = ErrNotRunning
			return
		}
		ch, err = s.startVerb(id, verb, args)
	})
	if e != nil {
		return nil, e
	}
	if err != nil {
		return nil, err
	}
	select {
	case o := <-ch:
		return o.res, o.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// publish copies the loop's counters into the shared Progress.
func (s *Scheduler) publish() {
	p := Progress{
		Counts:      s.graph.counts,
		Dispatched:  s.lease.dispatched,
		Completed:   s.lease.completed,
		Inflight:    s.lease.inflight,
		Deliveries:  s.react.owedDeliv,
		CommitError: s.batch.commitErr,
		Refused:     s.batch.refused,
		Held:        len(s.susp.held),
	}
	// rate over a sliding window of about 5s
	if n := len(s.rateSamples); n == 0 || s.now.Sub(s.rateSamples[n-1].at) >= 250*time.Millisecond {
		s.rateSamples = append(s.rateSamples, rateSample{s.now, s.lease.completed})
		for len(s.rateSamples) > 2 && s.now.Sub(s.rateSamples[0].at) > 5*time.Second {
			s.rateSamples = s.rateSamples[1:]
		}
	}
	if first := s.rateSamples[0]; s.now.After(first.at) {
		p.Rate = float64(s.lease.completed-first.completed) / s.now.Sub(first.at).Seconds()
	}
	switch {
	case s.graph.counts.Total == s.graph.counts.Ready && s.react.owedDeliv == 0 && s.batch.commitErr == "" && len(s.startQueue) == 0:
		p.Settled = Converged
		if !s.batch.durable() {
			p.Settled = Working // Ready in memory; the store catches up
		}
	case s.lease.inflight == 0 && s.lease.backoffN == 0 && s.lease.queueHead == len(s.lease.queue) && len(s.startQueue) == 0 &&
		len(s.react.delivLease) == 0 && !s.lease.waitingForSlot() && !s.react.delivWorkPending(s.batch.commitErr != "") && !s.rolloutsWaiting():
		p.Settled = Stuck
	default:
		p.Settled = Working
	}
	s.progMu.Lock()
	s.prog = p
	s.progMu.Unlock()
}

// newUID returns 16 random bytes in hex.
func (s *Scheduler) newUID() string {
	if len(s.uidBuf) < 16 {
		s.uidBuf = make([]byte, 16*256)
		if _, err := rand.Read(s.uidBuf); err != nil {
			panic("crypto/rand: " + err.Error())
		}
	}
	u := hex.EncodeToString(s.uidBuf[:16])
	s.uidBuf = s.uidBuf[16:]
	return u
}

// backoff returns the delay before attempt number attempts+1.
func (s *Scheduler) backoff(attempts int) time.Duration {
	d := s.cfg.BackoffBase
	for i := 1; i < attempts && d < s.cfg.BackoffMax; i++ {
		d *= 2
	}
	if d > s.cfg.BackoffMax {
		d = s.cfg.BackoffMax
	}
	j := time.Duration(s.cfg.Rand.Int64N(int64(d) + 1))
	if j < time.Millisecond {
		j = time.Millisecond
	}
	return j
}

// fmtDelay renders a retry delay: "1.2s", "350ms".
func fmtDelay(d time.Duration) string {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

func (s *Scheduler) event(id converge.ID, typ, msg string) {
	if !ownWords[typ] {
		msg = s.scrubMessage(id, "", msg)
	}
	s.batch.addEvent(s.now, id, typ, msg)
}
