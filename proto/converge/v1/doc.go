// Package convergev1 is the generated Go code of worker.proto, the worker
// protocol: the Control service (one bidirectional stream per worker),
// WorkerMessage and ControlMessage. Do not edit the .pb.go files; edit
// worker.proto and run `go generate ./proto/...`.
//
// Read first: ControlServer and ControlClient, WorkerMessage, ControlMessage,
// Task, Result. The control plane's side is package providers; workers use
// package providers/sdk.
package convergev1
