package tools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spool-run/spool/blobkey"
)

// Default bounds of the workspace a command runs in (rye/bash, project
// tools): it is copied to the worker's disk for each call.
const (
	defaultMaxWorkspaceBytes = 256 << 20
	defaultMaxWorkspaceFiles = 10000
)

// workLimits bound a work directory: the workspace's size and file count,
// and the file size limit and write leases of its write-back.
type workLimits struct {
	maxBytes int64
	maxFiles int
	fs       FSConfig
}

// workDir is the workspace of a thread tree copied to the worker's disk
// for one call of a command (rye/bash, a project tool): dir is the
// command's working directory, tmp its TMPDIR beside it (never stored
// back), and before the digest of each file copied, by path, so that
// writeBack stores only what the command wrote or changed.
type workDir struct {
	root, dir, tmp string
	before         map[string][32]byte
	lim            workLimits
	who            string // the tool, in messages
	// shared: dir is a copy of the workspace (writeBack stores what
	// changed); else an empty directory of the call's own.
	shared bool
}

// openWorkDir copies the workspace of env's tree into a fresh directory.
// A workspace over lim's bounds is an error result; close removes it.
func openWorkDir(ctx context.Context, env *Env, lim workLimits, who string) (*workDir, *Result, error) {
	root, err := os.MkdirTemp("", "spool-work-")
	if err != nil {
		return nil, nil, fmt.Errorf("%s work dir: %w", who, err)
	}
	w := &workDir{root: root, dir: filepath.Join(root, "workspace"), tmp: filepath.Join(root, "tmp"), lim: lim, who: who}
	res, err := w.materialize(ctx, env)
	if err != nil || res != nil {
		w.close()
		return nil, res, err
	}
	return w, nil, nil
}

// emptyWorkDir is an empty working directory with its TMPDIR, for a call
// that has no workspace (a tool run outside a thread tree).
func emptyWorkDir(who string) (*workDir, *Result, error) {
	root, err := os.MkdirTemp("", "spool-work-")
	if err != nil {
		return nil, nil, fmt.Errorf("%s work dir: %w", who, err)
	}
	w := &workDir{root: root, dir: filepath.Join(root, "workspace"), tmp: filepath.Join(root, "tmp"), who: who}
	for _, d := range []string{w.dir, w.tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			w.close()
			return nil, nil, err
		}
	}
	return w, nil, nil
}

// close removes the directory and everything the command left in it.
func (w *workDir) close() { _ = os.RemoveAll(w.root) }

// materialize copies the workspace of env's tree into w.dir and makes
// w.tmp.
func (w *workDir) materialize(ctx context.Context, env *Env) (*Result, error) {
	if err := os.MkdirAll(w.tmp, 0o700); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(w.dir, 0o700); err != nil {
		return nil, err
	}
	if err := settleWorkspace(ctx, env, w.lim.fs); err != nil {
		return nil, err
	}
	prefix := blobkey.WorkspaceFiles(env.TreeID)
	infos, err := env.Store.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list the workspace: %w", err)
	}
	var total int64
	for _, info := range infos {
		total += info.Size
	}
	if len(infos) > w.lim.maxFiles || total > w.lim.maxBytes {
		r := errorResult(fmt.Sprintf("%s: the workspace holds %d files, %d bytes: more than the %d files or %d bytes a command runs in",
			w.who, len(infos), total, w.lim.maxFiles, w.lim.maxBytes))
		return &r, nil
	}
	w.before = make(map[string][32]byte, len(infos))
	for _, info := range infos {
		rel := strings.TrimPrefix(info.Key, prefix)
		if _, err := CleanPath(rel); err != nil {
			continue // not a file fs_write could have made
		}
		data, err := env.Store.Get(ctx, info.Key)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", info.Key, err)
		}
		full := filepath.Join(w.dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(full, data, 0o600); err != nil {
			return nil, err
		}
		w.before[rel] = sha256.Sum256(data)
	}
	return nil, nil
}

// writeBack stores the regular files of w.dir that are new or differ from
// what was copied in the workspace, as one write-back (commitFiles: all
// or none, whatever crashes), each under its write lease: their paths, in
// order. A file over the size limit, or one whose path the workspace
// cannot hold, is an error result, and nothing is stored.
func (w *workDir) writeBack(ctx context.Context, env *Env) ([]string, *Result, error) {
	var changed []string
	err := filepath.WalkDir(w.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(w.dir, p)
		changed = append(changed, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read the command's files: %w", err)
	}
	sort.Strings(changed)
	written := []string{}
	files := map[string][]byte{}
	for _, rel := range changed {
		data, err := os.ReadFile(filepath.Join(w.dir, filepath.FromSlash(rel)))
		if err != nil {
			return nil, nil, err
		}
		if sum, ok := w.before[rel]; ok && sum == sha256.Sum256(data) {
			continue
		}
		clean, err := CleanPath(rel)
		if err == nil && len(data) > w.lim.fs.MaxFileBytes {
			err = fmt.Errorf("%d bytes, more than the %d-byte file limit", len(data), w.lim.fs.MaxFileBytes)
		}
		if err != nil {
			r := errorResult(fmt.Sprintf("%s: %s cannot be stored in the workspace: %v (nothing the command wrote was stored)", w.who, rel, err))
			return nil, &r, nil
		}
		if _, dup := files[clean]; !dup {
			written = append(written, clean)
		}
		files[clean] = data
	}
	if len(written) == 0 {
		return written, nil, nil
	}
	if err := w.commitFiles(ctx, env, written, files); err != nil {
		return nil, nil, err
	}
	return written, nil, nil
}

// storeFile writes data to the workspace file p under its write lease
// (who names the writer in errors).
func storeFile(ctx context.Context, env *Env, fc FSConfig, who, p string, data []byte) error {
	lk, err := lockFile(ctx, env.Store, blobkey.WorkspaceLock(env.TreeID, p), fc.LockLease, fc.LockWait, fc.Now)
	if err != nil {
		return fmt.Errorf("%s: store %s: %w", who, p, err)
	}
	defer func() {
		if err := lk.unlock(ctx); err != nil {
			env.logger().Warn("release write lease", "thread_id", env.ThreadID, "path", p, "err", err)
		}
	}()
	if err := env.Store.Put(ctx, blobkey.WorkspaceFile(env.TreeID, p), bytes.Clone(data)); err != nil {
		return fmt.Errorf("%s: store %s: %w", who, p, err)
	}
	return nil
}
