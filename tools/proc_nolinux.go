//go:build !linux

package tools

import "os/exec"

// sealEnviron does nothing outside Linux, which has no PR_SET_DUMPABLE
// (see proc_linux.go); elsewhere, keep the worker's secrets out of its
// environment if tools must not read them.
func sealEnviron() {}

// dieWithWorker does nothing outside Linux, which alone has
// PR_SET_PDEATHSIG: there a tool outlives a worker killed outright until
// it ends by itself or its timeout (its results are discarded by the
// version fence all the same).
func dieWithWorker(*exec.Cmd) {}
