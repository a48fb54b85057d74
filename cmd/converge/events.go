package main

import (
	"context"
	"errors"
	"io"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/view"
)

func newEventsCommand(g *globals) *cobra.Command {
	var output string
	var limit int
	var watch bool
	c := &cobra.Command{
		Use:   "events [KIND/NAME]",
		Short: "Show the event history, of one resource or of all, oldest first (--watch: then follow new ones)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			if watch && output == "yaml" {
				return usageErr("--watch prints a table, or with -o json one JSON object per line")
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
			evs, err := rd.Events(ctx, id, limit)
			if err == nil && id != "" && len(evs) == 0 {
				// A deleted resource keeps its events; one with neither
				// a row nor events does not exist.
				if _, rerr := rd.Resource(ctx, id); errors.Is(rerr, converge.ErrNotFound) {
					err = notFound(ctx, rd, id)
				}
			}
			done() // --watch must not keep the store locked between polls
			if err != nil {
				return err
			}
			views := make([]view.Event, len(evs))
			for i, e := range evs {
				views[i] = view.EventOf(e)
			}
			w := c.OutOrStdout()
			if watch {
				read := func(ctx context.Context, limit int) ([]converge.Event, error) { return readEvents(ctx, g, id, limit) }
				return view.WatchEvents(c.Context(), w, c.ErrOrStderr(), read, id, evs, output == "json")
			}
			if output != "table" {
				return view.WriteData(w, output, map[string]any{"events": views})
			}
			return view.EventTable(w, evs, true)
		},
	}
	c.Flags().IntVar(&limit, "limit", 0, "only the newest N events (0: all kept)")
	c.Flags().BoolVarP(&watch, "watch", "w", false, "then follow new events until interrupted (Ctrl+C); -o json: one JSON object per line")
	addOutputFlag(c, &output, "table")
	return c
}

// readEvents opens the state, reads the newest limit events of id and
// closes it again.
func readEvents(ctx context.Context, g *globals, id converge.ID, limit int) ([]converge.Event, error) {
	rd, done, err := openReader(g, io.Discard)
	if err != nil {
		return nil, err
	}
	defer done()
	return rd.Events(ctx, id, limit)
}
