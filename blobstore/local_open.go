//go:build unix

package blobstore

import (
	"io/fs"
	"strings"

	"golang.org/x/sys/unix"
)

// openBeneath opens rel (a slash-separated path of valid key segments, "."
// for dir itself) beneath the directory dir with flags, refusing a symlink
// in any component with ErrSymlink: one openat2 call where the kernel has
// it (unless walk: tests run both), else walkOpen.
func openBeneath(dir int, rel string, flags int, mode uint32, walk bool) (int, error) {
	if !walk {
		if fd, ok, err := openat2(dir, rel, flags, mode); ok {
			return fd, err
		}
	}
	return walkOpen(dir, rel, flags, mode)
}

// walkOpen opens rel beneath dir one component at a time, each with
// O_NOFOLLOW, so that no symlink is followed on the way.
func walkOpen(dir int, rel string, flags int, mode uint32) (int, error) {
	names := strings.Split(rel, "/")
	owned := false
	for _, name := range names[:len(names)-1] {
		fd, err := openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		closeIf(owned, dir)
		if err != nil {
			return -1, err
		}
		dir, owned = fd, true
	}
	fd, err := openat(dir, names[len(names)-1], flags, mode)
	closeIf(owned, dir)
	return fd, err
}

// openat opens name, one path component, in the directory dir without
// following a symlink there: ErrSymlink when name is one.
func openat(dir int, name string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Openat(dir, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		switch {
		case err == nil:
			return fd, nil
		case err == unix.EINTR:
			continue
		case err == unix.ELOOP:
			return -1, ErrSymlink
		case err == unix.ENOTDIR && flags&unix.O_DIRECTORY != 0:
			// O_DIRECTORY|O_NOFOLLOW on a symlink says ENOTDIR.
			var st unix.Stat_t
			if unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return -1, ErrSymlink
			}
		}
		return -1, &fs.PathError{Op: "open", Path: name, Err: err}
	}
}
