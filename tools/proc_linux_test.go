package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestWorkerIsNotDumpable: once a process has run an external tool it is
// not dumpable, so other processes of its user (its tools) cannot read its
// environment from /proc/<pid>/environ. Not parallel: it changes the test
// process.
func TestWorkerIsNotDumpable(t *testing.T) {
	s := setupExternal(t, fstest.MapFS{".ai/tools/ok.sh": sh(`echo '"ok"'`)}, ExternalConfig{})
	require.False(t, s.call(t, "ok", `{}`).IsError)
	d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	require.NoError(t, err)
	require.Equal(t, 0, d, "the worker's /proc entries are readable by its tools")
}

// workerHelperEnv makes the test binary a worker that runs one tool (see
// TestToolDiesWithItsWorker): the tool writes its pid into the directory
// the variable names and sleeps.
const workerHelperEnv = "SPOOL_TOOLS_TEST_WORKER_HELPER"

func init() {
	testHelpers = append(testHelpers, func() (int, bool) {
		dir := os.Getenv(workerHelperEnv)
		if dir == "" {
			return 0, false
		}
		return workerHelper(dir), true
	})
}

func workerHelper(dir string) int {
	files := fstest.MapFS{".ai/tools/sleeper.sh": sh(`echo $$ > "$PIDFILE.tmp" && mv "$PIDFILE.tmp" "$PIDFILE"; exec sleep 60`)}
	loaded, err := LoadExternal(files, ExternalConfig{CacheDir: filepath.Join(dir, "cache")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	reg, err := NewRegistry(loaded...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tool, _ := reg.Lookup("sleeper")
	env := &Env{ThreadID: "th-1", TreeID: "th-1", Env: map[string]string{"PIDFILE": filepath.Join(dir, "pid")}}
	// From a goroutine, as a worker runs its activations.
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = tool.Run(context.Background(), env, json.RawMessage(`{}`))
	}()
	<-done
	return 0
}

// TestToolDiesWithItsWorker: a worker killed outright (SIGKILL, as the OOM
// killer does) takes the tool it was running with it, so the tool does no
// work after the activation's grant lapses and another worker takes the
// run over.
func TestToolDiesWithItsWorker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	worker := exec.Command(os.Args[0], "-test.run=^$")
	worker.Env = append(os.Environ(), workerHelperEnv+"="+dir)
	var stderr bytes.Buffer
	worker.Stderr = &stderr
	require.NoError(t, worker.Start())
	t.Cleanup(func() { _ = worker.Process.Kill(); _ = worker.Wait() })

	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "the tool never started: %s", &stderr)
	require.NoError(t, syscall.Kill(pid, 0), "the tool runs")

	require.NoError(t, worker.Process.Kill())
	_ = worker.Wait()
	require.Eventually(t, func() bool {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return true
		}
		// Killed but not yet reaped by init: a zombie does no work.
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return strings.Contains(string(b), ") Z ")
	}, 5*time.Second, 10*time.Millisecond, "the tool (pid %d) outlived its worker", pid)
}
