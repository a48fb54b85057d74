package providers

import "syscall"

// sysProcAttr makes a worker receive SIGTERM when the control plane dies,
// even by SIGKILL, so no orphan keeps running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
