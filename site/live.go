package site

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	gosync "sync"
	"time"

	"github.com/convergehq/converge"
)

// Live keeps a site current while the store changes (serve's site in
// its state directory): one full build at start, then incremental
// updates of what changed (Changed), at most every interval.
type Live struct {
	b        *Builder
	dir      string
	opts     Options
	interval time.Duration
	log      io.Writer

	mu      gosync.Mutex // guards pending and all
	pending map[converge.ID]bool
	all     bool // rebuild the whole site (rebuild)
	kick    chan struct{}
	// updating serializes update: one drains pending and applies it at a
	// time, so when update returns every change recorded before the call
	// is on the site.
	updating gosync.Mutex
	// chunk is the most resources one Builder.Update is given (see
	// Update); updated, if set, hears of each (tests).
	chunk   int
	updated func(*Stats)
}

// liveChunk bounds one incremental update of the live site. An update
// writes its pages (each resource's shard page, a file each) before
// summary.json, which open pages poll to refetch themselves: 18,000
// resources changed at once meant about 20,000 files and 5 to 9 s in
// which nothing on an open page moved but the counts of the last
// summary. Updates of at most liveChunk resources each end with their
// own summary.json, so the root's page and the rest follow every second
// or so. (Update takes its ids in any order: a root may come in a later
// chunk than its children.)
const liveChunk = 2000

// LiveOptions configure a Live site.
type LiveOptions struct {
	// Site are the pages' options (Title, Now…).
	Site Options
	// Log hears what fails (a build, an update); nil discards it.
	Log io.Writer
	// Chunk is the most resources one update is given before it writes
	// its summary.json (0: 2,000; see Update).
	Chunk int
}

// NewLive returns a live site writing into dir; it starts collecting
// changes at once, and builds once Attach gives it the store.
func NewLive(dir string, o LiveOptions) *Live {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Chunk <= 0 {
		o.Chunk = liveChunk
	}
	return &Live{
		dir:      dir,
		opts:     o.Site,
		interval: 250 * time.Millisecond,
		log:      o.Log,
		pending:  map[converge.ID]bool{},
		kick:     make(chan struct{}, 1),
		chunk:    o.Chunk,
	}
}

// Dir is the directory the site is written to (Handler serves it).
func (s *Live) Dir() string { return s.dir }

// Attach gives the site its store; call it before Run.
func (s *Live) Attach(st Reader) {
	s.b = NewBuilder(st, s.dir, s.opts)
}

// Changed records ids for the next update; it never blocks.
func (s *Live) Changed(ids []converge.ID) {
	s.mu.Lock()
	for _, id := range ids {
		s.pending[id] = true
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Rebuild makes the next update a whole build: for a reader that may
// have missed changes (a broken watch).
func (s *Live) Rebuild() {
	s.mu.Lock()
	s.all = true
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Pacing: an update reads every changed resource back from the store
// (over the network, on etcd) and rewrites its pages, and during a big
// converge every replica's site did so for every row, again each time
// the row changed: at a million resources on etcd the two followers'
// sites took a third of the machine's two cores, and the reads loaded
// etcd further. So after an update that took d the next waits busyFactor
// × d (at least the interval, at most maxPace): updating takes at most
// about a fifth of the site's time, and a row changed several times
// meanwhile is read once. (Rows read once anyway, as in a converge from
// empty, cost the same either way: the followers' sites still took about
// a fifth of a core each at 1M.) A quiet store's site still follows
// within the interval.
const (
	busyFactor = 4
	maxPace    = 30 * time.Second
)

// pace is how long Run waits, after an update that took took, before
// the next.
func (s *Live) pace(took time.Duration) time.Duration {
	return max(s.interval, min(maxPace, busyFactor*took))
}

// Run builds the site, then updates it until ctx ends, paced (see
// busyFactor).
func (s *Live) Run(ctx context.Context) {
	if _, err := s.b.Build(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintf(s.log, "site: build: %v\n", err)
	}
	var next time.Time // the earliest the next update may start
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		}
		wait := max(s.interval, time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		start := time.Now()
		s.Update(ctx)
		end := time.Now()
		next = end.Add(s.pace(end.Sub(start)))
	}
}

// Update applies every change recorded so far to the site; when it
// returns, every change recorded before the call is on the site. The ids
// come out of a map, in any order: a root and the children its compose
// committed can reach Builder.Update in the same call, either first.
func (s *Live) Update(ctx context.Context) {
	s.updating.Lock()
	defer s.updating.Unlock()
	s.mu.Lock()
	ids := make([]converge.ID, 0, len(s.pending))
	for id := range s.pending {
		ids = append(ids, id)
	}
	clear(s.pending)
	all := s.all
	s.all = false
	s.mu.Unlock()
	if all {
		if _, err := s.b.Build(ctx); err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintf(s.log, "site: build: %v\n", err)
		}
		return
	}
	slices.Sort(ids) // chunks of neighbours: fewer shard and list pages each
	// At least one Update: with no ids it still takes new events and
	// revisions (the index's verdicts).
	for first := true; first || len(ids) > 0; first = false {
		n := min(len(ids), max(s.chunk, 1))
		st, err := s.b.Update(ctx, ids[:n])
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				fmt.Fprintf(s.log, "site: update: %v\n", err)
			}
			return
		}
		if s.updated != nil {
			s.updated(st)
		}
		ids = ids[n:]
	}
}
