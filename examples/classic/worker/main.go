// Command worker serves the classic example's providers (classicbom,
// account, vpc v1 and v2, tgw, route, statussink) to a converge control
// plane. It reads CONVERGE_ADDR, CONVERGE_TOKEN and CONVERGE_WORKER_NAME,
// and the chaos knobs FAKE_FAULT_RATE, FAKE_WORK_DELAY, FAKE_DELETE_DELAY
// and FAKE_TEARDOWN_FAIL, from the environment. The providers themselves
// are package providers/classic: read that first.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/convergehq/converge/providers/classic"
	"github.com/convergehq/converge/providers/sdk"
)

func main() {
	opts, err := classic.OptionsFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "classic worker:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := sdk.Serve(ctx, classic.Providers(opts)...); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "classic worker:", err)
		os.Exit(1)
	}
}
