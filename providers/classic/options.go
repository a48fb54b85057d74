package classic

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/convergehq/converge/providers/sdk"
)

// Options are the chaos knobs of the fake providers. The zero value is a
// well-behaved provider set: no faults, no delays.
type Options struct {
	// FaultRate (0..1) is the probability that one account, vpc, tgw or
	// route reconcile fails with a transient "injected fault".
	FaultRate float64
	// WorkDelay is slept (context-aware) in each leaf reconcile.
	WorkDelay time.Duration
	// DeleteDelay is slept (context-aware) in each teardown.
	DeleteDelay time.Duration
	// TeardownFail is a KIND/NAME glob (path.Match syntax, e.g.
	// "account/*"); a teardown of a matching resource always fails
	// transiently. Empty matches nothing.
	TeardownFail string
	// BadStatus is a KIND/NAME glob; a reconcile of a matching leaf
	// succeeds with a status its kind's schema rejects
	// ({"<kind>_id": "NOT-AN-ID", "bogus": 1}): a broken worker, to show
	// that the control plane refuses what a worker must not report.
	BadStatus string
	// StateDir is the worker's own directory: statussink's bucket_dir
	// is a directory inside it, and nothing is written outside it.
	// Empty means the working directory.
	StateDir string
	// Rand drives fault injection; nil means a randomly seeded source.
	// Providers guards it with a mutex, so it need not be safe for
	// concurrent use.
	Rand *rand.Rand
}

// The environment variables OptionsFromEnv reads.
const (
	EnvFaultRate    = "FAKE_FAULT_RATE"
	EnvWorkDelay    = "FAKE_WORK_DELAY"
	EnvDeleteDelay  = "FAKE_DELETE_DELAY"
	EnvTeardownFail = "FAKE_TEARDOWN_FAIL"
	EnvBadStatus    = "FAKE_BAD_STATUS"
	EnvStateDir     = "CONVERGE_STATE_DIR"
)

// ErrInjectedFault is returned (wrapped in sdk.Transient) when a reconcile
// or teardown fails because the chaos knobs said so.
var ErrInjectedFault = errors.New("injected fault")

// OptionsFromEnv reads FAKE_FAULT_RATE (0..1), FAKE_WORK_DELAY and
// FAKE_DELETE_DELAY (Go durations such as "2s", default 0),
// FAKE_TEARDOWN_FAIL and FAKE_BAD_STATUS (KIND/NAME globs) and
// CONVERGE_STATE_DIR. A bad value
// is an error naming the variable.
func OptionsFromEnv() (Options, error) {
	var o Options
	if v := os.Getenv(EnvFaultRate); v != "" {
		p, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(p) || p < 0 || p > 1 {
			return Options{}, fmt.Errorf("%s=%q: want a number from 0 to 1", EnvFaultRate, v)
		}
		o.FaultRate = p
	}
	var err error
	if o.WorkDelay, err = durationEnv(EnvWorkDelay); err != nil {
		return Options{}, err
	}
	if o.DeleteDelay, err = durationEnv(EnvDeleteDelay); err != nil {
		return Options{}, err
	}
	if o.TeardownFail, err = globEnv(EnvTeardownFail); err != nil {
		return Options{}, err
	}
	if o.BadStatus, err = globEnv(EnvBadStatus); err != nil {
		return Options{}, err
	}
	o.StateDir = os.Getenv(EnvStateDir)
	return o, nil
}

func globEnv(name string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", nil
	}
	if _, err := path.Match(v, ""); err != nil || !strings.Contains(v, "/") {
		return "", fmt.Errorf("%s=%q: want a KIND/NAME glob such as account/*", name, v)
	}
	return v, nil
}

func durationEnv(name string) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a non-negative duration such as 2s", name, v)
	}
	return d, nil
}

// chaos applies Options to reactions. It is shared by every provider of one
// Providers call.
type chaos struct {
	o  Options
	mu sync.Mutex // guards rnd
	// rnd decides injected faults.
	rnd *rand.Rand
}

func newChaos(o Options) *chaos {
	r := o.Rand
	if r == nil {
		r = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return &chaos{o: o, rnd: r}
}

// fault reports whether this call should fail: true with probability
// FaultRate.
func (c *chaos) fault() bool {
	if c.o.FaultRate <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rnd.Float64() < c.o.FaultRate
}

// work runs the leaf-reconcile knobs: WorkDelay, then a fault roll.
func (c *chaos) work(ctx context.Context, r *sdk.Request) error {
	if err := sleep(ctx, c.o.WorkDelay); err != nil {
		return sdk.Transient(fmt.Errorf("work delay: %w", err))
	}
	if c.fault() {
		return sdk.Transient(fmt.Errorf("reconcile %s/%s: %w", r.Kind, r.Name, ErrInjectedFault))
	}
	return nil
}

// reconcile wraps a leaf's reconcile with the BadStatus knob.
func (c *chaos) reconcile(f func(context.Context, *sdk.Request) (any, error)) func(context.Context, *sdk.Request) (any, error) {
	return func(ctx context.Context, r *sdk.Request) (any, error) {
		if c.o.BadStatus != "" {
			if ok, _ := path.Match(c.o.BadStatus, r.Kind+"/"+r.Name); ok {
				return map[string]any{r.Kind + "_id": "NOT-AN-ID", "bogus": 1}, nil
			}
		}
		return f(ctx, r)
	}
}

// teardown is every kind's teardown: it sleeps DeleteDelay and fails
// transiently when TeardownFail matches. Deleting a fake resource twice is
// harmless, so it is idempotent.
func (c *chaos) teardown(ctx context.Context, r *sdk.Request) error {
	if err := sleep(ctx, c.o.DeleteDelay); err != nil {
		return sdk.Transient(fmt.Errorf("delete delay: %w", err))
	}
	if c.o.TeardownFail != "" {
		if ok, _ := path.Match(c.o.TeardownFail, r.Kind+"/"+r.Name); ok {
			return sdk.Transient(fmt.Errorf("teardown %s/%s: %w (%s=%s)", r.Kind, r.Name, ErrInjectedFault, EnvTeardownFail, c.o.TeardownFail))
		}
	}
	return nil
}

// sleep waits d or until ctx is done, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
