package view

import (
	"io"
	"time"

	"github.com/convergehq/converge"
)

// EventTable writes evs as rows, with the header when head.
func EventTable(w io.Writer, evs []converge.Event, head bool) error {
	var rows [][]string
	if head {
		rows = append(rows, []string{"TIME", "AGE", "RESOURCE", "TYPE", "MESSAGE"})
	}
	now := time.Now()
	for _, e := range evs {
		rows = append(rows, []string{e.Time.Local().Format("2006-01-02 15:04:05.000"), Age(now.Sub(e.Time)),
			string(e.Resource), e.Type, e.Message})
	}
	return Table(w, rows)
}
