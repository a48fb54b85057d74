// Command converge is the GitOps reconciler's CLI: flags, output and
// wiring, one file per subcommand; the work is the library packages'
// (docs/ARCHITECTURE.md draws them). Read root.go first (Main, globals:
// the flags every command shares and the exit codes), then sync.go (the
// local sync: sync.Syncer and controlplane.Start, then the wait and the
// verdict) and serve.go (the daemon: controlplane's follow loop and
// replica terms, with their events printed as serve's lines). store.go
// opens a state for reading or writing; output.go holds the stable JSON
// views the read commands share.
package main

import "os"

func main() { os.Exit(Main()) }
