package stack

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLockDir: one embedded Redis per data directory; the lock is free
// again once its holder lets go.
func TestLockDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	unlock, err := lockDir(dir)
	require.NoError(t, err)
	_, err = lockDir(dir)
	require.Error(t, err, "a second lock on the same directory was granted")
	unlock()
	again, err := lockDir(dir)
	require.NoError(t, err, "the lock was not released")
	again()
}
