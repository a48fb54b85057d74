package state

import (
	"context"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/internal/rules"
)

// Filter selects resources for Resources. Zero fields match everything.
type Filter = rules.Filter

// ResourceRow is one resource of a scan (ResourcesAfter) with the edges
// it consumes (it is their Consumer), sorted by producer, as its row
// holds them.
type ResourceRow = rules.ResourceRow

// Load returns everything the scheduler needs, read in one transaction:
// resources sorted by ID, edges sorted by consumer then producer, kinds,
// configs, bindings, deliveries, the applied revision and the last event
// Seq. It implements the scheduler's Store port.
func (s *Store) Load(ctx context.Context) (*converge.Snapshot, error) {
	snap, err := s.rulesStore.Load(ctx)
	if err != nil {
		return nil, err
	}
	releaseMapped(s.db, 0) // a whole-store scan touched every page
	return snap, nil
}

// LoadStream is Load handing the resources over one at a time
// (scheduler.StreamLoader; rules.Store.LoadStream says how).
func (s *Store) LoadStream(ctx context.Context, begin func(*converge.Snapshot, int) error, each func(*converge.Resource) error) (*converge.Snapshot, error) {
	snap, err := s.rulesStore.LoadStream(ctx, begin, each)
	releaseMapped(s.db, 0)
	return snap, err
}
