package main

import (
	"errors"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
)

func newEventsCommand(g *globals) *cobra.Command {
	var output string
	var limit int
	c := &cobra.Command{
		Use:   "events [KIND/NAME]",
		Short: "Show the event history, of one resource or of all, oldest first",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			var id converge.ID
			if len(args) == 1 {
				var err error
				if id, err = converge.ParseID(args[0]); err != nil {
					return err
				}
			}
			rd, done, err := openReader(g, c.ErrOrStderr())
			if err != nil {
				return err
			}
			defer done()
			evs, err := rd.Events(id, limit)
			if err != nil {
				return err
			}
			if id != "" && len(evs) == 0 {
				// A deleted resource keeps its events; one with neither
				// a row nor events does not exist.
				if _, err := rd.Resource(id); errors.Is(err, converge.ErrNotFound) {
					return notFound(rd, id)
				}
			}
			type eventView struct {
				Time     time.Time   `json:"time"`
				Resource converge.ID `json:"resource"`
				Type     string      `json:"type"`
				Message  string      `json:"message"`
			}
			views := make([]eventView, len(evs))
			for i, e := range evs {
				views[i] = eventView{e.Time, e.Resource, e.Type, e.Message}
			}
			if output != "table" {
				return writeData(c.OutOrStdout(), output, map[string]any{"events": views})
			}
			rows := [][]string{{"TIME", "AGE", "RESOURCE", "TYPE", "MESSAGE"}}
			now := time.Now()
			for _, e := range views {
				rows = append(rows, []string{e.Time.Local().Format("2006-01-02 15:04:05.000"), age(now.Sub(e.Time)),
					string(e.Resource), e.Type, e.Message})
			}
			return table(c.OutOrStdout(), rows)
		},
	}
	c.Flags().IntVar(&limit, "limit", 0, "only the newest N events (0: all kept)")
	addOutputFlag(c, &output, "table")
	return c
}

// age renders how long ago something happened the way kubectl does, in
// its largest one or two units: 45s, 3m12s, 5h4m, 2d3h.
func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return strconv.FormatInt(s, 10) + "s"
	case s < 3600:
		return two(s/60, "m", s%60, "s")
	case s < 86400:
		return two(s/3600, "h", s%3600/60, "m")
	default:
		return two(s/86400, "d", s%86400/3600, "h")
	}
}

func two(a int64, ua string, b int64, ub string) string {
	out := strconv.FormatInt(a, 10) + ua
	if b > 0 {
		out += strconv.FormatInt(b, 10) + ub
	}
	return out
}
