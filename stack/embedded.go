package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Embedded is a Redis server started by this process for zero-setup runs.
type Embedded struct {
	URL        string
	Persistent bool // false for miniredis: nothing survives the process
	stop       func()
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
func StartEmbedded(dataDir string, log *slog.Logger) (*Embedded, error) {
	if bin, err := exec.LookPath("redis-server"); err == nil {
		dir := filepath.Join(dataDir, "redis")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("embedded redis: %w", err)
		}
		unlock, err := lockDir(dir)
		if err != nil {
			return nil, err
		}
		port, err := FreePort()
		if err != nil {
			unlock()
			return nil, err
		}
		cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", dir,
			"--appendonly", "yes", "--save", "", "--protected-mode", "yes")
		// Its own process group: a Ctrl-C in the terminal reaches spool,
		// which stops Redis last, after the worker has checkpointed.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			unlock()
			return nil, fmt.Errorf("embedded redis: start %s: %w", bin, err)
		}
		url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
		e := &Embedded{URL: url, Persistent: true, stop: func() {
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			unlock()
		}}
		if err := WaitRedis(url, 10*time.Second); err != nil {
			e.Stop()
			return nil, fmt.Errorf("embedded redis: %w", err)
		}
		log.Info("embedded redis-server started", "addr", url, "data_dir", dir)
		return e, nil
	}
	m, stop, err := StartMiniredis()
	if err != nil {
		return nil, err
	}
	log.Warn("no redis-server on PATH: using in-process miniredis; nothing is kept after this process exits")
	return &Embedded{URL: "redis://" + m.Addr() + "/0", stop: stop}, nil
}

// lockDir takes an exclusive lock on the embedded Redis's data directory
// for as long as its server runs: a second redis-server on the same AOF
// files would split (or corrupt) the data. The kernel drops the lock of a
// process that dies.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, "spool.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("embedded redis: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("embedded redis: %s is in use by another spool process (spool dev, or a thread run --embedded); let it finish or stop it first", dir)
		}
		return nil, fmt.Errorf("embedded redis: lock %s: %w", dir, err)
	}
	return func() { _ = f.Close() }, nil
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
