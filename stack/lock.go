package stack

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockFile is the file in an embedded Redis's data directory whose
// exclusive flock says that a redis-server runs there.
const lockFile = "spool.lock"

// orphanPatience is how long a redis-server whose spool process died is
// given to stop, after a SIGTERM, before it is killed (and then again
// before lockDir gives up).
const orphanPatience = 10 * time.Second

// dirLock is the exclusive lock on an embedded Redis's data directory. It
// is taken by the spool process that starts the redis-server and handed
// to that server as its file descriptor 3, so the kernel keeps it while
// either process lives, whichever goes first: no second redis-server can
// start on the same AOF files while one still runs there, even one whose
// spool process was killed. The file holds its owner (lockOwner).
type dirLock struct {
	f    *os.File
	path string
}

// lockOwner is what the lock file says of its holder.
type lockOwner struct {
	PID      int    `json:"pid"`                 // the spool process
	RedisPID int    `json:"redis_pid,omitempty"` // its redis-server
	URL      string `json:"url,omitempty"`
}

// lockDir takes the lock of the embedded Redis's data directory dir. A
// live spool process holding it is a refusal (it uses dir). A holder
// whose spool process is gone is its orphaned redis-server (its parent's
// death signal should already be stopping it): lockDir stops it
// (SIGTERM, then SIGKILL) and takes the lock. Once locked, a
// redis-server still serving dir without the lock (started by a spool
// that predates the lock's hand-over) is stopped too.
func lockDir(dir string, log *slog.Logger) (*dirLock, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("embedded redis: %w", err)
	}
	l := &dirLock{f: f, path: path}
	var orphan orphanStop
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("embedded redis: lock %s: %w", path, err)
		}
		owner := readOwner(path)
		if owner.PID == 0 || processAlive(owner.PID) {
			_ = f.Close()
			by := "another spool process"
			if owner.PID != 0 {
				by = fmt.Sprintf("another spool process, pid %d", owner.PID)
			}
			return nil, fmt.Errorf("embedded redis: %s is in use by %s (spool dev, or a thread run --embedded); let it finish or stop it first", dir, by)
		}
		// Its spool process is gone: the holder is the redis-server it
		// left (or that server's AOF-rewrite child, which ends with it).
		if err := orphan.step(owner, dir, log); err != nil {
			_ = f.Close()
			return nil, err
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := l.setOwner(lockOwner{PID: os.Getpid()}); err != nil {
		l.release()
		return nil, err
	}
	stopStrays(dir, log)
	return l, nil
}

// orphanStop is lockDir's stopping of the orphaned redis-server that
// holds the lock: the last signal sent, and until when it is given.
type orphanStop struct {
	signalled syscall.Signal
	deadline  time.Time
}

// step is one look at the orphaned holder of dir's lock, whose owner
// wrote the file: the first sends its redis-server SIGTERM, the first
// after orphanPatience SIGKILL, and the first after orphanPatience more
// gives up with an error. A server is only signalled while it still
// serves dir.
func (o *orphanStop) step(owner lockOwner, dir string, log *slog.Logger) error {
	now := time.Now()
	switch {
	case o.signalled == 0:
		o.signalled, o.deadline = syscall.SIGTERM, now.Add(orphanPatience)
		if isRedisOn(owner.RedisPID, dir) {
			log.Warn("embedded redis: stopping the redis-server left running by a spool process that exited",
				"pid", owner.RedisPID, "spool_pid", owner.PID, "data_dir", dir)
			_ = syscall.Kill(owner.RedisPID, syscall.SIGTERM)
		}
	case now.After(o.deadline) && o.signalled == syscall.SIGTERM:
		o.signalled, o.deadline = syscall.SIGKILL, now.Add(orphanPatience)
		if isRedisOn(owner.RedisPID, dir) {
			_ = syscall.Kill(owner.RedisPID, syscall.SIGKILL)
		}
	case now.After(o.deadline):
		held := "a process"
		if owner.RedisPID != 0 {
			held = fmt.Sprintf("redis-server (pid %d)", owner.RedisPID)
		}
		return fmt.Errorf("embedded redis: %s is still held by %s, left by spool process %d, which exited; stop it, then try again", dir, held, owner.PID)
	}
	return nil
}

// setOwner records o in the lock file.
func (l *dirLock) setOwner(o lockOwner) error {
	b, _ := json.Marshal(o)
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("embedded redis: %w", err)
	}
	if _, err := l.f.WriteAt(append(b, '\n'), 0); err != nil {
		return fmt.Errorf("embedded redis: %w", err)
	}
	return nil
}

// release lets go of this process's hold on the lock: it is free once the
// redis-server that inherited it has exited too.
func (l *dirLock) release() { _ = l.f.Close() }

// readOwner reads the lock file at path; a zero lockOwner when it says
// nothing readable.
func readOwner(path string) lockOwner {
	var o lockOwner
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &o)
	}
	return o
}

// processAlive reports whether a process with this pid exists and has not
// exited (a zombie, not yet reaped by its parent, has).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return (err == nil || errors.Is(err, syscall.EPERM)) && !isZombie(pid)
}

// stopStrays stops the redis-servers that serve dir although no spool
// process holds its lock (see lockDir): a second server on the same AOF
// files would split them. SIGTERM lets each write its AOF out; one still
// running after orphanPatience is killed.
func stopStrays(dir string, log *slog.Logger) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		pids := redisServersOn(dir)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			if sig == syscall.SIGTERM {
				log.Warn("embedded redis: stopping a redis-server that serves the data dir without its spool process", "pid", pid, "data_dir", dir)
			}
			_ = syscall.Kill(pid, sig)
		}
		for deadline := time.Now().Add(orphanPatience); len(redisServersOn(dir)) > 0 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
	}
}
