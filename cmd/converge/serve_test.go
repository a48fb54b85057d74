package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// serve stops the live site before it closes the store: stop must not
// return while the site's goroutine still runs.
func TestGoUntilStoppedWaits(t *testing.T) {
	var finished atomic.Bool
	stop := goUntilStopped(context.Background(), func(ctx context.Context) {
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // a last update of the site
		finished.Store(true)
	})
	stop()
	if !finished.Load() {
		t.Fatal("stop returned before the goroutine finished")
	}
}
