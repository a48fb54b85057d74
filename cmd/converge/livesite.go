package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	gosync "sync"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/site"
	"github.com/convergehq/converge/state"
)

// liveSite keeps the static site in the state directory current: one full
// build at start, then incremental updates of what changed, at most every
// interval.
type liveSite struct {
	b        *site.Builder
	dir      string
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
	// chunk is the most resources one site.Builder.Update is given (see
	// update); updated, if set, hears of each (tests).
	chunk   int
	updated func(*site.Stats)
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

// newLiveSite returns a live site writing into dir; it starts collecting
// changes at once, and builds once attach gives it the store.
func newLiveSite(dir string, log io.Writer) *liveSite {
	return &liveSite{
		dir:      dir,
		interval: 250 * time.Millisecond,
		log:      log,
		pending:  map[converge.ID]bool{},
		kick:     make(chan struct{}, 1),
		chunk:    liveChunk,
	}
}

// attach gives the site its store; call it before run.
func (s *liveSite) attach(st site.Reader) {
	s.b = site.NewBuilder(st, s.dir, site.Options{Title: "converge"})
}

// changed records ids for the next update; it never blocks.
func (s *liveSite) changed(ids []converge.ID) {
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

// rebuild makes the next update a whole build: for a reader that may
// have missed changes (a broken watch).
func (s *liveSite) rebuild() {
	s.mu.Lock()
	s.all = true
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run builds the site, then updates it until ctx ends.
func (s *liveSite) run(ctx context.Context) {
	if _, err := s.b.Build(); err != nil && ctx.Err() == nil {
		fmt.Fprintf(s.log, "site: build: %v\n", err)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.interval):
		}
		s.update()
	}
}

// update applies every change recorded so far to the site. The ids come
// out of a map, in any order: a root and the children its compose
// committed can reach site.Builder.Update in the same call, either first.
func (s *liveSite) update() {
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
		if _, err := s.b.Build(); err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintf(s.log, "site: build: %v\n", err)
		}
		return
	}
	slices.Sort(ids) // chunks of neighbours: fewer shard and list pages each
	// At least one Update: with no ids it still takes new events and
	// revisions (the index's verdicts).
	for first := true; first || len(ids) > 0; first = false {
		n := min(len(ids), max(s.chunk, 1))
		st, err := s.b.Update(ids[:n])
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

// stoppableReader is a store as the live site reads it, whose reads fail
// with ctx's error once ctx is done: a site update of thousands of
// resources on a store over the network (a replica's etcd, a round trip
// a resource) then stops at its next read instead of holding up the
// shutdown.
type stoppableReader struct {
	state.Backend
	ctx context.Context
}

func (r stoppableReader) Resources(f state.Filter) ([]*converge.Resource, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	return r.Backend.Resources(f)
}

func (r stoppableReader) ResourcesAfter(kind string, after converge.ID, limit int) ([]state.ResourceRow, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	return r.Backend.ResourcesAfter(kind, after, limit)
}

func (r stoppableReader) ResourceHeadsAfter(kind string, after converge.ID, limit int) ([]state.ResourceRow, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	return r.Backend.ResourceHeadsAfter(kind, after, limit)
}

func (r stoppableReader) Resource(id converge.ID) (*converge.Resource, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	return r.Backend.Resource(id)
}

func (r stoppableReader) ResourcesByID(ids []converge.ID) ([]*converge.Resource, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	return r.Backend.ResourcesByID(ids)
}

func (r stoppableReader) Children(owner converge.ID) ([]converge.ID, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	return r.Backend.Children(owner)
}

func (r stoppableReader) EdgesOf(id converge.ID) (consumes, producedFor []converge.Edge, err error) {
	if err := r.ctx.Err(); err != nil {
		return nil, nil, err
	}
	return r.Backend.EdgesOf(id)
}

func (r stoppableReader) Events(resource converge.ID, limit int) ([]converge.Event, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	return r.Backend.Events(resource, limit)
}
