//go:build !linux

package tools

// sealEnviron does nothing outside Linux, which has no PR_SET_DUMPABLE
// (see proc_linux.go); elsewhere, keep the worker's secrets out of its
// environment if tools must not read them.
func sealEnviron() {}
