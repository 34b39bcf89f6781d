package tools

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spool-run/spool/blobstore"
)

// MaxPathBytes bounds a workspace path so that its blob key stays well under
// S3's 1024-byte key limit.
const MaxPathBytes = 512

// ErrBadPath is the error of CleanPath; its message is meant for the model.
var ErrBadPath = errors.New("bad workspace path")

// ErrBusy is returned when a file's write lease could not be taken within
// FSConfig.LockWait.
var ErrBusy = errors.New("file is busy")

// CleanPath turns a model-supplied path into a clean workspace-relative path
// ("a/./b/../c" -> "a/c"). It refuses empty paths, absolute paths, paths
// climbing out of the workspace with "..", backslashes, NUL and other control
// characters, invalid UTF-8, and paths longer than MaxPathBytes.
func CleanPath(p string) (string, error) {
	switch {
	case strings.TrimSpace(p) == "":
		return "", fmt.Errorf("%w: path is empty", ErrBadPath)
	case len(p) > MaxPathBytes:
		return "", fmt.Errorf("%w: path is longer than %d bytes", ErrBadPath, MaxPathBytes)
	case !utf8.ValidString(p):
		return "", fmt.Errorf("%w %q: not valid UTF-8", ErrBadPath, p)
	case strings.ContainsRune(p, '\\'):
		return "", fmt.Errorf("%w %q: backslashes are not allowed, use /", ErrBadPath, p)
	case strings.HasPrefix(p, "/"):
		return "", fmt.Errorf("%w %q: absolute paths are not allowed, use a path relative to the workspace", ErrBadPath, p)
	}
	for _, c := range p {
		if c < 0x20 || c == 0x7f {
			return "", fmt.Errorf("%w %q: control characters are not allowed", ErrBadPath, p)
		}
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%w %q: escapes the workspace", ErrBadPath, p)
	}
	if c == "." {
		return "", fmt.Errorf("%w %q: names the workspace itself, not a file", ErrBadPath, p)
	}
	for _, seg := range strings.Split(c, "/") {
		if strings.TrimSpace(seg) == "" {
			return "", fmt.Errorf("%w %q: a name made only of spaces", ErrBadPath, p)
		}
	}
	return c, nil
}

// lease is the content of a lock object.
type lease struct {
	Owner   string `json:"owner"`
	Expires int64  `json:"expires_unix_ms"`
}

// fileLock is a write lease on one workspace file, held in the blob store.
type fileLock struct {
	store blobstore.Store
	key   string
	owner string
	until time.Time // the lease's end by our clock
	now   func() time.Time
}

// lockFile takes the write lease on key, waiting up to wait. A lease whose
// expiry has passed by our clock is broken.
func lockFile(ctx context.Context, store blobstore.Store, key string, leaseFor, wait time.Duration, now func() time.Time) (*fileLock, error) {
	var tok [12]byte
	_, _ = crand.Read(tok[:])
	owner := hex.EncodeToString(tok[:])
	deadline := now().Add(wait)
	backoff := 2 * time.Millisecond
	for {
		until := now().Add(leaseFor)
		data, _ := json.Marshal(lease{Owner: owner, Expires: until.UnixMilli()})
		err := store.PutIfAbsent(ctx, key, data)
		if err == nil {
			return &fileLock{store: store, key: key, owner: owner, until: until, now: now}, nil
		}
		if !errors.Is(err, blobstore.ErrExists) {
			return nil, fmt.Errorf("take lease %s: %w", key, err)
		}
		held, err := store.Get(ctx, key)
		switch {
		case errors.Is(err, blobstore.ErrNotFound):
			continue // released meanwhile: try again at once
		case err != nil:
			return nil, fmt.Errorf("read lease %s: %w", key, err)
		}
		var l lease
		if json.Unmarshal(held, &l) != nil || now().UnixMilli() > l.Expires {
			// Expired (or garbage): break it, unless it changed since we
			// read it (re-read just before the delete; the window between
			// that read and the delete is the gap the package doc names).
			if err := breakLease(ctx, store, key, held); err != nil {
				return nil, err
			}
			continue
		}
		if !now().Before(deadline) {
			return nil, fmt.Errorf("%w: another write to it has held it for longer than %s", ErrBusy, wait)
		}
		sleep := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(sleep):
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

func breakLease(ctx context.Context, store blobstore.Store, key string, held []byte) error {
	cur, err := store.Get(ctx, key)
	switch {
	case errors.Is(err, blobstore.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("read lease %s: %w", key, err)
	case string(cur) != string(held):
		return nil // someone else took it meanwhile
	}
	if err := store.Delete(ctx, key); err != nil {
		return fmt.Errorf("break lease %s: %w", key, err)
	}
	return nil
}

// valid reports whether the lease still has margin left for a write.
func (l *fileLock) valid(margin time.Duration) bool { return l.now().Add(margin).Before(l.until) }

// unlock deletes the lease if it is still ours. It uses a fresh context so
// that a cancelled call still releases its lease.
func (l *fileLock) unlock(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	cur, err := l.store.Get(ctx, l.key)
	if errors.Is(err, blobstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read lease %s: %w", l.key, err)
	}
	var held lease
	if json.Unmarshal(cur, &held) != nil || held.Owner != l.owner {
		return nil // ours expired and was taken over
	}
	if err := l.store.Delete(ctx, l.key); err != nil {
		return fmt.Errorf("release lease %s: %w", l.key, err)
	}
	return nil
}
