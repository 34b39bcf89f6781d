package stack

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// devHelperEnv makes the test binary a dev (TestMain): it claims the dev
// file the variable names, publishes a URL and waits to be killed.
const devHelperEnv = "STACK_TEST_DEV_HELPER"

// devHelper is the dev of devHelperEnv.
func devHelper(path string) {
	d, err := ClaimDevFile(path)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	if err := d.Publish("redis://127.0.0.1:1/0"); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("published")
	select {}
}

// TestDevFile: a claimed and published dev file names its dev while the
// dev holds it; a second claim is refused with the first one's pid and
// URL; closed, it is gone.
func TestDevFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "redis.url")
	d, err := ClaimDevFile(path)
	require.NoError(t, err)
	u, _, err := ReadDevFile(path, 0)
	require.NoError(t, err)
	require.Empty(t, u, "claimed, not published")

	require.NoError(t, d.Publish("redis://127.0.0.1:7/0"))
	u, pid, err := ReadDevFile(path, 0)
	require.NoError(t, err)
	require.Equal(t, "redis://127.0.0.1:7/0", u)
	require.Equal(t, os.Getpid(), pid)

	_, err = ClaimDevFile(path)
	var running *DevRunningError
	require.True(t, errors.As(err, &running), "%v", err)
	require.Equal(t, fmt.Sprintf("spool dev is already running on this data dir (pid %d, redis redis://127.0.0.1:7/0); stop it first (Ctrl-C where it runs), or use it: commands in this project find its Redis by themselves", os.Getpid()), err.Error())

	d.Close()
	require.NoFileExists(t, path)
	u, _, err = ReadDevFile(path, 0)
	require.NoError(t, err)
	require.Empty(t, u)
	again, err := ClaimDevFile(path)
	require.NoError(t, err)
	again.Close()
}

// TestDevFileOfADeadDev: the file of a dev that was killed is stale at
// once: readers ignore it and remove it, and the next dev claims it.
func TestDevFileOfADeadDev(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "redis.url")
	dev := exec.Command(os.Args[0], "-test.run=^$")
	dev.Env = append(os.Environ(), devHelperEnv+"="+path)
	out, err := dev.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, dev.Start())
	buf := make([]byte, 100)
	n, _ := out.Read(buf)
	require.Equal(t, "published\n", string(buf[:n]))
	u, pid, err := ReadDevFile(path, 0)
	require.NoError(t, err)
	require.Equal(t, "redis://127.0.0.1:1/0", u)
	require.Equal(t, dev.Process.Pid, pid)

	require.NoError(t, dev.Process.Kill())
	_ = dev.Wait()
	require.FileExists(t, path, "a killed dev leaves its file")
	u, _, err = ReadDevFile(path, time.Second)
	require.NoError(t, err)
	require.Empty(t, u, "the file of a dead dev names no Redis")
	require.NoFileExists(t, path, "and is removed")

	// Left behind again (a dev killed between claim and publish writes
	// the same): the next dev takes it over.
	require.NoError(t, os.WriteFile(path, []byte("redis://127.0.0.1:1/0\npid 1\n"), 0o600))
	d, err := ClaimDevFile(path)
	require.NoError(t, err)
	d.Close()
}
