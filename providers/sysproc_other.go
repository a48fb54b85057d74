//go:build !linux

package providers

import "syscall"

// sysProcAttr: outside Linux there is no parent-death signal; an orphaned
// worker exits when its token is refused by the next control plane.
func sysProcAttr() *syscall.SysProcAttr { return nil }
