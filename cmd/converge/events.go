package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/view"
)

// watchEvery is how often events --watch asks for new events.
const watchEvery = 300 * time.Millisecond

// watchPage is how many of the newest events one poll of --watch reads:
// more new ones than this between two polls are counted, not shown.
const watchPage = 2000

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
				return watchEvents(c.Context(), g, w, c.ErrOrStderr(), id, evs, output == "json")
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

// watchEvents prints shown, then every newer event of id ("" for all)
// until ctx ends (Ctrl+C: no error). Each poll opens the state afresh,
// as the read commands do: the store itself, read and closed again so a
// sync may take it meanwhile, or the admin API of the converge holding
// it. A poll that cannot read says so once on errOut and tries again.
func watchEvents(ctx context.Context, g *globals, w, errOut io.Writer, id converge.ID, shown []converge.Event, jsonLines bool) error {
	print := func(evs []converge.Event, head bool) error {
		if !jsonLines {
			return view.EventTable(w, evs, head)
		}
		for _, e := range evs {
			b, err := json.Marshal(view.EventOf(e))
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
				return err
			}
		}
		return nil
	}
	if err := print(shown, true); err != nil {
		return err
	}
	var last uint64
	if len(shown) > 0 {
		last = shown[len(shown)-1].Seq
	} else if evs, err := readEvents(ctx, g, id, 1); err == nil && len(evs) > 0 {
		last = evs[0].Seq // none shown (--limit): follow from now
	}
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	var failing string
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		evs, err := readEvents(ctx, g, id, watchPage)
		if err != nil {
			if err.Error() != failing {
				fmt.Fprintf(errOut, "converge: events --watch: %v (trying again)\n", err)
				failing = err.Error()
			}
			continue
		}
		failing = ""
		var fresh []converge.Event
		for _, e := range evs {
			if e.Seq > last {
				fresh = append(fresh, e)
			}
		}
		if len(fresh) == 0 {
			continue
		}
		if id == "" && fresh[0].Seq > last+1 && last > 0 {
			fmt.Fprintf(errOut, "converge: events --watch: %d events came faster than shown, skipped\n", fresh[0].Seq-last-1)
		}
		if err := print(fresh, false); err != nil {
			return err
		}
		last = fresh[len(fresh)-1].Seq
	}
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
