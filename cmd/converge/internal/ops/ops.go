// Package ops is what serve's operations endpoints answer from: a
// Prometheus registry whose engine collector reads the leading engine's
// counters at scrape time, the counters serve keeps itself (webhook
// deliveries, lint findings, verdicts, the pin), and readiness (/readyz).
// Read Monitor first, then engineCollector.Collect.
package ops

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/site"
	"github.com/convergehq/converge/state/etcdstate"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/controlplane"
)

// Monitor is what serve's /metrics and /readyz answer from: a registry
// whose engine collector reads the leading engine's counters at scrape
// time (nothing is counted per task outside the scheduler's loop), the
// counters serve itself keeps, resolved ahead so counting is an atomic
// add, and readiness.
type Monitor struct {
	reg *prometheus.Registry
	// engine is the engine serve runs now (nil before it starts, and on
	// a replica that follows).
	engine atomic.Pointer[controlplane.Engine]
	// notReady is why serve is not ready yet; nil once it is.
	notReady atomic.Pointer[string]

	webhook  map[[2]string]prometheus.Counter // by forge and outcome
	findings map[string]prometheus.Counter    // lint findings by rule, resolved as rules appear (sync loop only)
	findVec  *prometheus.CounterVec
	verdicts map[string]prometheus.Counter // by verdict
	// pinned is converge_pinned: 1 with the pinned revision's label
	// while a pin holds, 0 without a label otherwise (sync loop only).
	pinned *prometheus.GaugeVec
}

// The verdicts converge_revision_verdicts_total counts: a commit's (from
// Syncer.Advance) and an applied revision's convergence.
const (
	verdictApplied    = "applied"
	verdictInvalid    = "invalid"
	verdictBreaking   = "breaking"
	verdictHeld       = "held"
	verdictSuperseded = "superseded"
	verdictNotApplied = "not_applied"
	VerdictConverged  = "converged"
	VerdictStuck      = "stuck"
)

var verdictNames = []string{verdictApplied, verdictInvalid, verdictBreaking, verdictHeld, verdictSuperseded, verdictNotApplied,
	VerdictConverged, VerdictStuck}

// NewMonitor returns serve's metrics registry and readiness, not ready
// with why.
func NewMonitor(why string) *Monitor {
	o := &Monitor{reg: prometheus.NewRegistry(), webhook: map[[2]string]prometheus.Counter{},
		findings: map[string]prometheus.Counter{}, verdicts: map[string]prometheus.Counter{}}
	o.SetNotReady(why)
	o.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		engineCollector{o})
	wh := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "converge_webhook_deliveries_total",
		Help: "Webhook deliveries to POST /hooks/git, by forge and outcome (accepted, unsigned, bad_signature, disabled, bad_request)."},
		[]string{"forge", "outcome"})
	for _, f := range gitsync.WebhookForges {
		for _, oc := range gitsync.WebhookOutcomes {
			o.webhook[[2]string{f, oc}] = wh.WithLabelValues(f, oc)
		}
	}
	o.findVec = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "converge_lint_findings_total",
		Help: "Lint findings (breaking schema changes) in the commits serve judged, by rule."}, []string{"rule"})
	vd := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "converge_revision_verdicts_total",
		Help: "Verdicts on revisions: a commit applied, invalid, breaking, held (by the prune guard, or behind a newer one held), superseded or not applied (e.g. its load timed out); an applied revision converged or stuck."},
		[]string{"verdict"})
	for _, v := range verdictNames {
		o.verdicts[v] = vd.WithLabelValues(v)
	}
	o.pinned = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "converge_pinned",
		Help: "1 while a revision is pinned (converge rollback) and applied instead of the branch head, labelled with it; 0 while serve follows the head."},
		[]string{"revision"})
	o.pinned.WithLabelValues("").Set(0)
	o.reg.MustRegister(wh, o.findVec, vd, o.pinned)
	return o
}

// SetEngine makes e the engine the collector reads (nil: none, as on a
// replica that follows).
func (o *Monitor) SetEngine(e *controlplane.Engine) { o.engine.Store(e) }

// Engine is the engine serve runs now, nil when it runs none.
func (o *Monitor) Engine() *controlplane.Engine { return o.engine.Load() }

// SetPin sets converge_pinned to pin (nil: following the head).
func (o *Monitor) SetPin(pin *converge.Pin) {
	o.pinned.Reset()
	if pin == nil {
		o.pinned.WithLabelValues("").Set(0)
		return
	}
	o.pinned.WithLabelValues(pin.Revision.String()).Set(1)
}

// SetNotReady makes /readyz answer 503 with why ("" for ready).
func (o *Monitor) SetNotReady(why string) {
	if why == "" {
		o.notReady.Store(nil)
		return
	}
	o.notReady.Store(&why)
}

// Ready answers /readyz.
func (o *Monitor) Ready() (int, string) {
	if why := o.notReady.Load(); why != nil {
		return http.StatusServiceUnavailable, *why
	}
	return http.StatusOK, "ready"
}

// ObserveWebhook counts a webhook delivery (gitsync.Webhook.Observe).
func (o *Monitor) ObserveWebhook(forge, outcome string) {
	if c := o.webhook[[2]string{forge, outcome}]; c != nil {
		c.Inc()
	}
}

// ObservePass counts a commit's verdict and its lint findings; the sync
// loop alone calls it.
func (o *Monitor) ObservePass(p *gitsync.Pass) {
	if p.Record == nil {
		return // a revision that got no verdict
	}
	for _, f := range p.Record.Findings {
		c := o.findings[f.Rule]
		if c == nil {
			c = o.findVec.WithLabelValues(f.Rule)
			o.findings[f.Rule] = c
		}
		c.Inc()
	}
	v := verdictNotApplied
	switch {
	case !p.Valid():
		v = verdictInvalid
	case view.Breaking(p):
		v = verdictBreaking
	case p.Applied:
		v = verdictApplied
	case p.Record.Held == "superseded": // sync.Syncer.Advance's word for it
		v = verdictSuperseded
	case p.Held != "" || p.Record.Held != "":
		v = verdictHeld
	}
	o.verdicts[v].Inc()
}

// ObserveVerdict counts an applied revision's convergence verdict.
func (o *Monitor) ObserveVerdict(v string) { o.verdicts[v].Inc() }

// Handler serves the registry (/metrics).
func (o *Monitor) Handler() http.Handler {
	// A scrape that could not read the engine (its loop busy past
	// metricsTimeout) still serves everything else.
	return promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{Registry: o.reg, ErrorHandling: promhttp.ContinueOnError})
}

// metricsTimeout bounds how long a scrape waits for the scheduler's loop.
const metricsTimeout = 5 * time.Second

// engineCollector reads the running engine's counters when Prometheus
// scrapes: the scheduler's Metrics and Progress, the connected workers.
type engineCollector struct{ o *Monitor }

var (
	descResources = prometheus.NewDesc("converge_resources",
		"Resources by kind, kind version and phase.", []string{"kind", "kind_version", "phase"}, nil)
	descDrifted = prometheus.NewDesc("converge_resources_drifted",
		"Resources whose last observe found them different from git (being healed, or kept under drift_policy report), by kind and kind version.",
		[]string{"kind", "kind_version"}, nil)
	descDispatched = prometheus.NewDesc("converge_tasks_dispatched_total",
		"Tasks handed to workers, by kind, kind version and reaction.", []string{"kind", "kind_version", "reaction"}, nil)
	descResyncs = prometheus.NewDesc("converge_tasks_resyncs_total",
		"Of the tasks dispatched, those that were a Ready resource's due resync (its resync interval passed), by kind, kind version and reaction.",
		[]string{"kind", "kind_version", "reaction"}, nil)
	descResults = prometheus.NewDesc("converge_task_results_total",
		"Results workers returned, by kind, kind version and reaction.", []string{"kind", "kind_version", "reaction"}, nil)
	descRetries = prometheus.NewDesc("converge_task_retries_total",
		"Transient task failures (retried after a backoff), lease expiries included.", []string{"kind", "kind_version", "reaction"}, nil)
	descFailures = prometheus.NewDesc("converge_task_failures_total",
		"Permanent task failures.", []string{"kind", "kind_version", "reaction"}, nil)
	descLatency = prometheus.NewDesc("converge_task_duration_seconds",
		"Time from a task's dispatch to its result.", []string{"kind", "kind_version", "reaction"}, nil)
	descCommits       = prometheus.NewDesc("converge_commits_total", "Successful commits of state.", nil, nil)
	descEventsDropped = prometheus.NewDesc("converge_events_dropped_total",
		"Events dropped before they were written: the oldest beyond the store's retention while more waited (the store would have trimmed them).", nil, nil)
	descCommitLatency = prometheus.NewDesc("converge_commit_duration_seconds",
		"How long a commit of state took.", nil, nil)
	descBatchRows = prometheus.NewDesc("converge_commit_batch_resources",
		"Resource rows (puts and deletes) in a committed batch.", nil, nil)
	descCommitFailing = prometheus.NewDesc("converge_commit_failing",
		"1 while commits of state fail (the engine retries; see /healthz), else 0.", nil, nil)
	descQueue = prometheus.NewDesc("converge_queue_depth",
		"Resources waiting: ready (for a dispatch), waiting (for a free worker slot or a worker), backoff (for a retry).", []string{"queue"}, nil)
	descInflight   = prometheus.NewDesc("converge_tasks_inflight", "Tasks leased to workers now.", nil, nil)
	descDeliveries = prometheus.NewDesc("converge_reactor_deliveries_owed", "Reactor deliveries not yet done.", nil, nil)
	descWorkers    = prometheus.NewDesc("converge_workers_connected", "Worker processes connected to the control plane.", nil, nil)
	descLeading    = prometheus.NewDesc("converge_engine_running",
		"1 while this process runs the engine (a replica that follows runs none), else 0.", nil, nil)
	descSuspended = prometheus.NewDesc("converge_suspended",
		"1 for each suspended root (converge suspend), labelled with it; root=\"\" while everything is suspended.", []string{"root"}, nil)
	descHeld = prometheus.NewDesc("converge_suspended_held",
		"Resources a suspension holds back now: each was due a dispatch that did not start.", nil, nil)
	descRolloutWave = prometheus.NewDesc("converge_rollout_wave",
		"The wave (1-based) a rollout in progress or halted has let through, by composer; converge_rollout_waves is how many it has.",
		[]string{"resource", "wave_name"}, nil)
	descRolloutWaves = prometheus.NewDesc("converge_rollout_waves", "The number of waves of a rollout in progress or halted, by composer.",
		[]string{"resource"}, nil)
	descRolloutHeld = prometheus.NewDesc("converge_rollout_held",
		"Children whose change a rollout holds back for a later wave, by composer.", []string{"resource"}, nil)
	descRolloutHalted = prometheus.NewDesc("converge_rollout_halted",
		"1 for a halted rollout (a wave failed or timed out; a new revision starts over), 0 for one in progress.", []string{"resource"}, nil)
)

// Describe implements prometheus.Collector.
func (engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descResources, descDrifted, descDispatched, descResyncs, descResults, descRetries, descFailures, descLatency,
		descCommits, descEventsDropped, descCommitLatency, descBatchRows, descCommitFailing, descQueue, descInflight, descDeliveries, descWorkers, descLeading,
		descSuspended, descHeld, descRolloutWave, descRolloutWaves, descRolloutHeld, descRolloutHalted} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	e := c.o.engine.Load()
	if e == nil {
		ch <- prometheus.MustNewConstMetric(descLeading, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descLeading, prometheus.GaugeValue, 1)
	ctx, cancel := context.WithTimeout(context.Background(), metricsTimeout)
	defer cancel()
	m, err := e.Scheduler().Metrics(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descResources, err)
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(descHeld, float64(e.Scheduler().Progress().Held))
	for _, r := range m.Rollouts {
		id := string(r.ID)
		gauge(descRolloutWave, float64(r.Status.Wave+1), id, r.Status.Name)
		gauge(descRolloutWaves, float64(r.Status.Waves), id)
		gauge(descRolloutHeld, float64(r.Status.Held), id)
		halted := 0.0
		if r.Status.Phase == converge.RolloutHalted {
			halted = 1
		}
		gauge(descRolloutHalted, halted, id)
	}
	if ctl, err := e.Control(ctx); err == nil {
		for _, s := range ctl.Suspended {
			gauge(descSuspended, 1, string(s.Root))
		}
	}
	for _, k := range m.Kinds {
		ver := strconv.Itoa(k.Ref.Version)
		for _, p := range []struct {
			phase converge.Phase
			n     int
		}{{converge.PhasePending, k.Phases.Pending}, {converge.PhaseRunning, k.Phases.Running}, {converge.PhaseReady, k.Phases.Ready},
			{converge.PhaseFailed, k.Phases.Failed}, {converge.PhaseDeleting, k.Phases.Deleting}} {
			gauge(descResources, float64(p.n), k.Ref.Kind, ver, string(p.phase))
		}
		gauge(descDrifted, float64(k.Drifted), k.Ref.Kind, ver)
		for i, t := range k.Tasks {
			if t.Dispatched == 0 && t.Results == 0 && t.Retries == 0 && t.Failures == 0 {
				continue // a reaction this kind never ran
			}
			labels := []string{k.Ref.Kind, ver, scheduler.Reactions[i]}
			counter(descDispatched, t.Dispatched, labels...)
			counter(descResyncs, t.Resyncs, labels...)
			counter(descResults, t.Results, labels...)
			counter(descRetries, t.Retries, labels...)
			counter(descFailures, t.Failures, labels...)
			ch <- prometheus.MustNewConstHistogram(descLatency, t.Latency.Count, t.Latency.Sum, t.Latency.Cumulative(), labels...)
		}
	}
	counter(descCommits, m.Commits)
	counter(descEventsDropped, m.EventsDropped)
	ch <- prometheus.MustNewConstHistogram(descCommitLatency, m.CommitLatency.Count, m.CommitLatency.Sum, m.CommitLatency.Cumulative())
	ch <- prometheus.MustNewConstHistogram(descBatchRows, m.CommitRows.Count, m.CommitRows.Sum, m.CommitRows.Cumulative())
	gauge(descQueue, float64(m.Ready), "ready")
	gauge(descQueue, float64(m.Waiting), "waiting")
	gauge(descQueue, float64(m.Backoff), "backoff")
	gauge(descInflight, float64(m.Inflight))
	pr := e.Scheduler().Progress()
	failing := 0.0
	if pr.CommitError != "" {
		failing = 1
	}
	gauge(descCommitFailing, failing)
	gauge(descDeliveries, float64(pr.Deliveries))
	gauge(descWorkers, float64(len(e.Server().Workers())))
}

// MuxOptions are what serve's HTTP listener serves besides the metrics
// and readiness.
type MuxOptions struct {
	// WebhookSecret is $CONVERGE_WEBHOOK_SECRET ("": the webhook refuses
	// every delivery, and Mux warns); Trigger is what a delivery calls.
	WebhookSecret string
	Trigger       func()
	// Health answers /healthz: the status code and its text.
	Health func() (int, string)
	// Actions, when set, are the site's signed-in actions (--ui-actions).
	Actions *site.Actions
	// SiteDir is the live site's directory, served at /.
	SiteDir string
	Log     *slog.Logger
	// Pprof serves net/http/pprof's profiles at /debug/pprof/ (serve
	// --pprof).
	Pprof bool
}

// Mux is serve's HTTP side: POST /hooks/git (sync.Webhook, counted by
// forge and outcome), GET /healthz, GET /readyz, GET /metrics, the site's
// actions when set, /debug/pprof/ with Pprof, and the site.
func (o *Monitor) Mux(m MuxOptions) *http.ServeMux {
	mux := http.NewServeMux()
	if m.WebhookSecret == "" {
		m.Log.Warn("webhook disabled: $CONVERGE_WEBHOOK_SECRET is not set, so POST /hooks/git refuses every delivery (serve still polls)")
	}
	mux.Handle("POST /hooks/git", &gitsync.Webhook{Secret: []byte(m.WebhookSecret), Trigger: m.Trigger, Log: m.Log, Observe: o.ObserveWebhook})
	answer := func(check func() (int, string)) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			code, text := check()
			if code != http.StatusOK {
				http.Error(w, text, code)
				return
			}
			_, _ = io.WriteString(w, text+"\n") // a failed write is a client that went away
		}
	}
	mux.HandleFunc("GET /healthz", answer(m.Health))
	mux.HandleFunc("GET /readyz", answer(o.Ready))
	mux.Handle("GET /metrics", o.Handler())
	if m.Actions != nil {
		m.Actions.Register(mux)
	}
	if m.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("GET /", site.Handler(m.SiteDir))
	return mux
}

// FollowerHealth is a follower's GET /healthz: healthy while etcd can
// elect, naming the leader ("ok: replica b follows a"); during a quorum
// loss, or cut off from etcd, no replica can lead here, and it says so
// (503).
func FollowerHealth(rep *etcdstate.Replica) (int, string) {
	name := rep.Name()
	if err := rep.Health(time.Second); err != nil {
		return http.StatusServiceUnavailable, "replica " + name + " follows, and " + err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	a, err := rep.Leader(ctx)
	switch {
	case errors.Is(err, etcdstate.ErrNoLeader):
		return http.StatusOK, "ok: replica " + name + " follows (no replica leads yet)"
	case err != nil:
		return http.StatusServiceUnavailable, "replica " + name + " follows, and " + err.Error()
	case a.Name == name:
		// Its own advert outlives a lost term until etcd expires it.
		return http.StatusOK, "ok: replica " + name + " follows (its own lost term is expiring)"
	}
	return http.StatusOK, "ok: replica " + name + " follows " + a.Name
}
