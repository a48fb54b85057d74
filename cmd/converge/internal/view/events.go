package view

import (
	"context"
	"encoding/json"
	"fmt"
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

// watchEvery is how often WatchEvents asks for new events.
const watchEvery = 300 * time.Millisecond

// watchPage is how many of the newest events one poll of WatchEvents reads:
// more new ones than this between two polls are counted, not shown.
const watchPage = 2000

// WatchEvents prints shown, then every newer event of id ("" for all)
// until ctx ends (Ctrl+C: no error): a table, or with jsonLines one JSON
// object a line. Each poll is read(ctx, limit), the newest limit events
// of id: events --watch opens the state afresh for each, as the read
// commands do (the store itself, read and closed again so a sync may take
// it meanwhile, or the admin API of the converge holding it). A poll that
// cannot read says so once on errOut and tries again.
func WatchEvents(ctx context.Context, w, errOut io.Writer, read func(ctx context.Context, limit int) ([]converge.Event, error), id converge.ID, shown []converge.Event, jsonLines bool) error {
	print := func(evs []converge.Event, head bool) error {
		if !jsonLines {
			return EventTable(w, evs, head)
		}
		for _, e := range evs {
			b, err := json.Marshal(EventOf(e))
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
	} else if evs, err := read(ctx, 1); err == nil && len(evs) > 0 {
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
		evs, err := read(ctx, watchPage)
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted while it read: no poll failed
			}
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
