//go:build unix

package tools

import (
	"errors"
	"os/exec"
	"syscall"
)

// setProcGroup starts the command in its own process group so that a timeout
// kills everything it started.
func setProcGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup sends SIGKILL to the process group led by pid. A group that is
// already gone is not an error.
func killGroup(pid int) error {
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// isTextBusy reports the ETXTBSY race of exec'ing a file that a concurrent
// fork still holds open for writing (golang/go#22315).
func isTextBusy(err error) bool { return errors.Is(err, syscall.ETXTBSY) }
