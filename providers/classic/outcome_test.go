package classic

import (
	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/sdk"
)

// isPermanent and isTransient classify a non-nil error the way the SDK
// reports it to the control plane.
func isPermanent(err error) bool {
	return err != nil && sdk.OutcomeOf(err) == converge.OutcomePermanent
}

func isTransient(err error) bool {
	return err != nil && sdk.OutcomeOf(err) == converge.OutcomeTransient
}
