//go:build schedcheck

package scheduler

// A build with the schedcheck tag checks every node state transition
// (nodestate.go): go test -tags schedcheck ./cmd/converge runs the
// scenarios with it.
func init() { checkTransitions = true }
