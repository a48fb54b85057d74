// Command converge is the GitOps reconciler's CLI. It only wires the
// packages together; see docs/ARCHITECTURE.md.
package main

import "os"

func main() { os.Exit(Main()) }
