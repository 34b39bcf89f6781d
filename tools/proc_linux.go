package tools

import (
	"sync"

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
