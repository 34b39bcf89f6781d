package tools

import (
	"testing"
	"testing/fstest"

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
