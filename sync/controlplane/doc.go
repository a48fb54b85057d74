// Package controlplane runs converge's control plane: what `converge
// sync` and `converge serve` keep running while they apply a repository,
// as a library that cmd/converge wires to its flags and output.
//
// Read first: Statuses (the status push: every verdict to its commit's
// git note, a forge's commit-status API and origin's notes ref).
package controlplane
