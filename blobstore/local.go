//go:build unix

package blobstore

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// localTmpDir is the directory under the root where Local stages writes
// before renaming or linking them into place. Keys under it are refused and
// List never shows it.
const localTmpDir = ".spool-tmp"

// Local is a Store on a local directory, for `spool dev`, the embedded mode
// and single-machine deployments. A key maps to the file root/<key>.
//
//   - Writes are atomic: data goes to a temp file under root/.spool-tmp,
//     is fsynced, then renamed (Put) or hard-linked (PutIfAbsent) into place,
//     and the parent directory is fsynced. Readers see the old or the new
//     object, never a torn one.
//   - PutIfAbsent is create-only under concurrency: link(2) fails with EEXIST
//     when the final name exists, atomically, in the kernel; there is no
//     check-then-write window.
//   - Nothing reaches outside root. Keys pass ValidateKey, and every file
//     and directory is opened relative to a descriptor of the root held
//     since NewLocal, with no path component allowed to be a symlink:
//     openat2(2) with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS where the kernel
//     has it (Linux 5.6), else a walk that opens one component at a time
//     with O_NOFOLLOW. Renames, links, unlinks and directory creation act
//     on a name inside a directory opened that way, never on a path. So a
//     symlink planted anywhere in the store (by a tool process sharing the
//     machine, say) is refused with ErrSymlink on Get, Stat and writes
//     through it, skipped by List, and removed, never followed, by Delete
//     and by a Put of its own key (which replaces it). The root's own path
//     may hold symlinks: it is the operator's choice, resolved once.
//
// One difference from S3 a file system cannot hide: a key cannot be both an
// object and a "directory" of other objects ("a" and "a/b"); such a write
// fails with an error. Spool's key layout never does that.
type Local struct {
	root     string
	dir      *os.File                // root, opened once; every path resolves beneath it
	tmp      atomic.Pointer[os.File] // root/.spool-tmp (see stage)
	walkOnly bool                    // never openat2 (tests of the fallback)
}

var _ Store = (*Local)(nil)

// NewLocal returns a Local store rooted at dir, creating it if needed.
func NewLocal(dir string) (*Local, error) {
	if dir == "" {
		return nil, fmt.Errorf("local blob store: directory is empty")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("local blob store %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("local blob store %s: %w", dir, err)
	}
	fd, err := unix.Open(abs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("local blob store %s: %w", dir, err)
	}
	l := &Local{root: abs, dir: os.NewFile(uintptr(fd), abs)}
	tmp, err := l.mkdirAll(localTmpDir)
	if err != nil {
		_ = l.dir.Close()
		return nil, fmt.Errorf("local blob store %s: %w", dir, err)
	}
	l.tmp.Store(tmp)
	return l, nil
}

// Root returns the absolute directory the store writes under.
func (l *Local) Root() string { return l.root }

// check validates key for the local store.
func check(key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if key == localTmpDir || strings.HasPrefix(key, localTmpDir+"/") {
		return fmt.Errorf("%w %q: %s is reserved by the local store", ErrBadKey, key, localTmpDir)
	}
	return nil
}

// open opens rel ("." for the root) beneath the root, refusing symlinks.
func (l *Local) open(rel string, flags int, mode uint32) (*os.File, error) {
	fd, err := openBeneath(int(l.dir.Fd()), rel, flags, mode, l.walkOnly)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(l.root, filepath.FromSlash(rel))), nil
}

// mkdirAll opens the directory rel beneath the root, creating it and its
// parents as needed, one component at a time, never through a symlink.
func (l *Local) mkdirAll(rel string) (*os.File, error) {
	if d, err := l.open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return d, err
	}
	dir := int(l.dir.Fd())
	owned := false
	for _, name := range strings.Split(rel, "/") {
		if err := unix.Mkdirat(dir, name, 0o755); err != nil && err != unix.EEXIST {
			closeIf(owned, dir)
			return nil, &fs.PathError{Op: "mkdir", Path: rel, Err: err}
		}
		fd, err := openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		closeIf(owned, dir)
		if err != nil {
			return nil, &fs.PathError{Op: "mkdir", Path: rel, Err: err}
		}
		dir, owned = fd, true
	}
	return os.NewFile(uintptr(dir), filepath.Join(l.root, filepath.FromSlash(rel))), nil
}

func closeIf(owned bool, fd int) {
	if owned {
		_ = unix.Close(fd)
	}
}

// split returns key's directory ("." at the top) and base name.
func split(key string) (dir, base string) {
	dir, base = path.Split(key)
	if dir == "" {
		return ".", base
	}
	return strings.TrimSuffix(dir, "/"), base
}

// stage writes data to a fresh temp file in the staging directory, fsynced
// when sync, and returns the directory and the file's name there. The
// directory stays open from write to write; when it was removed meanwhile
// it is made and opened again (never through a symlink).
func (l *Local) stage(data []byte, sync bool) (*os.File, string, error) {
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	name := hex.EncodeToString(rnd[:])
	tmp := l.tmp.Load()
	fd, err := openat(int(tmp.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		// The old descriptor is left to its finalizer: another write may
		// still use it.
		if tmp, err = l.mkdirAll(localTmpDir); err != nil {
			return nil, "", err
		}
		l.tmp.Store(tmp)
		fd, err = openat(int(tmp.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
	}
	if err != nil {
		return nil, "", err
	}
	f := os.NewFile(uintptr(fd), name)
	_, werr := f.Write(data)
	var serr error
	if sync {
		serr = f.Sync()
	}
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = unix.Unlinkat(int(tmp.Fd()), name, 0)
		return nil, "", err
	}
	return tmp, name, nil
}

// place moves the staged file into key's place with renameat (replace) or
// linkat (create only), creating parent directories; it retries when a
// concurrent Delete pruned a parent directory between their creation and
// the move. The staged name is gone afterwards in every case.
func (l *Local) place(key string, data []byte, sync, replace bool) error {
	dirf, name, err := l.stage(data, sync)
	if err != nil {
		return err
	}
	tmp := int(dirf.Fd())
	placed := false
	defer func() {
		if !placed || !replace { // a link leaves the staged name
			_ = unix.Unlinkat(tmp, name, 0)
		}
		runtime.KeepAlive(dirf)
	}()
	dir, base := split(key)
	for range 5 {
		parent, err := l.mkdirAll(dir)
		if err != nil {
			return err
		}
		if replace {
			err = unix.Renameat(tmp, name, int(parent.Fd()), base)
		} else {
			err = unix.Linkat(tmp, name, int(parent.Fd()), base, 0)
		}
		if err == nil {
			placed = true
			if sync {
				_ = parent.Sync()
			}
			return parent.Close()
		}
		if !replace && errors.Is(err, unix.EEXIST) {
			var st unix.Stat_t
			if unix.Fstatat(int(parent.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				err = unix.EISDIR
			}
		}
		_ = parent.Close()
		if !errors.Is(err, unix.ENOENT) {
			return &fs.PathError{Op: "place", Path: key, Err: err}
		}
	}
	return &fs.PathError{Op: "place", Path: key, Err: unix.ENOENT}
}

// Put writes data at key atomically (a staged file renamed into place)
// and durably (fsynced), replacing any object there.
func (l *Local) Put(ctx context.Context, key string, data []byte) error {
	return l.put(ctx, key, data, true)
}

// PutView writes a view (see ViewWriter): atomically, like Put, but
// without fsync, so a machine crash may lose it (never tear it).
func (l *Local) PutView(ctx context.Context, key string, data []byte) error {
	return l.put(ctx, key, data, false)
}

func (l *Local) put(ctx context.Context, key string, data []byte, sync bool) error {
	if err := check(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.place(key, data, sync, true); err != nil {
		return putError(key, err)
	}
	return nil
}

// PutIfAbsent writes data at key like Put, or returns ErrExists if an
// object is already there.
func (l *Local) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	if err := check(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err := l.place(key, data, true, false)
	if errors.Is(err, fs.ErrExist) {
		return ErrExists
	}
	if err != nil {
		return putError(key, err)
	}
	return nil
}

func putError(key string, err error) error {
	if isDirConflict(err) {
		return fmt.Errorf("put %s: key is a prefix of other objects: %w", key, err)
	}
	return fmt.Errorf("put %s: %w", key, err)
}

// isDirConflict reports the errors a file system gives when an object name
// collides with a directory of other objects.
func isDirConflict(err error) bool {
	return errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOTDIR) ||
		errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY)
}

// notFound maps the file-system errors that mean "no such object" (missing
// file, a directory where the key points, a file where a parent should be).
func notFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR)
}

// openObject opens key's file for reading: ErrNotFound when there is no
// object (a directory is none), ErrSymlink through a symlink.
func (l *Local) openObject(key string) (*os.File, fs.FileInfo, error) {
	f, err := l.open(key, unix.O_RDONLY, 0)
	if err != nil {
		if notFound(err) {
			return nil, nil, ErrNotFound
		}
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, nil, ErrNotFound
	}
	return f, fi, nil
}

// Get returns the object's bytes, or ErrNotFound.
func (l *Local) Get(ctx context.Context, key string) ([]byte, error) {
	if err := check(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, fi, err := l.openObject(key)
	if errors.Is(err, ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	defer f.Close()
	data := make([]byte, 0, fi.Size()+1) // +1: no regrowth to see EOF
	for {
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", key, err)
		}
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
	}
}

// Stat returns the object's info, or ErrNotFound.
func (l *Local) Stat(ctx context.Context, key string) (Info, error) {
	if err := check(key); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	return l.info(key, func() (*os.File, fs.FileInfo, error) { return l.openObject(key) })
}

// info describes the object that open opens.
func (l *Local) info(key string, open func() (*os.File, fs.FileInfo, error)) (Info, error) {
	f, fi, err := open()
	if errors.Is(err, ErrNotFound) {
		return Info{}, ErrNotFound
	}
	if err != nil {
		return Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	defer f.Close()
	h := md5.New()
	if _, err := io.Copy(h, f); err != nil {
		return Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	return Info{Key: key, Size: fi.Size(), Modified: fi.ModTime(), ETag: hex.EncodeToString(h.Sum(nil))}, nil
}

// List walks only the directory named by prefix's part before its last "/".
// A prefix whose directory part is not a valid key cannot match any valid
// key, so it lists nothing (as S3 and Memory do). The walk goes from
// directory descriptor to directory descriptor and skips symlinks; a
// symlink in the directory part of prefix is ErrSymlink.
func (l *Local) List(ctx context.Context, prefix string) ([]Info, error) {
	dir := "."
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dir = prefix[:i]
		if ValidateKey(dir) != nil {
			return nil, nil
		}
	}
	d, err := l.open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		if notFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	var out []Info
	if err := l.walk(ctx, d, dir, prefix, &out); err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// walk lists the directory d (key dir, "." for the root) into out, and
// closes d.
func (l *Local) walk(ctx context.Context, d *os.File, dir, prefix string, out *[]Info) error {
	ents, err := d.ReadDir(-1)
	defer d.Close()
	if err != nil {
		if notFound(err) {
			return nil
		}
		return err
	}
	for _, ent := range ents {
		if err := ctx.Err(); err != nil {
			return err
		}
		key := ent.Name()
		if dir != "." {
			key = dir + "/" + key
		}
		switch {
		case ent.IsDir():
			if err := l.walkSubdir(ctx, d, ent.Name(), key, prefix, out); err != nil {
				return err
			}
		case ent.Type().IsRegular() && strings.HasPrefix(key, prefix):
			inf, err := l.info(key, func() (*os.File, fs.FileInfo, error) { return openEntry(d, ent.Name(), key) })
			if errors.Is(err, ErrNotFound) { // deleted while listing
				continue
			}
			if err != nil {
				return err
			}
			*out = append(*out, inf)
		}
	}
	return nil
}

// walkSubdir lists the directory name of d (key key) into out, unless it
// cannot hold a key with prefix, or is the store's temporary directory:
// such a directory is pruned unopened. One gone, or swapped for a symlink,
// since d was read is skipped.
func (l *Local) walkSubdir(ctx context.Context, d *os.File, name, key, prefix string, out *[]Info) error {
	if key == localTmpDir || !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
		return nil
	}
	fd, err := openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		if notFound(err) || errors.Is(err, ErrSymlink) { // gone, or swapped for a link
			return nil
		}
		return err
	}
	return l.walk(ctx, os.NewFile(uintptr(fd), key), key, prefix, out)
}

// openEntry opens the file name of the directory d (key key) listed as a
// regular file, with its file info. It is ErrNotFound when the file is
// gone, or was swapped for a symlink or something other than a regular
// file, since d was read.
func openEntry(d *os.File, name, key string) (*os.File, fs.FileInfo, error) {
	fd, err := openat(int(d.Fd()), name, unix.O_RDONLY, 0)
	if err != nil {
		if notFound(err) || errors.Is(err, ErrSymlink) {
			return nil, nil, ErrNotFound
		}
		return nil, nil, err
	}
	f := os.NewFile(uintptr(fd), key)
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = ErrNotFound
	}
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// Delete removes the object and then the parent directories it leaves
// empty (up to the root), so listings stay cheap. A symlink at key is
// removed (not what it points to); one in a parent directory of key is
// ErrSymlink.
func (l *Local) Delete(ctx context.Context, key string) error {
	if err := check(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	dir, base := split(key)
	parent, err := l.open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		if notFound(err) {
			return nil
		}
		return fmt.Errorf("delete %s: %w", key, err)
	}
	err = unix.Unlinkat(int(parent.Fd()), base, 0)
	_ = parent.Close()
	switch {
	case errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) && l.isDir(dir, base):
		return nil // a prefix, not an object
	case err != nil && !notFound(err):
		return fmt.Errorf("delete %s: %w", key, &fs.PathError{Op: "unlink", Path: key, Err: err})
	}
	for dir != "." {
		up, name := split(dir)
		d, err := l.open(up, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			break
		}
		err = unix.Unlinkat(int(d.Fd()), name, unix.AT_REMOVEDIR)
		_ = d.Close()
		if err != nil { // not empty, or gone: stop
			break
		}
		dir = up
	}
	return nil
}

// isDir reports whether name in the directory dir is a directory (not
// following a symlink). unlink(2) of a directory is EISDIR on Linux and
// EPERM elsewhere.
func (l *Local) isDir(dir, name string) bool {
	d, err := l.open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return false
	}
	defer d.Close()
	var st unix.Stat_t
	return unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}
