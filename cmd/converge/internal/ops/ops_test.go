package ops

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	gitsync "github.com/convergehq/converge/sync"
)

// Each commit's verdict and lint findings are counted once, by verdict
// and by rule; /readyz follows the readiness serve sets.
func TestOpsCountsVerdicts(t *testing.T) {
	o := NewMonitor("starting: the store is not open yet")
	// rec is a pass as sync.Syncer.Advance returns it: held is the
	// prune guard's reason (the pass's and its record's), recHeld what
	// Advance records for an older commit it did not apply.
	rec := func(applied bool, held, recHeld string, errs, findings []converge.Finding, lint string) *gitsync.Pass {
		r := &converge.RevisionRecord{Errors: errs, Findings: findings, Applied: applied, Held: held}
		if recHeld != "" {
			r.Held = recHeld
		}
		if lint != "" {
			r.SetStatus(converge.CommitStatus{Context: converge.ContextLint, State: lint})
		}
		return &gitsync.Pass{Record: r, Applied: applied, Held: held}
	}
	breaking := []converge.Finding{{Rule: "FIELD_REMOVED"}, {Rule: "TYPE_CHANGED"}, {Rule: "FIELD_REMOVED"}}
	for _, p := range []*gitsync.Pass{
		rec(true, "", "", nil, nil, converge.StateSuccess),
		rec(false, "", "", []converge.Finding{{Message: "spec.account_id: bad"}}, nil, ""),
		rec(false, "", "", nil, breaking, converge.StateFailure),
		rec(false, "prune guard: 10 of 12 resources would be deleted", "", nil, nil, converge.StateSuccess),
		rec(false, "", "newer revision held", nil, nil, converge.StateSuccess),
		rec(false, "", "superseded", nil, nil, converge.StateSuccess),
		rec(false, "", "", nil, nil, converge.StateSuccess), // its load timed out
		{Revision: converge.Revision{Hash: "no-record"}},
	} {
		o.ObservePass(p)
	}
	o.ObserveVerdict(VerdictConverged)
	for name, want := range map[string]float64{
		`converge_lint_findings_total{rule="FIELD_REMOVED"}`:      2,
		`converge_lint_findings_total{rule="TYPE_CHANGED"}`:       1,
		`converge_revision_verdicts_total{verdict="applied"}`:     1,
		`converge_revision_verdicts_total{verdict="breaking"}`:    1,
		`converge_revision_verdicts_total{verdict="converged"}`:   1,
		`converge_revision_verdicts_total{verdict="held"}`:        2,
		`converge_revision_verdicts_total{verdict="not_applied"}`: 1,
		`converge_revision_verdicts_total{verdict="invalid"}`:     1,
		`converge_revision_verdicts_total{verdict="stuck"}`:       0,
		`converge_revision_verdicts_total{verdict="superseded"}`:  1,
		`converge_engine_running`:                                 0, // no engine: a replica that follows
	} {
		if got, ok := gathered(t, o)[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}

	ready := func() (int, string) {
		rec := httptest.NewRecorder()
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			code, text := o.Ready()
			w.WriteHeader(code)
			w.Write([]byte(text))
		}).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, text := ready(); code != http.StatusServiceUnavailable || !strings.Contains(text, "store is not open") {
		t.Errorf("readyz before start = %d %q", code, text)
	}
	o.SetNotReady("")
	if code, text := ready(); code != http.StatusOK || text != "ready" {
		t.Errorf("readyz once ready = %d %q", code, text)
	}
}

// gathered returns every sample of o's registry by its name and labels,
// as the text format writes them.
func gathered(t *testing.T, o *Monitor) map[string]float64 {
	t.Helper()
	mfs, err := o.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[name] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[name] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// With Pprof the mux serves Go's profiles at /debug/pprof/; without it
// that path is the site's (here an empty directory: 404).
func TestMuxPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		mux := NewMonitor("").Mux(MuxOptions{Health: func() (int, string) { return 200, "ok" }, SiteDir: t.TempDir(),
			Pprof: on, Log: slog.New(slog.DiscardHandler)})
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1"} {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			if got := rec.Code == http.StatusOK && strings.Contains(rec.Body.String(), "goroutine"); got != on {
				t.Errorf("Pprof %v: GET %s = %d %.80q, want profiles served: %v", on, path, rec.Code, rec.Body.String(), on)
			}
		}
	}
}
