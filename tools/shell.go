package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/spool-run/spool/thread"
)

// ShellID is the built-in shell tool's item id (the reference's
// rye/bash): its capability is rye.execute.tool.rye.bash.
const ShellID = "rye/bash"

// CodeShellNotAllowed begins the error result of rye/bash on a worker
// not started with --allow-shell.
const CodeShellNotAllowed = "shell_not_allowed"

// ShellConfig tunes rye/bash. The zero value refuses every call: a worker
// runs shell commands only when it is started to (--allow-shell).
type ShellConfig struct {
	// Allowed lets the tool run commands.
	Allowed bool
	// Timeout is a call's time limit when it sets none. Default 60 s.
	Timeout time.Duration
	// MaxTimeout caps a call's timeout_seconds. Default 30 min.
	MaxTimeout time.Duration
	// MaxOutputBytes caps what the result quotes of stdout and of
	// stderr (each keeps its end). Default 64 KiB.
	MaxOutputBytes int
	// MaxWorkspaceBytes and MaxWorkspaceFiles bound the workspace the
	// command runs in (it is copied to the worker's disk for the call).
	// Defaults 256 MiB and 10,000 files.
	MaxWorkspaceBytes int64
	MaxWorkspaceFiles int
	// FS gives the file size limit and the write leases of write-back.
	FS FSConfig
	// External gives the environment the command gets (PassEnv,
	// PassEnvPrefixes; credentials never).
	External ExternalConfig
}

// WithDefaults returns c with zero fields set to their defaults.
func (c ShellConfig) WithDefaults() ShellConfig {
	if c.Timeout <= 0 {
		c.Timeout = time.Minute
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = 30 * time.Minute
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = 64 << 10
	}
	if c.MaxWorkspaceBytes <= 0 {
		c.MaxWorkspaceBytes = defaultMaxWorkspaceBytes
	}
	if c.MaxWorkspaceFiles <= 0 {
		c.MaxWorkspaceFiles = defaultMaxWorkspaceFiles
	}
	c.FS = c.FS.WithDefaults()
	c.External = c.External.WithDefaults()
	return c
}

// Shell is rye/bash: it runs a command with bash (sh when the worker has
// no bash) in a copy of the thread tree's workspace, and stores the files
// the command wrote or changed back to the workspace, where the file
// tools, child threads and later steps see them. Its result is
// {stdout, stderr, exit_code, written}, an error result when the command
// exits non-zero or times out (its process group is killed then). Files
// it deletes stay in the workspace; a file a sibling thread changed while
// the command ran is overwritten when the command changed it too (the
// last write wins, as with fs_write).
func Shell(cfg ShellConfig) Tool { return &shellTool{cfg: cfg.WithDefaults()} }

type shellTool struct{ cfg ShellConfig }

func (t *shellTool) Def() thread.ToolDef {
	return thread.ToolDef{
		Name: ShellID,
		Description: "Run a shell command (bash) in the workspace shared by this thread tree: the files there are its working " +
			"directory, and the files it writes or changes are stored back for the other threads and steps. Returns stdout, " +
			"stderr and exit_code; a non-zero exit is an error.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"command":{"type":"string","description":"the command line, run with bash -c"},` +
			`"timeout_seconds":{"type":"number","description":"kill it after this long (default 60)"}},` +
			`"required":["command"]}`),
	}
}

func (t *shellTool) Run(ctx context.Context, env *Env, input json.RawMessage) (Result, error) {
	var in struct {
		Command        string  `json:"command"`
		TimeoutSeconds float64 `json:"timeout_seconds"`
	}
	if err := decodeInput(ShellID, input, &in); err != nil {
		return errorResult(err.Error()), nil
	}
	if !t.cfg.Allowed {
		return errorResult(CodeShellNotAllowed + ": this worker runs no shell commands; start workers with --allow-shell to let rye/bash run"), nil
	}
	if strings.TrimSpace(in.Command) == "" {
		return errorResult("rye/bash: command is required"), nil
	}
	if err := needWorkspace(env); err != nil {
		return Result{}, err
	}
	timeout := t.cfg.Timeout
	if in.TimeoutSeconds > 0 {
		timeout = time.Duration(math.Min(in.TimeoutSeconds, t.cfg.MaxTimeout.Seconds()) * float64(time.Second))
	}
	wd, res, err := openWorkDir(ctx, env, t.limits(), ShellID)
	if err != nil || res != nil {
		return derefResult(res), err
	}
	defer wd.close()
	out, code, failed := t.run(ctx, env, in.Command, wd.dir, wd.tmp, timeout)
	if ctx.Err() != nil {
		return Result{}, fmt.Errorf("rye/bash: %w", ctx.Err())
	}
	if failed != "" {
		return errorResult(failed), nil
	}
	written, res, err := wd.writeBack(ctx, env)
	if err != nil || res != nil {
		return derefResult(res), err
	}
	out["exit_code"], out["written"] = code, written
	b, _ := json.Marshal(out)
	return Result{Output: string(b), IsError: code != 0}, nil
}

// limits are the bounds of the workspace a command runs in.
func (t *shellTool) limits() workLimits {
	return workLimits{maxBytes: t.cfg.MaxWorkspaceBytes, maxFiles: t.cfg.MaxWorkspaceFiles, fs: t.cfg.FS}
}

func derefResult(r *Result) Result {
	if r == nil {
		return Result{}
	}
	return *r
}

// run runs command in dir: stdout and stderr (each its end, at most
// MaxOutputBytes) and the exit code; failed says why it did not run to
// its end (a timeout, a failure to start).
func (t *shellTool) run(ctx context.Context, env *Env, command, dir, tmp string, timeout time.Duration) (map[string]any, int, string) {
	shell, flag := "bash", "-c"
	if _, err := exec.LookPath("bash"); err != nil {
		shell = "sh"
	}
	sealEnviron()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stdout := &tailWriter{max: t.cfg.MaxOutputBytes}
	stderr := &tailWriter{max: t.cfg.MaxOutputBytes}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.CommandContext(tctx, shell, flag, command)
	cmd.Dir, cmd.Env = dir, t.environ(env, tmp)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	setProcGroup(cmd)
	dieWithWorker(cmd)
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, 0, fmt.Sprintf("rye/bash could not start %s: %v", shell, err)
	}
	err := cmd.Wait()
	_ = killGroup(cmd.Process.Pid)
	if errors.Is(tctx.Err(), context.DeadlineExceeded) {
		return nil, 0, fmt.Sprintf("rye/bash: the command timed out after %s and was killed%s", timeout, stderr.quote())
	}
	code := 0
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	case err != nil && !errors.Is(err, exec.ErrWaitDelay):
		return nil, 0, fmt.Sprintf("rye/bash: %v%s", err, stderr.quote())
	}
	return map[string]any{"stdout": stdout.text(), "stderr": stderr.text()}, code, ""
}

// environ is the command's environment: the worker's variables that
// ExternalConfig passes (credentials never: ExternalConfig.passed),
// TMPDIR, and the thread's.
func (t *shellTool) environ(env *Env, tmp string) []string {
	vars := t.cfg.External.passed()
	vars["TMPDIR"], vars["SPOOL_THREAD_ID"], vars["SPOOL_TREE_ID"], vars["RYE_PARENT_THREAD_ID"] = tmp, env.ThreadID, env.TreeID, env.ThreadID
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// text is what w kept, saying so when the start was cut.
func (w *tailWriter) text() string {
	s := strings.ToValidUTF8(string(w.buf), "\uFFFD")
	if w.cut {
		return fmt.Sprintf("[output cut: its last %d bytes]\n", w.max) + s
	}
	return s
}
