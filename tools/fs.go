package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/thread"
)

// Item ids of the built-in file tools.
const (
	FSWriteID = "rye/file-system/fs_write"
	FSReadID  = "rye/file-system/fs_read"
	FSListID  = "rye/file-system/fs_list"
)

// FSConfig tunes the file tools. The zero value gives the defaults.
type FSConfig struct {
	// MaxFileBytes caps a file's size after a write. Default 16 MiB.
	MaxFileBytes int
	// LockLease is how long a write lease lasts before others may break
	// it. A write that has used more than three quarters of it gives up
	// and retries rather than write late. Default 30 s.
	LockLease time.Duration
	// LockWait is how long a write waits for another write's lease before
	// it fails with a "busy" error result. Default 60 s.
	LockWait time.Duration
	// MaxListEntries caps fs_list's output. Default 1000.
	MaxListEntries int
	// Now is the clock for leases. Default time.Now.
	Now func() time.Time
}

// WithDefaults returns c with zero fields set to their defaults.
func (c FSConfig) WithDefaults() FSConfig {
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = 16 << 20
	}
	if c.LockLease <= 0 {
		c.LockLease = 30 * time.Second
	}
	if c.LockWait <= 0 {
		c.LockWait = 60 * time.Second
	}
	if c.MaxListEntries <= 0 {
		c.MaxListEntries = 1000
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Builtins returns the built-in file tools (fs_write, fs_read, fs_list)
// configured by cfg (zero value: defaults).
func Builtins(cfg FSConfig) []Tool {
	cfg = cfg.WithDefaults()
	return []Tool{&fsWrite{cfg}, &fsRead{cfg}, &fsList{cfg}}
}

func decodeInput(id string, input json.RawMessage, v any) error {
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage("{}")
	}
	if err := json.Unmarshal(input, v); err != nil {
		return fmt.Errorf("bad input for %s: %w", id, err)
	}
	return nil
}

func needWorkspace(env *Env) error {
	if env == nil || env.Store == nil || env.TreeID == "" {
		return errors.New("file tools need a tree id and a blob store in their Env")
	}
	return nil
}

// refusedPath sorts a store error of a file tool: a path through a
// symlink, which the local store refuses (blobstore.ErrSymlink; something
// other than spool planted it in the workspace), is the workspace's fault,
// so the model gets an error result; anything else is an infrastructure
// error for the worker.
func refusedPath(tool, p string, err error) (Result, error) {
	if errors.Is(err, blobstore.ErrSymlink) {
		return errorResult(fmt.Sprintf("%s %s: refused: %v", tool, p, blobstore.ErrSymlink)), nil
	}
	return Result{}, err
}

// --- fs_write ---

type fsWrite struct{ cfg FSConfig }

func (t *fsWrite) Def() thread.ToolDef {
	return thread.ToolDef{
		Name: FSWriteID,
		Description: "Write a text file in the workspace shared by this thread tree. " +
			"mode: overwrite (default) replaces the file, append adds to its end (creating it if missing), " +
			"create fails if the file already exists. Paths are relative to the workspace.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"path":{"type":"string","description":"file path relative to the workspace, e.g. notes/summary.md"},` +
			`"content":{"type":"string","description":"text to write"},` +
			`"mode":{"type":"string","enum":["overwrite","append","create"],"default":"overwrite"}},` +
			`"required":["path","content"]}`),
	}
}

// Run writes the file the input names under its write lease, trying again
// (three times in all) when a slow write outlived its lease and so wrote
// nothing. A bad input or a busy lease is an error result.
func (t *fsWrite) Run(ctx context.Context, env *Env, input json.RawMessage) (Result, error) {
	if err := needWorkspace(env); err != nil {
		return Result{}, err
	}
	if err := settleWorkspace(ctx, env, t.cfg); err != nil {
		return refusedPath(FSWriteID, "(the workspace)", err)
	}
	p, mode, content, err := t.request(input)
	if err != nil {
		return errorResult(err.Error()), nil
	}
	key := blobkey.WorkspaceFile(env.TreeID, p)
	// Retry when a slow write outlived its lease (then it wrote nothing).
	for attempt := 0; ; attempt++ {
		lk, err := lockFile(ctx, env.Store, blobkey.WorkspaceLock(env.TreeID, p), t.cfg.LockLease, t.cfg.LockWait, t.cfg.Now)
		if errors.Is(err, ErrBusy) {
			return errorResult(fmt.Sprintf("fs_write %s: %v; try again", p, err)), nil
		}
		if err != nil {
			return refusedPath("fs_write", p, err)
		}
		res, late, err := t.write(ctx, env.Store, lk, key, p, mode, content)
		if uerr := lk.unlock(ctx); uerr != nil && err == nil {
			env.logger().Warn("release write lease", "thread_id", env.ThreadID, "path", p, "err", uerr)
		}
		if !late || attempt == 2 {
			if late {
				return Result{}, fmt.Errorf("fs_write %s: the write lease ran out three times (store too slow for FSConfig.LockLease %s)", p, t.cfg.LockLease)
			}
			if err != nil {
				return refusedPath("fs_write", p, err)
			}
			return res, nil
		}
		env.logger().Warn("write lease ran out before the write; retrying", "thread_id", env.ThreadID, "path", p)
	}
}

// request reads fs_write's input: the clean path, the mode (overwrite by
// default) and the content, which the file limit caps. Its error is the
// model's, for an error result.
func (t *fsWrite) request(input json.RawMessage) (p, mode, content string, err error) {
	var in struct {
		Path    string  `json:"path"`
		Content *string `json:"content"`
		Mode    string  `json:"mode"`
	}
	if err := decodeInput(FSWriteID, input, &in); err != nil {
		return "", "", "", err
	}
	p, err = CleanPath(in.Path)
	if err != nil {
		return "", "", "", err
	}
	if in.Content == nil {
		return "", "", "", errors.New("fs_write: content is required (use \"\" for an empty file)")
	}
	mode = in.Mode
	if mode == "" {
		mode = "overwrite"
	}
	if mode != "overwrite" && mode != "append" && mode != "create" {
		return "", "", "", fmt.Errorf("fs_write: mode %q: want overwrite, append or create", in.Mode)
	}
	if len(*in.Content) > t.cfg.MaxFileBytes {
		return "", "", "", fmt.Errorf("fs_write: content is %d bytes, more than the %d-byte file limit", len(*in.Content), t.cfg.MaxFileBytes)
	}
	return p, mode, *in.Content, nil
}

// write does one write under lk. late reports that the lease ran short
// before anything was written.
func (t *fsWrite) write(ctx context.Context, store blobstore.Store, lk *fileLock, key, p, mode, content string) (res Result, late bool, err error) {
	margin := t.cfg.LockLease / 4
	switch mode {
	case "create":
		if _, err := store.Stat(ctx, key); err == nil {
			return errorResult(fmt.Sprintf("fs_write %s: file already exists (mode create); use mode overwrite or append", p)), false, nil
		} else if !errors.Is(err, blobstore.ErrNotFound) {
			return Result{}, false, fmt.Errorf("stat %s: %w", key, err)
		}
		if !lk.valid(margin) {
			return Result{}, true, nil
		}
		if err := store.PutIfAbsent(ctx, key, []byte(content)); errors.Is(err, blobstore.ErrExists) {
			return errorResult(fmt.Sprintf("fs_write %s: file already exists (mode create)", p)), false, nil
		} else if err != nil {
			return Result{}, false, fmt.Errorf("write %s: %w", key, err)
		}
		return Result{Output: fmt.Sprintf("created %s (%d bytes)", p, len(content))}, false, nil
	case "append":
		old, err := store.Get(ctx, key)
		if err != nil && !errors.Is(err, blobstore.ErrNotFound) {
			return Result{}, false, fmt.Errorf("read %s: %w", key, err)
		}
		if n := len(old) + len(content); n > t.cfg.MaxFileBytes {
			return errorResult(fmt.Sprintf("fs_write %s: appending would make the file %d bytes, more than the %d-byte limit", p, n, t.cfg.MaxFileBytes)), false, nil
		}
		if !lk.valid(margin) {
			return Result{}, true, nil
		}
		data := make([]byte, 0, len(old)+len(content))
		data = append(append(data, old...), content...)
		if err := store.Put(ctx, key, data); err != nil {
			return Result{}, false, fmt.Errorf("write %s: %w", key, err)
		}
		return Result{Output: fmt.Sprintf("appended %d bytes to %s (now %d bytes)", len(content), p, len(data))}, false, nil
	default: // overwrite
		if !lk.valid(margin) {
			return Result{}, true, nil
		}
		if err := store.Put(ctx, key, []byte(content)); err != nil {
			return Result{}, false, fmt.Errorf("write %s: %w", key, err)
		}
		return Result{Output: fmt.Sprintf("wrote %d bytes to %s", len(content), p)}, false, nil
	}
}

// --- fs_read ---

type fsRead struct{ cfg FSConfig }

func (t *fsRead) Def() thread.ToolDef {
	return thread.ToolDef{
		Name: FSReadID,
		Description: "Read a text file from the workspace shared by this thread tree, whole or by lines " +
			"(offset is the first line, from 1; limit the number of lines). " +
			"Instead of path, artifact reads the full text of a tool result that was cut short.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"path":{"type":"string","description":"file path relative to the workspace"},` +
			`"artifact":{"type":"string","description":"artifact key named in a cut tool result (instead of path)"},` +
			`"offset":{"type":"integer","minimum":1,"description":"first line to return, from 1"},` +
			`"limit":{"type":"integer","minimum":1,"description":"number of lines to return"}}}`),
	}
}

// Run reads the workspace file or the artifact the input names, whole or
// by lines. A bad input, a missing file or one that is not UTF-8 text is
// an error result.
func (t *fsRead) Run(ctx context.Context, env *Env, input json.RawMessage) (Result, error) {
	if err := needWorkspace(env); err != nil {
		return Result{}, err
	}
	if err := settleWorkspace(ctx, env, t.cfg); err != nil {
		return refusedPath(FSReadID, "(the workspace)", err)
	}
	var in struct {
		Path     string `json:"path"`
		Artifact string `json:"artifact"`
		Offset   int    `json:"offset"`
		Limit    int    `json:"limit"`
	}
	if err := decodeInput(FSReadID, input, &in); err != nil {
		return errorResult(err.Error()), nil
	}
	if in.Offset < 0 || in.Limit < 0 {
		return errorResult("fs_read: offset and limit must be positive"), nil
	}
	key, name, err := readTarget(env, in.Path, in.Artifact)
	if err != nil {
		return errorResult(err.Error()), nil
	}
	data, err := env.Store.Get(ctx, key)
	if errors.Is(err, blobstore.ErrNotFound) {
		return errorResult(fmt.Sprintf("fs_read: %s does not exist", name)), nil
	}
	if err != nil {
		return refusedPath("fs_read", name, fmt.Errorf("read %s: %w", key, err))
	}
	if !utf8.Valid(data) {
		return errorResult(fmt.Sprintf("fs_read: %s is not UTF-8 text (%d bytes)", name, len(data))), nil
	}
	text := string(data)
	if in.Offset == 0 && in.Limit == 0 {
		return Result{Output: text}, nil
	}
	return readLines(name, text, max(in.Offset, 1), in.Limit), nil
}

// readTarget is the key fs_read reads and the name its answers give it:
// the artifact of this thread named by its key, or the workspace file at
// the clean path p. Its error is the model's, for an error result.
func readTarget(env *Env, p, artifact string) (key, name string, err error) {
	switch {
	case p != "" && artifact != "":
		return "", "", errors.New("fs_read: give path or artifact, not both")
	case artifact != "":
		prefix := blobkey.Artifacts(env.ThreadID)
		rest, ok := strings.CutPrefix(artifact, prefix)
		if !ok || blobstore.ValidateKey(artifact) != nil || strings.Contains(rest, "/") {
			return "", "", fmt.Errorf("fs_read: artifact %q is not an artifact of this thread (want %s<name>)", artifact, prefix)
		}
		return artifact, artifact, nil
	default:
		c, err := CleanPath(p)
		if err != nil {
			return "", "", err
		}
		return blobkey.WorkspaceFile(env.TreeID, c), c, nil
	}
}

// readLines returns lines [offset, offset+limit) of text (limit 0: to the
// end), with a footer when the selection is not the whole file.
func readLines(name, text string, offset, limit int) Result {
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	n := len(lines)
	if offset > n {
		return errorResult(fmt.Sprintf("fs_read: offset %d is past the end of %s (%d lines)", offset, name, n))
	}
	end := n
	if limit > 0 {
		end = min(n, offset-1+limit)
	}
	out := strings.Join(lines[offset-1:end], "")
	if offset == 1 && end == n {
		return Result{Output: out}
	}
	if !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	footer := "[lines " + strconv.Itoa(offset) + "-" + strconv.Itoa(end) + " of " + strconv.Itoa(n)
	if end < n {
		footer += "; continue with offset " + strconv.Itoa(end+1)
	}
	return Result{Output: out + footer + "]"}
}

// --- fs_list ---

type fsList struct{ cfg FSConfig }

func (t *fsList) Def() thread.ToolDef {
	return thread.ToolDef{
		Name:        FSListID,
		Description: "List files in the workspace shared by this thread tree, under a directory (default: the whole workspace's top level). Directories end in /; files show their size in bytes.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"path":{"type":"string","description":"directory relative to the workspace; empty for the top"},` +
			`"recursive":{"type":"boolean","default":false,"description":"list every file below, not only the top level"}}}`),
	}
}

func (t *fsList) Run(ctx context.Context, env *Env, input json.RawMessage) (Result, error) {
	if err := needWorkspace(env); err != nil {
		return Result{}, err
	}
	if err := settleWorkspace(ctx, env, t.cfg); err != nil {
		return refusedPath(FSListID, "(the workspace)", err)
	}
	var in struct {
		Path      string `json:"path"`
		Recursive bool   `json:"recursive"`
	}
	if err := decodeInput(FSListID, input, &in); err != nil {
		return errorResult(err.Error()), nil
	}
	prefix := blobkey.WorkspaceFiles(env.TreeID)
	dir := ""
	if p := strings.TrimSuffix(in.Path, "/"); p != "" && p != "." {
		c, err := CleanPath(p)
		if err != nil {
			return errorResult(err.Error()), nil
		}
		dir = c + "/"
	}
	infos, err := env.Store.List(ctx, prefix+dir)
	if err != nil {
		return refusedPath("fs_list", in.Path, fmt.Errorf("list %s: %w", prefix+dir, err))
	}
	var b strings.Builder
	seen := map[string]bool{}
	n := 0
	for _, info := range infos {
		rel := strings.TrimPrefix(info.Key, prefix)
		line := rel + "\t" + strconv.FormatInt(info.Size, 10)
		if !in.Recursive {
			if i := strings.IndexByte(rel[len(dir):], '/'); i >= 0 {
				sub := rel[:len(dir)+i+1]
				if seen[sub] {
					continue
				}
				seen[sub] = true
				line = sub
			}
		}
		if n == t.cfg.MaxListEntries {
			fmt.Fprintf(&b, "[listing cut at %d entries; list a subdirectory]\n", n)
			break
		}
		b.WriteString(line + "\n")
		n++
	}
	if n == 0 {
		where := "the workspace"
		if dir != "" {
			where = path.Clean(dir) + "/"
		}
		return Result{Output: "(no files in " + where + ")"}, nil
	}
	return Result{Output: b.String()}, nil
}
