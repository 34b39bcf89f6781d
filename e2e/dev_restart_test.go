package e2e

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDevCleanRestartDoesNotWarn: `spool dev` stopped with Ctrl-C seals
// its redis-server's data, and the next `spool dev` on the data dir, which
// finds the same data under a new Redis run, says so and warns of
// nothing; its thread is still there. A restart on data that lost writes
// since (the AOF of an earlier stop put back) still warns that Redis may
// have lost writes, and reconciles.
func TestDevCleanRestartDoesNotWarn(t *testing.T) {
	t.Parallel()
	s := newOrphanSetup(t)
	s.env = append(s.env, "SPOOL_LOG_LEVEL=info") // the clean restart says so at info
	const lostWrites = "redis may have lost writes"
	const cleanRestart = "redis restarted after a clean stop, with every write it had: nothing to reconcile"
	aof := filepath.Join(s.redisDir(), "appendonlydir")
	seal := filepath.Join(s.redisDir(), "clean-stop.json")
	// run starts a dev, runs a thread on it, waits until its log has
	// want (when set), stops it with Ctrl-C and returns its log.
	run := func(want string) string {
		t.Helper()
		r, w := io.Pipe()
		log := &syncBuffer{}
		dev, exited := s.startDev(io.TeeReader(r, log), w)
		code, _, errs := s.spool("thread", "run", "demo/hello", "--wait", "--json")
		require.Equal(t, 0, code, errs)
		if want != "" {
			require.Eventually(t, func() bool { return strings.Contains(log.String(), want) }, time.Minute, 50*time.Millisecond,
				"no %q in the log:\n%s", want, log.String())
		}
		require.NoFileExists(t, seal, "a start takes the seal")
		require.NoError(t, dev.Process.Signal(syscall.SIGINT))
		select {
		case <-exited:
		case <-time.After(time.Minute):
			t.Fatalf("spool dev did not stop:\n%s", log.String())
		}
		require.True(t, dev.ProcessState.Success(), log.String())
		require.FileExists(t, seal, "a clean stop seals the data")
		return log.String()
	}

	first := run("")
	require.NotContains(t, first, lostWrites, "the first start on a new data dir")
	earlier := filepath.Join(t.TempDir(), "appendonlydir")
	require.NoError(t, exec.Command("cp", "-a", aof, earlier).Run())

	again := run(cleanRestart)
	require.NotContains(t, again, lostWrites, "a clean restart with its data lost nothing")
	require.NotContains(t, again, "level=WARN")

	// The data of the first stop put back: the writes of the second run
	// are lost.
	require.NoError(t, os.RemoveAll(aof))
	require.NoError(t, exec.Command("cp", "-a", earlier, aof).Run())
	lost := run(lostWrites)
	require.NotContains(t, lost, cleanRestart)
}
