package tools

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
)

// A command's write-back (rye/bash, a project tool) of several files is
// one commit, so that no crash leaves half of it in the workspace and no
// reader sees half of it:
//
//  1. each file's content is staged under its SHA-256 (invisible);
//  2. a journal naming every path and its content is written: the commit
//     point (a crash before it stores nothing, and the call runs again);
//  3. each file is stored under its write lease, then the journal and the
//     staged contents are deleted.
//
// Whoever touches the workspace next (every fs_* call, every command's
// copy of it) first rolls forward any journal it finds (settleWorkspace),
// so a write-back cut off after its commit point is finished before
// anything is read or written, by whichever worker comes first. Rolling
// forward twice stores the same contents twice: no harm.

// Fault is called at the write-back's crash points (a worker sets it to
// its SIGKILL fault injection; tests only): "workspace:journaled" (the
// journal is durable, no file stored) and "workspace:after_file" (the
// first file is stored, the others not).
var Fault = func(string) {}

// journal is a write-back journal: every file of one write-back.
type journal struct {
	Files []journalFile `json:"files"`
}

type journalFile struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// commitFiles stores files (clean path → content, in the order of paths)
// as one write-back: directly when there is one, else through a journal.
func (w *workDir) commitFiles(ctx context.Context, env *Env, paths []string, files map[string][]byte) error {
	if len(paths) == 1 {
		return storeFile(ctx, env, w.lim.fs, w.who, paths[0], files[paths[0]])
	}
	var j journal
	for _, p := range paths {
		sum := sha256.Sum256(files[p])
		sha := hex.EncodeToString(sum[:])
		if err := env.Store.Put(ctx, blobkey.WorkspaceStaged(env.TreeID, sha), bytes.Clone(files[p])); err != nil {
			return fmt.Errorf("%s: stage %s: %w", w.who, p, err)
		}
		j.Files = append(j.Files, journalFile{Path: p, SHA256: sha})
	}
	raw, err := json.Marshal(j)
	if err != nil {
		return err
	}
	id := make([]byte, 12)
	_, _ = crand.Read(id)
	key := blobkey.WorkspaceJournal(env.TreeID, hex.EncodeToString(id))
	if err := env.Store.Put(ctx, key, raw); err != nil {
		return fmt.Errorf("%s: write-back journal: %w", w.who, err)
	}
	Fault("workspace:journaled")
	return rollForward(ctx, env, w.lim.fs, key, j, files)
}

// rollForward stores every file of journal j (contents from have, else
// staged), then deletes the journal and the staged contents.
func rollForward(ctx context.Context, env *Env, fc FSConfig, key string, j journal, have map[string][]byte) error {
	for i, f := range j.Files {
		data, ok := have[f.Path]
		if !ok {
			var err error
			data, err = env.Store.Get(ctx, blobkey.WorkspaceStaged(env.TreeID, f.SHA256))
			if errors.Is(err, blobstore.ErrNotFound) {
				if _, jerr := env.Store.Get(ctx, key); errors.Is(jerr, blobstore.ErrNotFound) {
					return nil // another worker rolled it forward meanwhile
				}
			}
			if err != nil {
				return fmt.Errorf("roll forward %s: %w", f.Path, err)
			}
		}
		if err := storeFile(ctx, env, fc, "write-back", f.Path, data); err != nil {
			return err
		}
		if i == 0 {
			Fault("workspace:after_file")
		}
	}
	if err := env.Store.Delete(ctx, key); err != nil && !errors.Is(err, blobstore.ErrNotFound) {
		return fmt.Errorf("delete write-back journal: %w", err)
	}
	for _, f := range j.Files {
		if err := env.Store.Delete(ctx, blobkey.WorkspaceStaged(env.TreeID, f.SHA256)); err != nil && !errors.Is(err, blobstore.ErrNotFound) {
			env.logger().Warn("delete staged workspace file", "tree", env.TreeID, "path", f.Path, "err", err)
		}
	}
	return nil
}

// settleWorkspace rolls forward every write-back journal of env's tree (a
// write-back cut off after its commit point), oldest key first.
func settleWorkspace(ctx context.Context, env *Env, fc FSConfig) error {
	if env.TreeID == "" || env.Store == nil {
		return nil
	}
	infos, err := env.Store.List(ctx, blobkey.WorkspaceJournals(env.TreeID))
	if err != nil {
		return fmt.Errorf("read the workspace's journals: %w", err)
	}
	for _, info := range infos {
		raw, err := env.Store.Get(ctx, info.Key)
		if errors.Is(err, blobstore.ErrNotFound) {
			continue // rolled forward by another meanwhile
		}
		if err != nil {
			return fmt.Errorf("read write-back journal: %w", err)
		}
		var j journal
		if err := json.Unmarshal(raw, &j); err != nil {
			return fmt.Errorf("write-back journal %s: %w", info.Key, err)
		}
		env.logger().Info("rolling forward a cut-off write-back", "tree", env.TreeID, "files", len(j.Files))
		if err := rollForward(ctx, env, fc, info.Key, j, nil); err != nil {
			return err
		}
	}
	return nil
}
