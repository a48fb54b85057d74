//go:build !linux

package providers

import (
	"os"
	"syscall"
)

// sysProcAttr: outside Linux there is no parent-death signal; an orphaned
// worker exits when its token is refused by the next control plane.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// signalGroup signals p alone: without a process group of its own, a
// launcher's children are not reached (cmd.WaitDelay bounds the wait for
// their output).
func signalGroup(p *os.Process, sig syscall.Signal) error { return p.Signal(sig) }
