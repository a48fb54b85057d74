package view

import (
	"fmt"
	"io"

	"github.com/convergehq/converge"
)

// Statuses is `converge status -o json`.
type Statuses struct {
	Revision string                  `json:"revision"`
	Statuses []converge.CommitStatus `json:"statuses"`
	// Pin is the revision sync and serve apply instead of the branch
	// head (converge rollback), if one is pinned.
	Pin *converge.Pin `json:"pin,omitempty"`
}

// WriteStatuses prints v as -o asks: a table, or JSON/YAML.
func WriteStatuses(w io.Writer, output string, v Statuses) error {
	if output != "table" {
		return WriteData(w, output, v)
	}
	return writeStatusTable(w, v)
}

func writeStatusTable(w io.Writer, v Statuses) error {
	fmt.Fprintf(w, "revision %s\n", v.Revision)
	if p := v.Pin; p != nil {
		fmt.Fprintf(w, "pinned %s by %s at %s: sync and serve apply it instead of the branch head until converge unpin\n",
			p.Revision, OrDash(p.By), p.At.UTC().Format("2006-01-02T15:04:05Z"))
	}
	rows := [][]string{{"CONTEXT", "STATE", "DESCRIPTION", "TIME"}}
	for _, s := range v.Statuses {
		at := "-"
		if !s.Time.IsZero() {
			at = s.Time.UTC().Format("2006-01-02T15:04:05Z")
		}
		rows = append(rows, []string{s.Context, s.State, OrDash(s.Description), at})
	}
	return Table(w, rows)
}
