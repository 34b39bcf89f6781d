package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/registry"
)

// redisServersOn returns the pids of the redis-servers serving dir (a
// redis-server started with --dir works in it).
func redisServersOn(t *testing.T, dir string) []int {
	t.Helper()
	if resolved, err := filepath.EvalSymlinks(dir); err == nil {
		dir = resolved
	}
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		cwd, _ := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if strings.TrimSpace(string(comm)) == "redis-server" && cwd == dir {
			pids = append(pids, pid)
		}
	}
	return pids
}

// orphanSetup is a project copied from examples/ with nothing configured
// (no SPOOL_ setting: the data dir's embedded redis-server), and the
// binary, for one test.
type orphanSetup struct {
	t       *testing.T
	bin     string
	project string
	env     []string
	// after is what the dev wrote after its banner (a test that fails
	// on it shows it).
	after syncBuffer
}

func newOrphanSetup(t *testing.T) *orphanSetup {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("finds redis-servers through /proc")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		if testenv.RequireReal() {
			t.Fatal("SPOOL_TEST_REQUIRE_REAL=1 but no redis-server on PATH")
		}
		t.Skip("no redis-server on PATH")
	}
	s := &orphanSetup{t: t, bin: spooltest.Binary(t), project: t.TempDir()}
	exampleProject(t, s.project)
	for path, content := range slowProject() {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(s.project, path)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(s.project, path), []byte(content), 0o644))
	}
	port, err := testenv.FreePort()
	require.NoError(t, err)
	s.env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GORACE=atexit_sleep_ms=0",
		fmt.Sprintf("SPOOL_DEV_ADDR=127.0.0.1:%d", port)}
	return s
}

// redisDir is the embedded Redis's directory in the project's data dir.
func (s *orphanSetup) redisDir() string { return filepath.Join(s.project, ".spool", "redis") }

// command is `spool --project P args...`.
func (s *orphanSetup) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, s.bin, append([]string{"--project", s.project}, args...)...)
	cmd.Env = s.env
	return cmd
}

// spool runs a command to its end.
func (s *orphanSetup) spool(args ...string) (code int, stdout, stderr string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), 2*time.Minute)
	defer cancel()
	cmd := s.command(ctx, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee := (*exec.ExitError)(nil); err != nil {
		require.ErrorAs(s.t, err, &ee)
		return ee.ExitCode(), out.String(), errb.String()
	}
	return 0, out.String(), errb.String()
}

// startDev starts `spool dev` writing to w (stdout and stderr) and waits
// for its banner, read from r (the other end of w), which is read on to
// its end; it returns the process and a channel closed when it has
// exited.
func (s *orphanSetup) startDev(r io.Reader, w io.Writer) (*exec.Cmd, <-chan struct{}) {
	s.t.Helper()
	dev := s.command(context.Background(), "dev")
	dev.Stdout, dev.Stderr = w, w
	require.NoError(s.t, dev.Start())
	exited := make(chan struct{})
	go func() {
		_ = dev.Wait()
		if c, ok := w.(io.Closer); ok {
			_ = c.Close() // the reader below reads to its end
		}
		close(exited)
	}()
	s.t.Cleanup(func() { _ = dev.Process.Kill(); <-exited })
	banner := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		var log []string
		for sc.Scan() {
			log = append(log, sc.Text())
			if sc.Text() == "Ctrl-C stops it." {
				banner <- nil
				for sc.Scan() {
					_, _ = s.after.Write([]byte(sc.Text() + "\n"))
				}
				return
			}
		}
		banner <- fmt.Errorf("spool dev stopped before its banner:\n%s", strings.Join(log, "\n"))
	}()
	select {
	case err := <-banner:
		require.NoError(s.t, err)
	case <-time.After(2 * time.Minute):
		s.t.Fatal("no banner from spool dev")
	}
	return dev, exited
}

// devThenDevAgain starts `spool dev`, runs a thread on it, has kill end
// the dev, then checks that the dev's redis-server has gone with it and
// that everything works on the data dir as before: the thread is read
// from it, and the next `spool dev` starts, with one redis-server.
func devThenDevAgain(t *testing.T, s *orphanSetup, r io.ReadCloser, w io.WriteCloser, kill func(dev *exec.Cmd)) *os.ProcessState {
	t.Helper()
	dev, exited := s.startDev(r, w)
	servers := redisServersOn(t, s.redisDir())
	require.Len(t, servers, 1, "spool dev runs one redis-server on its data dir")
	code, out, errs := s.spool("thread", "run", "demo/hello", "--wait", "--json")
	require.Equal(t, 0, code, errs)
	var rec registry.Record
	require.NoError(t, json.Unmarshal([]byte(out), &rec), out)

	kill(dev)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		// Its goroutines, to see what it waits for.
		_ = dev.Process.Signal(syscall.SIGQUIT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
		t.Fatalf("spool dev did not end; it wrote after its banner:\n%s", s.after.String())
	}
	require.Eventually(t, func() bool { return len(redisServersOn(t, s.redisDir())) == 0 }, 15*time.Second, 20*time.Millisecond,
		"the dev's redis-server outlived it (pid %d)", servers[0])

	code, out, errs = s.spool("thread", "show", rec.ThreadID, "--json")
	require.Equal(t, 0, code, "the data dir's threads are read as before: %s", errs)
	require.Contains(t, out, `"status": "completed"`)

	again, againExited := s.startDev(io.Pipe())
	require.Len(t, redisServersOn(t, s.redisDir()), 1, "one redis-server on the data dir")
	require.NoError(t, again.Process.Signal(syscall.SIGTERM))
	<-againExited
	require.Empty(t, redisServersOn(t, s.redisDir()))
	return dev.ProcessState
}

// TestNoOrphanedRedis: however a `spool dev` ends, its redis-server ends
// with it: killed (SIGKILL), by the OOM killer, hung up on (SIGHUP), or
// dead of a write to a closed pipe (SIGPIPE); and the next `spool dev`
// on the data dir starts without a word about one already running.
func TestNoOrphanedRedis(t *testing.T) {
	t.Parallel()
	t.Run("SIGKILL", func(t *testing.T) {
		t.Parallel()
		s := newOrphanSetup(t)
		r, w := io.Pipe()
		ps := devThenDevAgain(t, s, r, w, func(dev *exec.Cmd) { require.NoError(t, dev.Process.Kill()) })
		require.Equal(t, syscall.SIGKILL, ps.Sys().(syscall.WaitStatus).Signal())
	})
	t.Run("SIGHUP", func(t *testing.T) {
		t.Parallel()
		// A test run under nohup inherits SIGHUP ignored, and so would
		// the dev (an ignored signal stays ignored across exec): caught
		// here, it is the default again in the dev.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
		s := newOrphanSetup(t)
		r, w := io.Pipe()
		devThenDevAgain(t, s, r, w, func(dev *exec.Cmd) { require.NoError(t, dev.Process.Signal(syscall.SIGHUP)) })
	})
	t.Run("SIGPIPE", func(t *testing.T) {
		t.Parallel()
		s := newOrphanSetup(t)
		// The dev writes to a pipe (`spool dev 2>&1 | grep ...`) whose
		// reader is gone when it stops: its "stopping" line kills it.
		r, w, err := os.Pipe()
		require.NoError(t, err)
		ps := devThenDevAgain(t, s, r, w, func(dev *exec.Cmd) {
			_ = w.Close()
			_ = r.Close()
			require.NoError(t, dev.Process.Signal(os.Interrupt))
		})
		require.Equal(t, syscall.SIGPIPE, ps.Sys().(syscall.WaitStatus).Signal(), "the dev died of SIGPIPE")
	})
	t.Run("OOM", func(t *testing.T) {
		t.Parallel()
		s := newOrphanSetup(t)
		r, w := io.Pipe()
		devThenDevAgain(t, s, r, w, func(dev *exec.Cmd) { oomKill(t, s, dev) })
	})
}

// oomKill has the kernel's OOM killer end dev: dev alone (its
// redis-server started outside) in a memory cgroup of its own whose limit
// its next allocations (a thread it runs) pass. Where no cgroup can be
// made here, dev is sent the SIGKILL the OOM killer sends, while a thread
// runs.
func oomKill(t *testing.T, s *orphanSetup, dev *exec.Cmd) {
	t.Helper()
	cg, err := memoryCgroup(t)
	if err != nil {
		t.Logf("no memory cgroup (%v): SIGKILL while a thread runs, as the OOM killer sends it", err)
		p := s.command(t.Context(), "thread", "run", "t/slow", "--model", "script:scripts/slow.yaml", "--wait")
		require.NoError(t, p.Start())
		defer func() { _ = p.Wait() }()
		time.Sleep(time.Second)
		require.NoError(t, dev.Process.Kill())
		return
	}
	require.NoError(t, os.WriteFile(filepath.Join(cg.dir, "cgroup.procs"), []byte(strconv.Itoa(dev.Process.Pid)), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(cg.dir, cg.limit), []byte("1048576"), 0o644))
	deadline := time.Now().Add(time.Minute)
	for processRuns(dev.Process.Pid) && time.Now().Before(deadline) {
		_, _, _ = s.spool("thread", "run", "demo/tree", "--input", "level=0", "--input", "depth=3", "--wait", "--timeout", "5s")
	}
	require.Contains(t, cg.oomKills(), "oom_kill 1", "the OOM killer ended the dev")
}

// processRuns reports whether pid runs (not a zombie).
func processRuns(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// cgroup is a memory cgroup a test made.
type cgroup struct {
	dir   string
	limit string // the file of its memory limit
}

// oomKills is what the cgroup says of its OOM kills.
func (c cgroup) oomKills() string {
	for _, f := range []string{"memory.oom_control", "memory.events"} {
		if b, err := os.ReadFile(filepath.Join(c.dir, f)); err == nil {
			return string(b)
		}
	}
	return ""
}

// memoryCgroup makes a memory cgroup under this process's own (cgroup v1
// memory controller, or v2 with memory enabled for children), removed at
// cleanup.
func memoryCgroup(t *testing.T) (cgroup, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return cgroup{}, err
	}
	var c cgroup
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[1] == "memory":
			c = cgroup{dir: filepath.Join("/sys/fs/cgroup/memory", parts[2]), limit: "memory.limit_in_bytes"}
		case parts[0] == "0" && parts[1] == "" && c.dir == "":
			c = cgroup{dir: filepath.Join("/sys/fs/cgroup", parts[2]), limit: "memory.max"}
		}
	}
	if c.dir == "" {
		return c, fmt.Errorf("no memory controller in /proc/self/cgroup")
	}
	c.dir = filepath.Join(c.dir, fmt.Sprintf("spool-oom-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return c, err
	}
	t.Cleanup(func() {
		for i := 0; i < 100 && os.Remove(c.dir) != nil; i++ {
			time.Sleep(50 * time.Millisecond)
		}
	})
	if _, err := os.Stat(filepath.Join(c.dir, c.limit)); err != nil {
		return c, err
	}
	return c, nil
}

// TestStaleDevFile: a redis.url a killed dev left, naming a Redis that
// answers but is not the data dir's (its port taken by another server
// since), is not followed: commands say there is no Redis, and the next
// `spool dev` starts without a word about one already running.
func TestStaleDevFile(t *testing.T) {
	t.Parallel()
	s := newOrphanSetup(t)
	other := testenv.NewRedisOn(t, testenv.Standalone)
	require.NoError(t, os.MkdirAll(filepath.Join(s.project, ".spool"), 0o755))
	urlFile := filepath.Join(s.project, ".spool", "redis.url")
	require.NoError(t, os.WriteFile(urlFile, []byte(other.URL+"\npid 1\n"), 0o600))

	code, _, errs := s.spool("thread", "list")
	require.Equal(t, 1, code)
	require.Regexp(t, "^spool: no Redis: ", errs, "the stale file was followed")
	require.NoFileExists(t, urlFile, "the stale file is cleaned up")

	require.NoError(t, os.WriteFile(urlFile, []byte(other.URL+"\npid 1\n"), 0o600))
	dev, exited := s.startDev(io.Pipe())
	b, err := os.ReadFile(urlFile)
	require.NoError(t, err)
	require.NotContains(t, string(b), other.URL)
	require.Contains(t, string(b), fmt.Sprintf("pid %d\n", dev.Process.Pid))
	require.NoError(t, dev.Process.Signal(syscall.SIGTERM))
	<-exited
	require.NoFileExists(t, urlFile, "a dev that stops takes its file away")
}

// TestEmbeddedRunKilled: an --embedded run killed in the middle of its
// thread takes its redis-server with it; the next run on the data dir
// starts its own.
func TestEmbeddedRunKilled(t *testing.T) {
	t.Parallel()
	s := newOrphanSetup(t)
	run := s.command(t.Context(), "thread", "run", "t/slow", "--model", "script:scripts/slow.yaml", "--embedded", "--wait")
	require.NoError(t, run.Start())
	require.Eventually(t, func() bool { return len(redisServersOn(t, s.redisDir())) == 1 }, time.Minute, 20*time.Millisecond)
	time.Sleep(time.Second)
	require.NoError(t, run.Process.Kill())
	_ = run.Wait()
	require.Eventually(t, func() bool { return len(redisServersOn(t, s.redisDir())) == 0 }, 15*time.Second, 20*time.Millisecond,
		"the run's redis-server outlived it")
	code, _, errs := s.spool("thread", "run", "t/quick", "--model", "script:scripts/slow.yaml", "--embedded", "--wait")
	require.Equal(t, 0, code, errs)
}
