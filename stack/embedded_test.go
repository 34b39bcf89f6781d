package stack

import (
	"testing"
)

// TestLockDir: one embedded Redis per data directory; the lock is free
// again once its holder lets go.
func TestLockDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	unlock, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockDir(dir); err == nil {
		t.Fatal("a second lock on the same directory was granted")
	}
	unlock()
	again, err := lockDir(dir)
	if err != nil {
		t.Fatalf("the lock was not released: %v", err)
	}
	again()
}
