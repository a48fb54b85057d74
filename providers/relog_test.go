package providers_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers"
)

// A worker's output is logged again by the control plane's logger, in
// its format, with the worker's name: plain lines at info, a worker's
// own slog JSON lines with their level, message and attributes, and a
// slog text line's level kept.
func TestSupervisorRelogsWorkerOutput(t *testing.T) {
	script := `printf 'plain hello\n'; ` +
		`printf '{"time":"2026-01-01T00:00:00Z","level":"WARN","msg":"quota low","left":3}\n' >&2; ` +
		`printf 'time=2026-01-01T00:00:00Z level=ERROR msg="cannot reach cloud" err=timeout\n' >&2; ` +
		`printf 'no newline at the end'; exec sleep 60`
	out := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	sup, err := providers.StartWorkers(context.Background(), []converge.WorkerSpec{{Name: "sh", Command: []string{"sh", "-c", script}}},
		providers.SupervisorOptions{Addr: "unix:///nonexistent", Logger: log, RelogOutput: true, StopTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(out.String(), `"stream":`) < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	sup.Stop() // the last line, without its newline, is logged when the stream ends
	type entry struct {
		Level, Msg, Worker, Stream, Line string
		Left                             float64
	}
	var got []entry
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e entry
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("not JSON: %q: %v", l, err)
		}
		if e.Worker == "sh-0" {
			got = append(got, e)
		}
	}
	want := map[string]entry{
		"plain hello":           {Level: "INFO", Msg: "worker output", Worker: "sh-0", Stream: "stdout", Line: "plain hello"},
		"quota low":             {Level: "WARN", Msg: "quota low", Worker: "sh-0", Stream: "stderr", Left: 3},
		"cannot reach cloud":    {Level: "ERROR", Msg: "worker output", Worker: "sh-0", Stream: "stderr", Line: `time=2026-01-01T00:00:00Z level=ERROR msg="cannot reach cloud" err=timeout`},
		"no newline at the end": {Level: "INFO", Msg: "worker output", Worker: "sh-0", Stream: "stdout", Line: "no newline at the end"},
	}
	for key, w := range want {
		found := false
		for _, e := range got {
			if e == w {
				found = true
			}
		}
		if !found {
			t.Errorf("no entry for %q like %+v in:\n%s", key, w, out.String())
		}
	}
}
