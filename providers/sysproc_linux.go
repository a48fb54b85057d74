package providers

import (
	"os"
	"syscall"
)

// sysProcAttr makes a worker receive SIGTERM when the control plane dies,
// even by SIGKILL, so no orphan keeps running, and puts it in a process
// group of its own: a worker started through a launcher (`go run
// ./worker`, a shell script) has children the launcher does not stop, and
// they would keep the worker's output pipes (and the control plane's
// wait) open.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
}

// signalGroup sends sig to p's process group (sysProcAttr made p its
// leader), so the worker's children get it too.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	return syscall.Kill(-p.Pid, sig)
}
