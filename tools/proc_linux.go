package tools

import (
	"os/exec"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

var sealOnce sync.Once

// sealEnviron makes this process non-dumpable before its first external
// tool runs: /proc/<pid>/environ, /proc/<pid>/mem and ptrace then refuse
// other processes of the same user, so a tool cannot read the worker's
// environment (its Redis URL, S3 credentials, provider keys) through its
// parent's /proc entry. The tools themselves are dumpable again after
// exec. A failure only loses this defence, so it is not an error.
func sealEnviron() {
	sealOnce.Do(func() { _ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) })
}

// dieWithWorker has the kernel SIGKILL the tool's process when the thread
// that started it exits (PR_SET_PDEATHSIG): a worker killed outright (the
// OOM killer, a node lost, SIGKILL) takes its tools with it, so nothing
// it started goes on working after the activation's grant has lapsed and
// another worker took the run over. The signal follows the forking
// thread, not the process: the caller keeps its goroutine locked to its
// thread from the start to the end of the wait (runLocked).
func dieWithWorker(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
