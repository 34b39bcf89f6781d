package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// helperEnv makes the test binary a helper process (TestMain): it starts
// an embedded Redis on the data dir the variable names, prints the
// server's pid and URL, and waits to be killed.
const helperEnv = "STACK_TEST_EMBEDDED_HELPER"

func TestMain(m *testing.M) {
	if path := os.Getenv(devHelperEnv); path != "" {
		devHelper(path)
	}
	if dir := os.Getenv(helperEnv); dir != "" {
		e, err := StartEmbedded(dir, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Printf("%d %s\n", readOwner(filepath.Join(redisDir(dir), lockFile)).RedisPID, e.URL)
		select {}
	}
	os.Exit(m.Run())
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// needRedisServer skips a test without redis-server on PATH (fails it
// under SPOOL_TEST_REQUIRE_REAL=1).
func needRedisServer(t *testing.T) {
	t.Helper()
	if !HasRedisServer() {
		if os.Getenv("SPOOL_TEST_REQUIRE_REAL") == "1" {
			t.Fatal("SPOOL_TEST_REQUIRE_REAL=1 but no redis-server on PATH")
		}
		t.Skip("no redis-server on PATH")
	}
}

// redisDir is the embedded Redis's directory of data dir dir, as the
// kernel names it.
func redisDir(dir string) string {
	d := filepath.Join(dir, "redis")
	if resolved, err := filepath.EvalSymlinks(d); err == nil {
		return resolved
	}
	return d
}

// startHelper starts a helper process on data dir dir and returns it with
// its redis-server's pid and URL.
func startHelper(t *testing.T, dir string) (helper *exec.Cmd, redisPID int, url string) {
	t.Helper()
	helper = exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+dir)
	out, err := helper.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, helper.Start())
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })
	line := make([]byte, 200)
	n, err := out.Read(line)
	require.NoError(t, err)
	fields := strings.Fields(string(line[:n]))
	require.Len(t, fields, 2, "helper said %q", line[:n])
	redisPID, err = strconv.Atoi(fields[0])
	require.NoError(t, err, "helper said %q", line[:n])
	require.NotZero(t, redisPID)
	return helper, redisPID, fields[1]
}

// gone waits up to d for process pid to be gone (or a zombie).
func gone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// flockFree reports whether the lock file of data dir dir is free.
func flockFree(t *testing.T, dir string) bool {
	f, err := os.Open(filepath.Join(redisDir(dir), lockFile))
	require.NoError(t, err)
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false
	}
	require.NoError(t, err)
	return true
}

// TestLockDir: one embedded Redis per data directory; the lock is free
// again once its holder lets go.
func TestLockDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := lockDir(dir, discard)
	require.NoError(t, err)
	_, err = lockDir(dir, discard)
	require.EqualError(t, err, fmt.Sprintf("embedded redis: %s is in use by another spool process, pid %d (spool dev, or a thread run --embedded); let it finish or stop it first", dir, os.Getpid()))
	l.release()
	// A test beside this one that starts a process forks with the lock's
	// descriptor open, and the child holds the lock until its exec
	// closes it (close-on-exec): the lock is free a moment later.
	var again *dirLock
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		again, err = lockDir(dir, discard)
		require.NoError(c, err, "the lock was not released")
	}, 2*time.Second, 10*time.Millisecond)
	again.release()
}

// TestEmbeddedRedisDiesWithItsProcess: a spool process killed with
// SIGKILL (as the OOM killer does) takes its redis-server with it; after
// it the lock is free and a new server starts on the same data, whole.
func TestEmbeddedRedisDiesWithItsProcess(t *testing.T) {
	needRedisServer(t)
	t.Parallel()
	dir := t.TempDir()
	helper, redisPID, url := startHelper(t, dir)
	rdb, err := OpenRedis(url)
	require.NoError(t, err)
	require.NoError(t, rdb.Set(t.Context(), "k", "kept", 0).Err())
	_ = rdb.Close()

	require.NoError(t, helper.Process.Kill())
	_ = helper.Wait()
	require.True(t, gone(redisPID, 10*time.Second), "the redis-server outlived its spool process")
	// A test beside this one that forks holds the lock's descriptor until
	// its exec closes it (close-on-exec): the lock is free a moment later.
	require.Eventually(t, func() bool { return flockFree(t, dir) }, 2*time.Second, 10*time.Millisecond,
		"the lock outlived the redis-server")

	e, err := StartEmbedded(dir, discard)
	require.NoError(t, err)
	defer e.Stop()
	rdb, err = OpenRedis(e.URL)
	require.NoError(t, err)
	defer rdb.Close()
	require.Equal(t, "kept", rdb.Get(t.Context(), "k").Val(), "the AOF was written out at its death signal")
}

// TestRedisServerHoldsTheLock: the redis-server holds its data dir's lock
// itself: with the spool process's hold let go, the lock is still taken
// until the server exits.
func TestRedisServerHoldsTheLock(t *testing.T) {
	needRedisServer(t)
	t.Parallel()
	dir := t.TempDir()
	e, err := StartEmbedded(dir, discard)
	require.NoError(t, err)
	defer e.Stop()
	e.lock.release()
	require.False(t, flockFree(t, dir), "the redis-server does not hold the lock")
	pid := readOwner(filepath.Join(redisDir(dir), lockFile)).RedisPID
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(t, func() bool { return flockFree(t, dir) }, 10*time.Second, 20*time.Millisecond,
		"the lock outlived the redis-server")
}

// TestEmbeddedOutlivesTheThreadThatStartedIt: the death signal is tied to
// the spool process, not to the OS thread that asked for the server: a
// goroutine locked to its thread that returns (Go then ends the thread)
// leaves the server running. Two of them: Go never ends the main thread,
// which one of them may have run on.
func TestEmbeddedOutlivesTheThreadThatStartedIt(t *testing.T) {
	needRedisServer(t)
	t.Parallel()
	type started struct {
		e   *Embedded
		err error
	}
	ch := make(chan started)
	for range 2 {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			e, err := StartEmbedded(t.TempDir(), discard)
			ch <- started{e, err}
		}()
	}
	var servers []*Embedded
	for range 2 {
		s := <-ch
		require.NoError(t, s.err)
		defer s.e.Stop()
		servers = append(servers, s.e)
	}
	time.Sleep(500 * time.Millisecond)
	for _, e := range servers {
		require.NoError(t, WaitRedis(e.URL, time.Second), "the server died with the thread that started it")
	}
}

// TestLockDirStopsAnOrphan: a redis-server that holds the data dir's
// lock although the spool process that started it has died (where no
// death signal stopped it) is stopped by the next spool process on the
// data dir, which then takes the lock.
func TestLockDirStopsAnOrphan(t *testing.T) {
	needRedisServer(t)
	t.Parallel()
	dir := t.TempDir()
	rd := redisDir(dir)
	require.NoError(t, os.MkdirAll(rd, 0o755))
	rd = redisDir(dir)
	dead := exec.Command("true")
	require.NoError(t, dead.Run())

	// The orphan: a server holding the lock, its spool process dead.
	l, err := lockDir(rd, discard)
	require.NoError(t, err)
	port, err := FreePort()
	require.NoError(t, err)
	bin, _ := exec.LookPath("redis-server")
	orphan := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", rd, "--appendonly", "yes", "--save", "")
	orphan.ExtraFiles = []*os.File{l.f}
	require.NoError(t, orphan.Start())
	exited := make(chan struct{})
	go func() { _ = orphan.Wait(); close(exited) }()
	t.Cleanup(func() { _ = orphan.Process.Kill(); <-exited })
	require.NoError(t, l.setOwner(lockOwner{PID: dead.Process.Pid, RedisPID: orphan.Process.Pid}))
	l.release()
	require.NoError(t, WaitRedis(fmt.Sprintf("redis://127.0.0.1:%d/0", port), 10*time.Second))
	require.False(t, flockFree(t, dir))

	e, err := StartEmbedded(dir, discard)
	require.NoError(t, err)
	defer e.Stop()
	select {
	case <-exited:
	case <-time.After(time.Second):
		t.Fatal("the orphan still runs")
	}
	require.Len(t, redisServersOn(rd), 1)
}

// TestEmbeddedStopsAStray: a redis-server serving the data dir without its
// lock (left by a spool that did not hand the lock over) is stopped, with
// its AOF written out, before the embedded server starts there: never two
// servers on one directory.
func TestEmbeddedStopsAStray(t *testing.T) {
	needRedisServer(t)
	t.Parallel()
	dir := t.TempDir()
	rd := filepath.Join(dir, "redis")
	require.NoError(t, os.MkdirAll(rd, 0o755))
	port, err := FreePort()
	require.NoError(t, err)
	bin, _ := exec.LookPath("redis-server")
	stray := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", rd, "--appendonly", "yes", "--save", "")
	require.NoError(t, stray.Start())
	exited := make(chan struct{})
	go func() { _ = stray.Wait(); close(exited) }()
	t.Cleanup(func() { _ = stray.Process.Kill(); <-exited })
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	require.NoError(t, WaitRedis(url, 10*time.Second))
	rdb, err := OpenRedis(url)
	require.NoError(t, err)
	require.NoError(t, rdb.Set(t.Context(), "k", "kept", 0).Err())
	_ = rdb.Close()

	e, err := StartEmbedded(dir, discard)
	require.NoError(t, err)
	defer e.Stop()
	select {
	case <-exited:
	case <-time.After(time.Second):
		t.Fatal("the stray redis-server still runs")
	}
	pids := redisServersOn(redisDir(dir))
	require.Len(t, pids, 1)
	require.NotEqual(t, stray.Process.Pid, pids[0])
	rdb, err = OpenRedis(e.URL)
	require.NoError(t, err)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	require.Equal(t, "kept", rdb.Get(ctx, "k").Val())
}
