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
	"path/filepath"
	"sort"
	"strings"
	"syscall"
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
//   - Keys pass ValidateKey, so no key reaches outside root.
//
// One difference from S3 a file system cannot hide: a key cannot be both an
// object and a "directory" of other objects ("a" and "a/b"); such a write
// fails with an error. Spool's key layout never does that.
type Local struct {
	root string
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
	if err := os.MkdirAll(filepath.Join(abs, localTmpDir), 0o755); err != nil {
		return nil, fmt.Errorf("local blob store %s: %w", dir, err)
	}
	return &Local{root: abs}, nil
}

// Root returns the absolute directory the store writes under.
func (l *Local) Root() string { return l.root }

func (l *Local) path(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	if key == localTmpDir || strings.HasPrefix(key, localTmpDir+"/") {
		return "", fmt.Errorf("blob key %q: %s is reserved by the local store", key, localTmpDir)
	}
	return filepath.Join(l.root, filepath.FromSlash(key)), nil
}

// stage writes data to a fresh fsynced temp file and returns its path.
func (l *Local) stage(data []byte) (string, error) { return l.stageSync(data, true) }

func (l *Local) stageSync(data []byte, sync bool) (string, error) {
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(l.root, localTmpDir, hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	_, werr := f.Write(data)
	var serr error
	if sync {
		serr = f.Sync()
	}
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// place moves the staged file tmp to dst with op (rename or link), creating
// parent directories; it retries when a concurrent Delete pruned a parent
// directory between MkdirAll and op.
func (l *Local) place(tmp, dst string, op func(string, string) error) error {
	return l.placeSync(tmp, dst, op, true)
}

func (l *Local) placeSync(tmp, dst string, op func(string, string) error, sync bool) error {
	var err error
	for range 5 {
		if err = os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err = op(tmp, dst); err == nil {
			if sync {
				syncDir(filepath.Dir(dst))
			}
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return err
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}

func (l *Local) Put(ctx context.Context, key string, data []byte) error {
	dst, err := l.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	tmp, err := l.stage(data)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if err := l.place(tmp, dst, os.Rename); err != nil {
		_ = os.Remove(tmp)
		if isDirConflict(err) {
			return fmt.Errorf("put %s: key is a prefix of other objects: %w", key, err)
		}
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// PutView writes a view (see ViewWriter): atomically, like Put, but
// without fsync, so a machine crash may lose it (never tear it).
func (l *Local) PutView(ctx context.Context, key string, data []byte) error {
	dst, err := l.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	tmp, err := l.stageSync(data, false)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if err := l.placeSync(tmp, dst, os.Rename, false); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

func (l *Local) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	dst, err := l.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	tmp, err := l.stage(data)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	defer os.Remove(tmp)
	if err := l.place(tmp, dst, os.Link); err != nil {
		if errors.Is(err, fs.ErrExist) {
			if fi, serr := os.Stat(dst); serr == nil && fi.IsDir() {
				return fmt.Errorf("put %s: key is a prefix of other objects: %w", key, err)
			}
			return ErrExists
		}
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
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

func (l *Local) Get(ctx context.Context, key string) ([]byte, error) {
	p, err := l.path(key)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		if notFound(err) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return data, nil
}

func (l *Local) Stat(ctx context.Context, key string) (Info, error) {
	p, err := l.path(key)
	if err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	return l.info(key, p)
}

func (l *Local) info(key, p string) (Info, error) {
	f, err := os.Open(p)
	if err != nil {
		if notFound(err) {
			return Info{}, ErrNotFound
		}
		return Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	if fi.IsDir() {
		return Info{}, ErrNotFound
	}
	h := md5.New()
	if _, err := io.Copy(h, f); err != nil {
		return Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	return Info{Key: key, Size: fi.Size(), Modified: fi.ModTime(), ETag: hex.EncodeToString(h.Sum(nil))}, nil
}

// List walks only the directory named by prefix's part before its last "/".
// A prefix whose directory part is not a valid key cannot match any valid
// key, so it lists nothing (as S3 and Memory do).
func (l *Local) List(ctx context.Context, prefix string) ([]Info, error) {
	dir := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dir = prefix[:i]
		if ValidateKey(dir) != nil {
			return nil, nil
		}
	}
	start := l.root
	if dir != "" {
		start = filepath.Join(l.root, filepath.FromSlash(dir))
	}
	var out []Info
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if notFound(err) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, rerr := filepath.Rel(l.root, p)
		if rerr != nil {
			return rerr
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if key == localTmpDir {
				return fs.SkipDir
			}
			// Prune directories that cannot hold a matching key.
			if key != "." && !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasPrefix(key, prefix) {
			return nil
		}
		inf, ierr := l.info(key, p)
		if errors.Is(ierr, ErrNotFound) { // deleted while listing
			return nil
		}
		if ierr != nil {
			return ierr
		}
		out = append(out, inf)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete removes the object and then the parent directories it leaves
// empty (up to the root), so listings stay cheap.
func (l *Local) Delete(ctx context.Context, key string) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	fi, err := os.Lstat(p)
	if err != nil {
		if notFound(err) {
			return nil
		}
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if fi.IsDir() {
		return nil // a prefix, not an object
	}
	if err := os.Remove(p); err != nil && !notFound(err) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	for dir := filepath.Dir(p); dir != l.root && strings.HasPrefix(dir, l.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil { // not empty, or gone: stop
			break
		}
	}
	return nil
}
