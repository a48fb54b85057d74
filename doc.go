// Package converge holds the domain types every other package of converge
// shares: Resource, Kind, Edge, ValueFlow, Phase, Revision, and the Task and
// Result a worker exchanges with the control plane. It imports nothing but
// the standard library; dependencies point inward, to it.
//
// Read first: Resource (a node of the graph and its phase), Edge (a
// dependency that may carry ValueFlows), Kind (one kind version's schemas
// and settings), Batch and Snapshot (the store's unit of change and load).
package converge
