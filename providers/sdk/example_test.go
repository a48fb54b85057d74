package sdk_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/convergehq/converge/providers/sdk"
)

// A complete worker main: one kind version with a reconcile and a
// teardown. The supervisor (or the operator) sets CONVERGE_ADDR and
// CONVERGE_TOKEN.
func ExampleServe() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := sdk.Serve(ctx, sdk.Provider{
		Kind: "vpc", Version: 1,
		Reconcile: func(ctx context.Context, r *sdk.Request) (any, error) {
			var spec struct {
				CIDR string `json:"cidr"`
			}
			if err := r.DecodeSpec(&spec); err != nil {
				return nil, err // already Permanent: the spec will not decode on retry
			}
			if spec.CIDR == "" {
				return nil, sdk.Permanent(errors.New("spec.cidr: required"))
			}
			return map[string]string{"vpc_id": "vpc-" + r.UID}, nil
		},
		Teardown: func(ctx context.Context, r *sdk.Request) error { return nil },
	})
	if err != nil {
		log.Fatal(err)
	}
}
