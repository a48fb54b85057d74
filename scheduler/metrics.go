package scheduler

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/convergehq/converge"
)

// Reactions are the reaction labels of task metrics (TaskStats), in the
// order of KindMetrics.Tasks: an operator verb is "verb" whatever its
// name, a dry-run compose is "compose".
var Reactions = [numReactions]string{
	converge.ReactionReconcile, converge.ReactionCompose, converge.ReactionTeardown, converge.ReactionReact, "verb",
	converge.ReactionObserve,
}

const numReactions = 6

// LatencyBuckets are the upper bounds, in seconds, of the task latency
// histograms (TaskStats.Latency): from dispatch to result.
var LatencyBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300}

// CommitBuckets are the upper bounds, in seconds, of the commit latency
// histogram (Metrics.CommitLatency).
var CommitBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// BatchBuckets are the upper bounds, in resource rows, of the batch size
// histogram (Metrics.CommitRows).
var BatchBuckets = []float64{1, 10, 100, 1000, 4096, 8192}

// Histogram is a fixed-bucket histogram the loop fills without
// allocating: Counts[i] counts the observations at most Bounds[i] (not
// cumulative), the last entry those above every bound.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

// observe adds v.
func (h *Histogram) observe(v float64) {
	i := 0
	for i < len(h.Bounds) && v > h.Bounds[i] {
		i++
	}
	h.Counts[i]++
	h.Count++
	h.Sum += v
}

func newHistogram(bounds []float64) Histogram {
	return Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds)+1)}
}

// Cumulative returns the count of observations at most each bound, as
// Prometheus wants them.
func (h Histogram) Cumulative() map[float64]uint64 {
	out := make(map[float64]uint64, len(h.Bounds))
	var n uint64
	for i, b := range h.Bounds {
		n += h.Counts[i]
		out[b] = n
	}
	return out
}

func (h Histogram) clone() Histogram {
	h.Counts = slices.Clone(h.Counts)
	return h
}

// TaskStats counts one KindRef's tasks of one reaction since the
// scheduler started.
type TaskStats struct {
	// Dispatched counts tasks handed to a worker; Results the answers
	// that came back for them.
	Dispatched, Results uint64
	// Resyncs counts those of Dispatched that were a Ready resource's
	// due resync (its resync interval passed), not work a change asked
	// for: after a restart or a failover, the loaded rows whose interval
	// ran out while no engine ran them are due one.
	Resyncs uint64
	// Retries counts transient failures (a transient answer, a lease
	// that expired): the task runs again after a backoff. Failures
	// counts permanent ones (and an operator verb that timed out).
	Retries, Failures uint64
	// Latency is the time from dispatch to result, in seconds.
	Latency Histogram
}

// KindMetrics is one KindRef's share of Metrics.
type KindMetrics struct {
	Ref converge.KindRef
	// Phases tallies the resources of this kind version by phase.
	Phases converge.Counts
	// Tasks is indexed like Reactions.
	Tasks [numReactions]TaskStats
	// Drifted counts the resources of this kind version with a drift
	// recorded (Resource.Drift): being healed, or kept under report.
	Drifted int
}

// Metrics is a snapshot of the scheduler's counters for monitoring
// (converge serve's /metrics). The loop keeps them as plain integers on
// state it already has (a refState per KindRef), so a task costs no lock
// and no allocation; Metrics copies them through the loop.
type Metrics struct {
	// Kinds holds every KindRef the scheduler has seen, by kind and
	// version.
	Kinds []KindMetrics
	// Ready is how many resources wait in the ready queue for a
	// dispatch; Waiting how many wait for a free worker slot (or for a
	// worker to connect); Backoff how many wait out a retry's backoff.
	Ready, Waiting, Backoff int
	// Inflight is the number of tasks leased to workers now.
	Inflight int
	// Commits counts successful commits of state; CommitLatency their
	// durations in seconds and CommitRows their resource rows (puts and
	// deletes).
	Commits       uint64
	CommitLatency Histogram
	CommitRows    Histogram
	// EventsDropped counts events dropped before they were written, the
	// oldest past Config.MaxEvents waiting (the store would have trimmed
	// them on arrival).
	EventsDropped uint64
	// Rollouts are the rollouts in progress or halted (Rollouts).
	Rollouts []RolloutView
}

// refStats are one refState's counters (Metrics); only the loop touches
// them.
type refStats struct {
	phases converge.Counts
	tasks  [numReactions]TaskStats
}

// opStats are the scheduler's own counters beyond Progress (Metrics);
// only the loop touches them.
type opStats struct {
	commits       uint64
	commitLatency Histogram
	commitRows    Histogram
	// commitStart and commitSize describe the batch in flight; the rest
	// of it, for the log line of a slow commit.
	commitStart time.Time
	commitSize  int
	commitBatch commitShape
}

func (o *opStats) init() {
	o.commitLatency = newHistogram(CommitBuckets)
	o.commitRows = newHistogram(BatchBuckets)
}

// reactionIndex is the index into Reactions of a task record.
func reactionIndex(rec *taskRec) int {
	if rec.kind == taskVerb && !rec.dry {
		return 4
	}
	switch rec.reaction {
	case converge.ReactionReconcile:
		return 0
	case converge.ReactionCompose:
		return 1
	case converge.ReactionTeardown:
		return 2
	case converge.ReactionReact:
		return 3
	case converge.ReactionObserve:
		return 5
	}
	return 4
}

// taskStats returns the counters of rec's KindRef and reaction, found
// once per task (track) and kept on rec.
func (s *Scheduler) taskStats(rec *taskRec) *TaskStats {
	if rec.stats != nil {
		return rec.stats
	}
	rs := s.refState(rec.ref)
	st := &rs.stats.tasks[reactionIndex(rec)]
	if st.Latency.Counts == nil {
		st.Latency = newHistogram(LatencyBuckets)
	}
	rec.stats = st
	return st
}

// track records a task just dispatched: it is rec from now on, counted
// as dispatched, and its latency runs from now.
func (s *Scheduler) track(taskID string, rec *taskRec) {
	rec.started = s.now
	s.lease.tasks[taskID] = rec
	st := s.taskStats(rec)
	st.Dispatched++
	if rec.resync {
		st.Resyncs++
	}
}

// countResult counts a result of rec with outcome o.
func (s *Scheduler) countResult(rec *taskRec, o converge.Outcome) {
	st := s.taskStats(rec)
	st.Results++
	st.Latency.observe(s.now.Sub(rec.started).Seconds())
	switch o {
	case converge.OutcomeOK:
	case converge.OutcomePermanent:
		st.Failures++
	default:
		if rec.kind == taskVerb {
			st.Failures++ // a verb is not retried
		} else {
			st.Retries++
		}
	}
}

// countExpired counts a task whose lease expired before its result.
func (s *Scheduler) countExpired(rec *taskRec) {
	st := s.taskStats(rec)
	if rec.kind == taskVerb {
		st.Failures++
	} else {
		st.Retries++
	}
}

// commitShape is what a batch held: a slow commit's log line says it.
type commitShape struct {
	rows, deleted, edges, events, deliveries int
	// bytes is the rows' declared spec, spec and status together; big
	// counts the rows over bigRow.
	bytes int64
	big   int
}

// slowCommit is the commit time past which the scheduler logs the batch
// (docs/ARCHITECTURE.md: a commit holds about a second of work at most).
const slowCommit = time.Second

// commitSent notes a batch handed to the store.
func (s *Scheduler) commitSent(b *converge.Batch) {
	s.ops.commitStart = s.cfg.Now()
	s.ops.commitSize = len(b.Resources) + len(b.DeletedResources)
	sh := commitShape{rows: len(b.Resources), deleted: len(b.DeletedResources), edges: len(b.Edges) + len(b.DeletedEdges),
		events: len(b.Events), deliveries: len(b.Deliveries) + len(b.DeletedDeliveries)}
	for _, r := range b.Resources {
		n := len(r.Declared) + len(r.Spec)
		sh.bytes += int64(n + len(r.Status))
		if n >= bigRow {
			sh.big++
		}
	}
	s.ops.commitBatch = sh
}

// commitDone counts the batch in flight as committed.
func (s *Scheduler) commitDone() {
	if s.ops.commitStart.IsZero() {
		return
	}
	s.ops.commits++
	took := s.cfg.Now().Sub(s.ops.commitStart)
	s.ops.commitLatency.observe(took.Seconds())
	if took >= slowCommit {
		sh := s.ops.commitBatch
		s.log.Warn("slow commit", "took", took.Round(time.Millisecond), "rows", sh.rows, "big_rows", sh.big, "row_bytes", sh.bytes,
			"deleted", sh.deleted, "edges", sh.edges, "events", sh.events, "deliveries", sh.deliveries)
	}
	s.ops.commitRows.observe(float64(s.ops.commitSize))
	s.ops.commitStart = time.Time{}
}

// Metrics returns a snapshot of the scheduler's counters. It runs on the
// loop (a copy of a few integers per KindRef), so it waits for the loop's
// current step, or until ctx is done.
func (s *Scheduler) Metrics(ctx context.Context) (Metrics, error) {
	// The loop hands its copy over a channel: a ctx that ends first must
	// not leave the loop writing what the caller reads.
	out := make(chan Metrics, 1)
	err := s.exec(ctx, func(s *Scheduler) {
		var m Metrics
		m.Kinds = make([]KindMetrics, 0, len(s.lease.refs))
		drifted := s.graph.driftedByRef()
		for ref, rs := range s.lease.refs {
			km := KindMetrics{Ref: ref, Phases: rs.stats.phases, Tasks: rs.stats.tasks, Drifted: drifted[ref]}
			for i := range km.Tasks {
				if km.Tasks[i].Latency.Counts == nil {
					km.Tasks[i].Latency = newHistogram(LatencyBuckets)
				} else {
					km.Tasks[i].Latency = km.Tasks[i].Latency.clone()
				}
			}
			m.Kinds = append(m.Kinds, km)
			m.Waiting += len(rs.waiting)
		}
		m.Ready = len(s.lease.queue) - s.lease.queueHead + len(s.startQueue)
		m.Backoff = s.lease.backoffN
		m.Inflight = s.lease.inflight
		m.Commits = s.ops.commits
		m.EventsDropped = s.batch.evDropped
		m.CommitLatency = s.ops.commitLatency.clone()
		m.CommitRows = s.ops.commitRows.clone()
		m.Rollouts = s.rolloutViews()
		out <- m
	})
	if err != nil {
		return Metrics{}, err
	}
	m := <-out
	slices.SortFunc(m.Kinds, func(a, b KindMetrics) int {
		return cmp.Or(cmp.Compare(a.Ref.Kind, b.Ref.Kind), cmp.Compare(a.Ref.Version, b.Ref.Version))
	})
	return m, nil
}
