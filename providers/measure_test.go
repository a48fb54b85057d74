package providers_test

import (
	"context"
	"testing"
	"time"

	"github.com/convergehq/converge/providers"
)

func TestMeasureTransport(t *testing.T) {
	for _, inflight := range []int{1, 64} {
		r, err := providers.MeasureTransport(context.Background(), inflight, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("in flight %d: raw %.0f rt/s, dispatch %.0f rt/s, ratio %.2f", r.InFlight, r.RawUnary, r.Dispatch, r.Ratio())
		// Even a loaded 2-core machine does far more than 100 of each.
		if r.RawUnary < 100 || r.Dispatch < 100 || r.InFlight != inflight {
			t.Errorf("rates = %+v, want both well above 100/s", r)
		}
	}
}
