package view

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
	gitsync "github.com/convergehq/converge/sync"
)

// Progress renders the scheduler's progress: one line rewritten in place
// on a terminal, plain periodic lines otherwise.
type Progress struct {
	w        io.Writer
	tty      bool
	last     time.Time
	lastLine string
	printed  bool
	// moved is when the counts or the completed tasks last changed;
	// counts and completed are what they were.
	moved     time.Time
	counts    converge.Counts
	completed uint64
}

// stalledAfter is how long the counts must stand still before the line
// says "stalled" instead of a rate and an ETA.
const stalledAfter = 5 * time.Second

// NewProgress returns a Progress on w: one line rewritten in place when
// w is a terminal.
func NewProgress(w io.Writer) *Progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	// Plain lines start after the first interval: a short run prints only
	// its verdict.
	now := time.Now()
	return &Progress{w: w, tty: tty, last: now, moved: now}
}

// line renders s as of now: a rate and an ETA while the counts move;
// once neither they nor the completed tasks have moved for stalledAfter,
// "waiting on N running tasks for D" while tasks are out (a long
// composition), else "stalled for D".
func (p *Progress) line(s scheduler.Progress, now time.Time) string {
	c := s.Counts
	if c != p.counts || s.Completed != p.completed {
		p.counts, p.completed, p.moved = c, s.Completed, now
	}
	var b strings.Builder
	if gitsync.NotDurable(s) {
		// What the engine did since the last good commit is not
		// durable: none of it is shown as Ready.
		fmt.Fprintf(&b, "%d resources | state not durable, commit failing: %s", c.Total, s.CommitError)
		return b.String()
	}
	fmt.Fprintf(&b, "%d resources: %d Ready, %d Running, %d Pending, %d Failed", c.Total, c.Ready, c.Running, c.Pending, c.Failed)
	if c.Deleting > 0 {
		fmt.Fprintf(&b, ", %d Deleting", c.Deleting)
	}
	if still := now.Sub(p.moved); still >= stalledAfter && c.Ready < c.Total {
		switch s.Inflight {
		case 0:
			fmt.Fprintf(&b, " | stalled for %s", still.Round(time.Second))
		case 1:
			fmt.Fprintf(&b, " | waiting on 1 running task for %s", still.Round(time.Second))
		default:
			fmt.Fprintf(&b, " | waiting on %d running tasks for %s", s.Inflight, still.Round(time.Second))
		}
	} else if s.Rate > 0 {
		fmt.Fprintf(&b, " | %.0f/s", s.Rate)
		if left := c.Total - c.Ready; left > 0 {
			eta := time.Duration(float64(left) / s.Rate * float64(time.Second))
			fmt.Fprintf(&b, " | ETA %s", eta.Round(100*time.Millisecond))
		}
	}
	return b.String()
}

// Show renders s, at most every 100 ms on a terminal, every 2 s (and
// only when the line changed) otherwise.
func (p *Progress) Show(s scheduler.Progress) {
	now := time.Now()
	line := p.line(s, now)
	if p.tty {
		if now.Sub(p.last) < 100*time.Millisecond {
			return
		}
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.printed = true
	} else {
		if now.Sub(p.last) < 2*time.Second || line == p.lastLine {
			return
		}
		fmt.Fprintln(p.w, line)
	}
	p.last, p.lastLine = now, line
}

// Done ends the line rewritten in place, if one was printed.
func (p *Progress) Done() {
	if p.tty && p.printed {
		fmt.Fprintln(p.w)
	}
}
