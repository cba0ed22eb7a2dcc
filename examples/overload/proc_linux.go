package main

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal kills the server if this process dies first, so that
// an interrupted run leaves no server behind.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
