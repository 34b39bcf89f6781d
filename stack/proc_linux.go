//go:build linux

package stack

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// tieToParent has the kernel send the child SIGTERM when the thread that
// started it exits (PR_SET_PDEATHSIG): with startTied, when the spool
// process dies, however it dies (SIGKILL, the OOM killer, SIGPIPE, a
// SIGHUP it did not catch). SIGTERM lets a redis-server write its AOF
// out before it exits.
func tieToParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGTERM }

// redisServersOn returns the redis-servers serving dir: a redis-server
// started with --dir works in that directory.
func redisServersOn(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && isRedisOn(pid, dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// isRedisOn reports whether process pid is a redis-server working in dir
// (a zombie has no working directory).
func isRedisOn(pid int, dir string) bool {
	if pid <= 0 {
		return false
	}
	proc := "/proc/" + strconv.Itoa(pid)
	if cwd, err := os.Readlink(proc + "/cwd"); err != nil || cwd != dir {
		return false
	}
	if comm, err := os.ReadFile(proc + "/comm"); err == nil && strings.TrimSpace(string(comm)) == "redis-server" {
		return true
	}
	exe, err := os.Readlink(proc + "/exe")
	return err == nil && filepath.Base(exe) == "redis-server"
}

// isZombie reports whether process pid has exited and waits for its
// parent to reap it.
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}
