package state_test

import (
	"testing"

	"github.com/convergehq/converge/state/statetest"
)

// TestConformance runs the suite every state backend passes against
// bbolt; state/etcdstate runs the same suite against etcd.
func TestConformance(t *testing.T) { statetest.Run(t, statetest.Bolt) }
