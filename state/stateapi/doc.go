// Package stateapi is the daemon's admin API: a small JSON-over-HTTP
// interface, served on a unix socket in the state directory, through which
// the read commands (get, list, tree, events) and the operator commands
// (delete, do) reach a running converge while it holds the store's lock.
//
// Read first: Handler (the server side, over a Reader and an optional
// Controller) and Client (which implements Reader itself).
package stateapi
