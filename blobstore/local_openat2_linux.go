package blobstore

import (
	"io/fs"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// noOpenat2 is set once openat2 turned out to be missing (ENOSYS: a kernel
// before 5.6) or refused (EPERM: a seccomp profile that predates it).
var noOpenat2 atomic.Bool

// openat2 opens rel beneath dir with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS:
// the kernel refuses any symlink (ELOOP) and any escape from dir (EXDEV)
// while it resolves the whole path. ok is false when openat2 cannot be
// used; the caller walks instead.
func openat2(dir int, rel string, flags int, mode uint32) (fd int, ok bool, err error) {
	if noOpenat2.Load() {
		return -1, false, nil
	}
	// No O_NOFOLLOW: RESOLVE_NO_SYMLINKS covers the last component too,
	// with ELOOP (O_NOFOLLOW|O_DIRECTORY would say ENOTDIR).
	how := &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for range 8 {
		fd, err = unix.Openat2(dir, rel, how)
		switch err {
		case nil:
			return fd, true, nil
		case unix.EINTR, unix.EAGAIN: // EAGAIN: a rename raced the lookup
			continue
		case unix.ENOSYS, unix.EPERM:
			noOpenat2.Store(true)
			return -1, false, nil
		case unix.ELOOP, unix.EXDEV:
			return -1, true, ErrSymlink
		}
		return -1, true, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	return -1, false, nil // kept racing renames: walk
}
