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

// observedStore is the store the scheduler writes through, telling the
// live site which resources each committed batch changed.
type observedStore struct {
	state.Backend
	changed func(ids []converge.ID)
}

// Commit commits b, then reports the resources it touched: those put or
// deleted and the consumers of edges put or deleted.
func (o observedStore) Commit(ctx context.Context, b *converge.Batch) error {
	if err := o.Backend.Commit(ctx, b); err != nil {
		return err
	}
	if o.changed == nil {
		return nil
	}
	ids := make([]converge.ID, 0, len(b.Resources)+len(b.DeletedResources)+len(b.Edges)+len(b.DeletedEdges))
	for _, r := range b.Resources {
		ids = append(ids, r.ID())
	}
	ids = append(ids, b.DeletedResources...)
	for _, e := range b.Edges {
		ids = append(ids, e.Consumer)
	}
	for _, e := range b.DeletedEdges {
		ids = append(ids, e.Consumer)
	}
	if len(ids) > 0 || len(b.Events) > 0 || b.Applied != nil {
		o.changed(ids)
	}
	return nil
}

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
	if _, err := s.b.Build(ctx); err != nil && ctx.Err() == nil {
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
		s.update(ctx)
	}
}

// update applies every change recorded so far to the site. The ids come
// out of a map, in any order: a root and the children its compose
// committed can reach site.Builder.Update in the same call, either first.
func (s *liveSite) update(ctx context.Context) {
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

// stoppableReader is a store as the live site reads it, whose reads fail
// with ctx's error once ctx is done: a site update of thousands of
// resources on a store over the network (a replica's etcd, a round trip
// a resource) then stops at its next read instead of holding up the
// shutdown.
type stoppableReader struct {
	state.Backend
	ctx context.Context
}

func (r stoppableReader) Resources(ctx context.Context, f state.Filter) ([]*converge.Resource, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	return r.Backend.Resources(ctx, f)
}

func (r stoppableReader) ResourcesAfter(ctx context.Context, kind string, after converge.ID, limit int) ([]state.ResourceRow, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	return r.Backend.ResourcesAfter(ctx, kind, after, limit)
}

func (r stoppableReader) ResourceHeadsAfter(ctx context.Context, kind string, after converge.ID, limit int) ([]state.ResourceRow, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	return r.Backend.ResourceHeadsAfter(ctx, kind, after, limit)
}

func (r stoppableReader) Resource(ctx context.Context, id converge.ID) (*converge.Resource, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	return r.Backend.Resource(ctx, id)
}

func (r stoppableReader) ResourcesByID(ctx context.Context, ids []converge.ID) ([]*converge.Resource, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	return r.Backend.ResourcesByID(ctx, ids)
}

func (r stoppableReader) Children(ctx context.Context, owner converge.ID) ([]converge.ID, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	return r.Backend.Children(ctx, owner)
}

func (r stoppableReader) EdgesOf(ctx context.Context, id converge.ID) (consumes, producedFor []converge.Edge, err error) {
	if err := r.ctx.Err(); err != nil {
		return nil, nil, err
	}
	return r.Backend.EdgesOf(ctx, id)
}

func (r stoppableReader) Events(ctx context.Context, resource converge.ID, limit int) ([]converge.Event, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	return r.Backend.Events(ctx, resource, limit)
}
