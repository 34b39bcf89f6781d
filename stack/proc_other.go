//go:build !linux

package stack

import "syscall"

// tieToParent does nothing where there is no PR_SET_PDEATHSIG: a
// redis-server whose spool process dies keeps running, and keeps its
// data directory's lock (dirLock), until lockDir stops it.
func tieToParent(*syscall.SysProcAttr) {}

// redisServersOn finds nothing where processes' working directories
// cannot be read: only the lock keeps a second server off the directory.
func redisServersOn(string) []int { return nil }

// isRedisOn cannot tell here.
func isRedisOn(int, string) bool { return false }

// isZombie cannot tell here.
func isZombie(int) bool { return false }
