package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// --log-format and --log-level are checked before any command runs;
// there is no level that hides warnings.
func TestLogFlagsRefused(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"--log-format xml version", `--log-format "xml": want text or json`},
		{"--log-level error version", `--log-level "error": want debug, info or warn (warnings and errors always show)`},
		{"--log-level loud version", `--log-level "loud"`},
	} {
		out, err := runCLI(strings.Fields(tc.args)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("converge %s: %v (%s), want an error saying %q", tc.args, err, out, tc.want)
		}
	}
}

// The logger a command gets: its format, its level, -v lowering it to
// debug, warnings always; the environment gives the defaults.
func TestLogger(t *testing.T) {
	t.Setenv(envLogFormat, "json")
	t.Setenv(envLogLevel, "info")
	for _, tc := range []struct {
		name      string
		args      []string
		verbose   bool
		json      bool
		min       slog.Level // the lowest level shown
		workerEnv string
	}{
		{name: "environment", json: true, min: slog.LevelInfo, workerEnv: "CONVERGE_LOG_LEVEL=info"},
		{name: "flags", args: []string{"--log-format", "text", "--log-level", "warn"}, min: slog.LevelWarn, workerEnv: "CONVERGE_LOG_LEVEL=warn"},
		{name: "-v lowers", args: []string{"--log-format", "text", "--log-level", "warn"}, verbose: true, min: slog.LevelDebug, workerEnv: "CONVERGE_LOG_LEVEL=debug"},
		{name: "debug", args: []string{"--log-level", "debug"}, json: true, min: slog.LevelDebug, workerEnv: "CONVERGE_LOG_LEVEL=debug"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &globals{}
			root := newRoot(g)
			root.SetArgs(append(tc.args, "version"))
			root.SetOut(&bytes.Buffer{})
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			log := g.logger(&buf, tc.verbose)
			for _, l := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
				if got, want := log.Enabled(context.Background(), l), l >= tc.min; got != want {
					t.Errorf("level %v enabled %v, want %v", l, got, want)
				}
			}
			log.Warn("hello", "k", "v")
			var rec map[string]any
			isJSON := json.Unmarshal(buf.Bytes(), &rec) == nil
			if isJSON != tc.json {
				t.Errorf("logged %q: JSON %v, want %v", buf.String(), isJSON, tc.json)
			}
			if !tc.json && !strings.Contains(buf.String(), `level=WARN msg=hello k=v`) {
				t.Errorf("logged %q, want slog's text format", buf.String())
			}
			env := strings.Join(workerLogEnv(log), " ")
			if want := "CONVERGE_LOG_FORMAT=json " + tc.workerEnv; env != want {
				t.Errorf("worker environment %q, want %q", env, want)
			}
		})
	}
}
