package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
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
			views := make([]eventView, len(evs))
			for i, e := range evs {
				views[i] = eventView{e.Time, e.Resource, e.Type, e.Message}
			}
			w := c.OutOrStdout()
			if watch {
				return watchEvents(c.Context(), g, w, c.ErrOrStderr(), id, evs, output == "json")
			}
			if output != "table" {
				return writeData(w, output, map[string]any{"events": views})
			}
			return eventTable(w, evs, true)
		},
	}
	c.Flags().IntVar(&limit, "limit", 0, "only the newest N events (0: all kept)")
	c.Flags().BoolVarP(&watch, "watch", "w", false, "then follow new events until interrupted (Ctrl+C); -o json: one JSON object per line")
	addOutputFlag(c, &output, "table")
	return c
}

// eventTable writes evs as rows, with the header when head.
func eventTable(w io.Writer, evs []converge.Event, head bool) error {
	var rows [][]string
	if head {
		rows = append(rows, []string{"TIME", "AGE", "RESOURCE", "TYPE", "MESSAGE"})
	}
	now := time.Now()
	for _, e := range evs {
		rows = append(rows, []string{e.Time.Local().Format("2006-01-02 15:04:05.000"), age(now.Sub(e.Time)),
			string(e.Resource), e.Type, e.Message})
	}
	return table(w, rows)
}

// watchEvents prints shown, then every newer event of id ("" for all)
// until ctx ends (Ctrl+C: no error). Each poll opens the state afresh,
// as the read commands do: the store itself, read and closed again so a
// sync may take it meanwhile, or the admin API of the converge holding
// it. A poll that cannot read says so once on errOut and tries again.
func watchEvents(ctx context.Context, g *globals, w, errOut io.Writer, id converge.ID, shown []converge.Event, jsonLines bool) error {
	print := func(evs []converge.Event, head bool) error {
		if !jsonLines {
			return eventTable(w, evs, head)
		}
		for _, e := range evs {
			b, err := json.Marshal(eventView{e.Time, e.Resource, e.Type, e.Message})
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
