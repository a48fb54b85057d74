package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxRelogLine bounds one re-logged line; a longer one is cut there.
const maxRelogLine = 64 << 10

// lineLogger is a worker process's stdout or stderr: every line written
// to it is logged by log with the worker's name and the stream, in the
// control plane's own format (SupervisorOptions.RelogOutput).
type lineLogger struct {
	log            *slog.Logger
	worker, stream string

	mu  sync.Mutex
	buf []byte
}

func newLineLogger(log *slog.Logger, worker, stream string) *lineLogger {
	return &lineLogger{log: log, worker: worker, stream: stream}
}

// Write implements io.Writer: it logs every whole line in p and keeps
// the rest for the next Write (or Flush).
func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			room := maxRelogLine - len(l.buf)
			if len(p) >= room {
				l.buf = append(l.buf, p[:room]...)
				l.emit()
				p = p[room:]
				continue
			}
			l.buf = append(l.buf, p...)
			break
		}
		l.buf = append(l.buf, p[:i]...)
		l.emit()
		p = p[i+1:]
	}
	return n, nil
}

// Flush logs a last line that had no newline.
func (l *lineLogger) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.emit()
	}
}

// textLevel finds the level of a line slog's text handler wrote.
var textLevel = regexp.MustCompile(`(?:^|\s)level=(DEBUG|INFO|WARN|ERROR)(?:[+-]\d+)?(?:\s|$)`)

// emit logs the buffered line and empties the buffer. A line a worker
// logged as JSON (slog's JSON handler: time, level, msg and attributes)
// is logged again with its own level, message and attributes; a line of
// slog's text handler with its level and whole as "line"; anything else
// at info, whole.
func (l *lineLogger) emit() {
	line := strings.TrimRight(string(l.buf), "\r")
	l.buf = l.buf[:0]
	if strings.TrimSpace(line) == "" {
		return
	}
	attrs := []slog.Attr{slog.String("worker", l.worker), slog.String("stream", l.stream)}
	level, msg := slog.LevelInfo, "worker output"
	var rec map[string]any
	if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &rec) == nil {
		if s, ok := rec["level"].(string); ok {
			_ = level.UnmarshalText([]byte(s))
		}
		if s, ok := rec["msg"].(string); ok {
			msg = s
		}
		delete(rec, "time")
		delete(rec, "level")
		delete(rec, "msg")
		for _, k := range sortedKeys(rec) {
			if k == "worker" || k == "stream" {
				continue // said already: the supervisor knows its worker's name
			}
			attrs = append(attrs, slog.Any(k, rec[k]))
		}
	} else {
		if m := textLevel.FindStringSubmatch(line); m != nil {
			_ = level.UnmarshalText([]byte(m[1]))
		}
		attrs = append(attrs, slog.String("line", line))
	}
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	r := slog.NewRecord(time.Now(), level, msg, 0)
	r.AddAttrs(attrs...)
	_ = l.log.Handler().Handle(context.Background(), r)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
