package stack

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Embedded is a Redis server started by this process for zero-setup runs.
type Embedded struct {
	URL        string
	Persistent bool // false for miniredis: nothing survives the process
	// Sealed is what the process that ran this data dir's redis-server
	// before left of it when it stopped it cleanly (Seal), or nil: taken
	// by this start, so that a later one, which would find the writes
	// made since, never finds it.
	Sealed []byte
	dir    string // redis-server's data directory; "" for miniredis
	stop   func()
	lock   *dirLock // redis-server's
}

// sealFile, in the redis-server's data directory, holds a Seal.
const sealFile = "clean-stop.json"

// Seal leaves b for the next start of this data dir's redis-server
// (Embedded.Sealed): what the caller, about to stop it cleanly with
// nothing of its own writing any more, saw of it last. A miniredis keeps
// nothing: no seal.
func (e *Embedded) Seal(b []byte) error {
	if e == nil || e.dir == "" {
		return nil
	}
	tmp := filepath.Join(e.dir, sealFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("embedded redis: seal: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(e.dir, sealFile)); err != nil {
		return fmt.Errorf("embedded redis: seal: %w", err)
	}
	return nil
}

// takeSeal reads and removes the seal of data directory dir (nil when
// there is none).
func takeSeal(dir string) ([]byte, error) {
	p := filepath.Join(dir, sealFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("embedded redis: read the seal: %w", err)
	}
	if err := os.Remove(p); err != nil {
		return nil, fmt.Errorf("embedded redis: take the seal: %w", err)
	}
	return b, nil
}

// Stop shuts the server down.
func (e *Embedded) Stop() {
	if e != nil && e.stop != nil {
		e.stop()
	}
}

// HasRedisServer says whether StartEmbedded finds a redis-server on PATH,
// whose data outlives the process (else it starts a miniredis).
func HasRedisServer() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// StartEmbedded starts a Redis for this process: a redis-server found on
// PATH, with its data (AOF) in dataDir/redis, or else an in-process miniredis
// that keeps nothing on disk (logged as a notice). miniredis's TTLs only
// count down when its clock is advanced, which asynq's leases need, so a
// goroutine fast-forwards it every 250ms.
//
// The redis-server dies with this process, however it ends (tieToParent,
// startTied), and holds its data directory's lock while it runs (dirLock):
// two never serve one directory.
func StartEmbedded(dataDir string, log *slog.Logger) (*Embedded, error) {
	if bin, err := exec.LookPath("redis-server"); err == nil {
		return startRedisServer(bin, filepath.Join(dataDir, "redis"), log)
	}
	m, stop, err := StartMiniredis()
	if err != nil {
		return nil, err
	}
	log.Warn("no redis-server on PATH: using in-process miniredis; nothing is kept after this process exits")
	return &Embedded{URL: "redis://" + m.Addr() + "/0", stop: stop}, nil
}

// startRedisServer runs bin on dir (see StartEmbedded).
func startRedisServer(bin, dir string, log *slog.Logger) (*Embedded, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded redis: %w", err)
	}
	// As the kernel names the server's working directory (isRedisOn).
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if resolved, err := filepath.EvalSymlinks(dir); err == nil {
		dir = resolved
	}
	lock, err := lockDir(dir, log)
	if err != nil {
		return nil, err
	}
	sealed, err := takeSeal(dir)
	if err != nil {
		lock.release()
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		lock.release()
		return nil, err
	}
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", dir,
		"--appendonly", "yes", "--save", "", "--protected-mode", "yes")
	// The server holds the lock too, as its fd 3, for as long as it runs.
	cmd.ExtraFiles = []*os.File{lock.f}
	// Its own process group: a Ctrl-C in the terminal reaches spool,
	// which stops Redis last, after the worker has checkpointed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	tieToParent(cmd.SysProcAttr)
	exited, err := startTied(cmd)
	if err != nil {
		lock.release()
		return nil, fmt.Errorf("embedded redis: start %s: %w", bin, err)
	}
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	var stopOnce sync.Once
	e := &Embedded{URL: url, Persistent: true, Sealed: sealed, dir: dir, lock: lock, stop: func() {
		stopOnce.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
			lock.release()
		})
	}}
	if err := lock.setOwner(lockOwner{PID: os.Getpid(), RedisPID: cmd.Process.Pid, URL: url}); err != nil {
		e.Stop()
		return nil, err
	}
	if err := waitStarted(url, cmd, exited, 10*time.Second); err != nil {
		e.Stop()
		return nil, fmt.Errorf("embedded redis: %w", err)
	}
	log.Info("embedded redis-server started", "addr", url, "data_dir", dir, "pid", cmd.Process.Pid)
	return e, nil
}

// startTied starts cmd from a goroutine locked to an OS thread of its own,
// which then waits for it; exited is closed once it has (its
// ProcessState then says how). PR_SET_PDEATHSIG
// (tieToParent) fires when the thread that forked the child exits, not
// the process: from any other thread, the child would be signalled when
// Go ends that thread (as it does when a goroutine locked to it returns).
// This thread lives until the child has exited.
func startTied(cmd *exec.Cmd) (exited <-chan struct{}, err error) {
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread ends with this goroutine, after the
		// child has exited (or failed to start).
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}

// waitStarted is WaitRedis that gives up as soon as the server exits (a
// port taken since FreePort, a bad AOF).
func waitStarted(url string, cmd *exec.Cmd, exited <-chan struct{}, d time.Duration) error {
	ready := make(chan error, 1)
	go func() { ready <- WaitRedis(url, d) }()
	select {
	case err := <-ready:
		return err
	case <-exited:
		return fmt.Errorf("redis-server exited: %s", cmd.ProcessState)
	}
}

// StartMiniredis starts an in-process miniredis on a loopback port whose
// TTLs count down: its clock only moves when told, and asynq's leases need
// it to, so a goroutine fast-forwards it every 250ms until stop.
func StartMiniredis() (m *miniredis.Miniredis, stop func(), err error) {
	m = miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, nil, fmt.Errorf("embedded miniredis: %w", err)
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return m, func() { close(done); m.Close() }, nil
}

// WaitRedis waits up to d for the Redis at url to answer PING.
func WaitRedis(url string, d time.Duration) error {
	c, err := OpenRedis(url)
	if err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready: %w", RedactURL(url), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
