//go:build !unix

package tools

import (
	"os"
	"os/exec"
)

// setProcGroup does nothing where there are no POSIX process groups: a
// timeout then kills only the tool's own process, not what it started.
func setProcGroup(cmd *exec.Cmd) {}

// killGroup kills the process itself (no process groups here).
func killGroup(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	_ = p.Kill()
	return nil
}

func isTextBusy(err error) bool { return false }
