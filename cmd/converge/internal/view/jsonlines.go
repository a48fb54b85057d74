package view

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	gosync "sync"
)

// JSONLines is the writer a daemon's report lines ("serve: … applied",
// "… converged") go through under --log-format json: each line becomes a
// JSON log record (msg the line, without its "serve: " prefix), so every
// line the daemon prints is JSON, as its logs are.
type JSONLines struct {
	mu  gosync.Mutex // guards buf, and serialises the records
	buf []byte
	log *slog.Logger
}

// NewJSONLines returns a JSONLines writing its records to w.
func NewJSONLines(w io.Writer) *JSONLines {
	return &JSONLines{log: slog.New(slog.NewJSONHandler(w, nil))}
}

// Write logs each whole line of p as a record, keeping a partial last
// line for the next Write.
func (j *JSONLines) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.buf = append(j.buf, p...)
	for {
		i := bytes.IndexByte(j.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := strings.TrimPrefix(string(j.buf[:i]), "serve: ")
		j.buf = j.buf[i+1:]
		if line != "" {
			j.log.Info(line, "source", "serve")
		}
	}
}
