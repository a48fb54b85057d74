package main

import (
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
			rows := [][]string{{"TIME", "RESOURCE", "TYPE", "MESSAGE"}}
			for _, e := range views {
				rows = append(rows, []string{e.Time.Format("15:04:05.000"), string(e.Resource), e.Type, e.Message})
			}
			return table(c.OutOrStdout(), rows)
		},
	}
	c.Flags().IntVar(&limit, "limit", 0, "only the newest N events (0: all kept)")
	addOutputFlag(c, &output, "table")
	return c
}
