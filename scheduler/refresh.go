package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergehq/converge"
)

// Refresh (converge plan --refresh): every stored resource whose kind
// declares observe is observed through workers, and what differs from
// its stored spec is listed beside the plan's git changes. Nothing is
// applied or written: an observe changes nothing on the real system, and
// the answers are only compared.

// DriftItem is one resource a refresh found drifted, or could not
// observe (Error).
type DriftItem struct {
	ID       converge.ID `json:"id"`
	Fields   []string    `json:"fields,omitempty"`
	Gone     bool        `json:"gone,omitempty"`
	Unmarked bool        `json:"unmarked,omitempty"`
	// Policy is the drift policy a sync would apply: "heal" (it
	// reconciles the object back) or "report" (it leaves it).
	Policy string `json:"policy"`
	// Error says why the resource could not be observed.
	Error string `json:"error,omitempty"`
}

// Summary is the drift in words (converge.DriftReport.Summary).
func (d DriftItem) Summary() string {
	return (&converge.DriftReport{Fields: d.Fields, Gone: d.Gone, Unmarked: d.Unmarked}).Summary()
}

// RefreshResult is what Refresh found.
type RefreshResult struct {
	// Observed counts the resources observed.
	Observed int
	// Drift lists the drifted ones, Failed those whose observe failed;
	// both sorted by ID.
	Drift, Failed []DriftItem
}

// refreshTTL bounds one observe of a refresh.
const refreshTTL = 30 * time.Second

// Refresh observes every resource of snap whose kind declares observe
// (leaves that ran at least once and are not being deleted), with
// concurrency observes at a time, through observe (a worker's answer to
// the task), and compares each answer with the resource's spec.
func Refresh(ctx context.Context, snap *converge.Snapshot, observe ComposeFunc, concurrency int) RefreshResult {
	kinds := map[converge.KindRef]*converge.Kind{}
	for _, k := range snap.Kinds {
		kinds[k.Ref()] = k
	}
	configs := map[string]*converge.ProviderConfig{}
	defaults := map[converge.KindRef]*converge.ProviderConfig{}
	for _, c := range snap.Configs {
		configs[c.Name] = c
		if c.IsDefault {
			defaults[c.Ref()] = c
		}
	}
	var todo []*converge.Resource
	for _, r := range snap.Resources {
		k := kinds[r.Ref()]
		if k == nil || !k.Has(converge.ReactionObserve) || k.Has(converge.ReactionCompose) || r.Deleting || r.ObservedGeneration == 0 {
			continue
		}
		todo = append(todo, r)
	}
	concurrency = max(1, concurrency)
	var mu sync.Mutex
	var out RefreshResult
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for _, r := range todo {
		k := kinds[r.Ref()]
		policy := r.DriftPolicy
		if policy == "" {
			policy = k.DriftPolicy
		}
		if policy == "" {
			policy = converge.DriftPolicyHeal
		}
		var cfg []byte
		if r.ProviderConfigRef != "" {
			if c := configs[r.ProviderConfigRef]; c != nil {
				cfg = c.Config
			}
		} else if c := defaults[r.Ref()]; c != nil {
			cfg = c.Config
		}
		t := &converge.Task{Reaction: converge.ReactionObserve, UID: r.UID, Kind: r.Kind, KindVersion: r.KindVersion,
			Name: r.Name, Generation: r.Generation, Spec: r.Spec, Status: r.Status, Config: cfg,
			Key: r.UID + "/" + itoa(r.Generation) + "/observe", Deadline: time.Now().Add(refreshTTL)}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			it := DriftItem{ID: r.ID(), Policy: policy}
			res, err := observe(ctx, t)
			switch {
			case err != nil:
				it.Error = err.Error()
			case res.Outcome != converge.OutcomeOK:
				it.Error = res.Outcome.String() + ": " + res.Message
			case res.Observed == nil:
				it.Error = "the worker answered observe without an observation"
			}
			mu.Lock()
			defer mu.Unlock()
			if it.Error != "" {
				out.Failed = append(out.Failed, it)
				return
			}
			out.Observed++
			if d := driftOf(r.Spec, res.Observed); d != nil {
				it.Fields, it.Gone, it.Unmarked = d.Fields, d.Gone, d.Unmarked
				out.Drift = append(out.Drift, it)
			}
		})
	}
	wg.Wait()
	sort.Slice(out.Drift, func(i, j int) bool { return out.Drift[i].ID < out.Drift[j].ID })
	sort.Slice(out.Failed, func(i, j int) bool { return out.Failed[i].ID < out.Failed[j].ID })
	return out
}

// Observe runs the observe reaction of the resource t names on a worker,
// with the resource's current spec and provider config as this scheduler
// holds them (t's are ignored), and returns the answer: nothing of it is
// applied (a daemon's side of plan --refresh). It returns
// converge.ErrNotFound (wrapped) for a resource it does not hold.
func (s *Scheduler) Observe(ctx context.Context, t *converge.Task) (*converge.Result, error) {
	id := converge.NewID(t.Kind, t.Name)
	return s.awaitServed(ctx, "observe "+string(id), func(s *Scheduler) (chan verbOutcome, error) {
		return s.startObserve(id)
	})
}

func (s *Scheduler) startObserve(id converge.ID) (chan verbOutcome, error) {
	n := s.graph.nodes[id]
	if n == nil || n.is(stateRemoved) {
		return nil, fmt.Errorf("observe %s: %w", id, converge.ErrNotFound)
	}
	ref := n.res().Ref()
	if !s.disp.Serves(ref, converge.ReactionObserve) {
		return nil, fmt.Errorf("observe %s: %w serves %s observe", id, converge.ErrNoWorker, ref)
	}
	t := s.newTask(n.res(), converge.ReactionObserve, n.res().UID+"/"+itoa(n.res().Generation)+"/observe", s.leaseTTL(ref))
	t.DryRun = true
	if err := s.disp.Dispatch(s.ctx, t); err != nil {
		return nil, fmt.Errorf("observe %s: %w", id, err)
	}
	s.lease.dispatched++
	ch := make(chan verbOutcome, 1)
	s.track(t.ID, &taskRec{kind: taskVerb, id: id, ref: ref, reaction: converge.ReactionObserve, verb: ch, dry: true})
	s.lease.addTimer(t.Deadline, timerLease, id, t.ID)
	return ch, nil
}

// TaskRunner runs tasks as they are on a dispatcher whose results nobody
// else reads (converge plan's own workers), any number at a time: one
// goroutine hands each result to the call that dispatched its task.
func TaskRunner(d Dispatcher) ComposeFunc {
	var (
		seq     atomic.Uint64
		mu      sync.Mutex
		waiting = map[string]chan *converge.Result{}
		once    sync.Once
	)
	demux := func() {
		for r := range d.Results() {
			mu.Lock()
			ch := waiting[r.TaskID]
			delete(waiting, r.TaskID)
			mu.Unlock()
			if ch != nil {
				ch <- r
			}
		}
		mu.Lock()
		for id, ch := range waiting {
			close(ch)
			delete(waiting, id)
		}
		mu.Unlock()
	}
	return func(ctx context.Context, t *converge.Task) (*converge.Result, error) {
		once.Do(func() { go demux() })
		dt := *t
		dt.ID, dt.DryRun = "run-"+strconv.FormatUint(seq.Add(1), 10), true
		if dt.Deadline.IsZero() {
			dt.Deadline = time.Now().Add(refreshTTL)
		}
		ch := make(chan *converge.Result, 1)
		mu.Lock()
		waiting[dt.ID] = ch
		mu.Unlock()
		forget := func() {
			mu.Lock()
			delete(waiting, dt.ID)
			mu.Unlock()
		}
		for {
			err := d.Dispatch(ctx, &dt)
			if err == nil {
				break
			}
			if !errors.Is(err, converge.ErrNoWorker) {
				forget()
				return nil, fmt.Errorf("%s %s/%s: %w", dt.Reaction, t.Kind, t.Name, err)
			}
			select {
			case <-ctx.Done():
				forget()
				return nil, fmt.Errorf("%s %s/%s: %w", dt.Reaction, t.Kind, t.Name, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
		select {
		case r, ok := <-ch:
			if !ok {
				return nil, fmt.Errorf("%s %s/%s: dispatcher closed", dt.Reaction, t.Kind, t.Name)
			}
			return r, nil
		case <-ctx.Done():
			forget()
			return nil, fmt.Errorf("%s %s/%s: %w", dt.Reaction, t.Kind, t.Name, ctx.Err())
		case <-time.After(time.Until(dt.Deadline)):
			forget()
			return nil, fmt.Errorf("%s %s/%s: timed out", dt.Reaction, t.Kind, t.Name)
		}
	}
}
