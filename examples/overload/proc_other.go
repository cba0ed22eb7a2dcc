//go:build !linux

package main

import "os/exec"

// setParentDeathSignal does nothing here: only Linux has a parent-death
// signal; the servers are stopped when the run ends or is interrupted.
func setParentDeathSignal(*exec.Cmd) {}
